// The program the launcher tests start under distgrad-run: `launch_worker MODE [DIR]`.
//   env         prints the variables the launcher set
//   rpc         rendezvous through the launcher's Store; rank 0 calls every worker
//   checkpoint  rank 0 counts 10 steps, saving the next step in DIR/step after each, and fails
//               at step 5 of the first attempt; a restart resumes from the file
//   fail        rank 2 fails with exit code 7 and an error line; the others wait to be stopped
//   sleep       writes its pid to DIR/pid<rank>, then sleeps
//   stubborn_child  starts a child that ignores SIGINT and SIGTERM and writes its pid to
//               DIR/child<rank>, then sleeps as `sleep`
//   late        rank 1 starts its rendezvous 30 s late; the others wait for it 3 s at most
//   rpc_fail_first  as rpc, but rank 3 fails at once on the first attempt
//   progress    prints a line redrawn with '\r' (as a progress bar), then a last one
//   echo        prints "DIR from rank R" to stdout and "DIR on stderr from rank R" to stderr
//               (DIR is any text here)
//   unflushed   prints a line to stdout (no fflush, no setvbuf), then one to stderr, then sleeps
//   elastic     an elastic job's training loop: rank 0 counts 40 steps of 100 ms from the step
//               saved in DIR/step (its checkpoint), calling every worker at each step and
//               printing "step S of world W in round R"; at the end "finished 40 steps"
//   lost_twice  prints "rank R rejoin R" with DISTGRAD_REJOIN; rank 1 then fails with exit code 5
//               (every time it starts), the others exit 0 after 2 s
//   preemptible watches for preemption notices (rendezvous/preemption.h) and counts steps of
//               10 ms (its pid in DIR/pid<rank> once it watches); on a notice it saves the step
//               in DIR/step<rank>, prints "rank R
//               preempted at step N", and rank 0 requeues its Slurm job when it is in one; exits
//               0. Started with a saved step it prints "rank R resumed at step N" and exits 0. No
//               notice within 60 s: exit 4
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "dist_autograd/init_rpc.h"
#include "rendezvous/preemption.h"
#include "rendezvous/world.h"
#include "rpc/rpc.h"

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "(unset)";
}

std::string whoami() { return distgrad::rpc::get_worker_name(); }
DISTGRAD_REMOTE(whoami);

int checkpoint(const std::string& dir) {
  if (env("RANK") != "0") return 0;
  const std::string path = dir + "/step";
  int step = 0;
  std::ifstream(path) >> step;
  std::printf("starting at step %d (restart %s)\n", step, env("DISTGRAD_RESTART_COUNT").c_str());
  for (; step < 10; ++step) {
    if (step == 5 && env("DISTGRAD_RESTART_COUNT") == "0") {
      std::fprintf(stderr, "crashing at step 5 on purpose\n");
      return 3;
    }
    std::ofstream(path) << step + 1;
  }
  std::printf("finished 10 steps\n");
  return 0;
}

int elastic(const std::string& dir) {
  return distgrad::rpc::auto_init_rpc(nullptr, distgrad::rpc::rank_zero_only([&] {
                                        const std::string path = dir + "/step";
                                        int step = 0;
                                        std::ifstream(path) >> step;
                                        const int world = distgrad::rpc::get_world_size();
                                        for (; step < 40; ++step) {
                                          for (int rank = 0; rank < world; ++rank)
                                            distgrad::rpc::rpc_sync(rank, &whoami);
                                          std::printf("step %d of world %d in round %s\n", step, world,
                                                      env("DISTGRAD_RESTART_COUNT").c_str());
                                          std::fflush(stdout);
                                          std::ofstream(path + ".next") << step + 1;
                                          std::filesystem::rename(path + ".next", path);
                                          std::this_thread::sleep_for(std::chrono::milliseconds(100));
                                        }
                                        std::printf("finished 40 steps\n");
                                      }));
}

int preemptible(const std::string& dir) {
  const int rank = distgrad::rendezvous::world_info().rank;
  const std::string path = dir + "/step" + std::to_string(rank);
  int step = -1;
  std::ifstream(path) >> step;
  if (step >= 0) {
    std::printf("rank %d resumed at step %d\n", rank, step);
    return 0;
  }
  distgrad::watch_for_preemption();
  std::ofstream(dir + "/pid" + std::to_string(rank)) << getpid();
  std::printf("rank %d waiting for a preemption notice\n", rank);
  std::fflush(stdout);
  for (step = 0; step < 6000; ++step) {
    if (distgrad::preemption_requested()) {
      std::ofstream(path) << step;
      std::printf("rank %d preempted at step %d\n", rank, step);
      std::fflush(stdout);
      if (rank == 0 && std::getenv("SLURM_JOB_ID") != nullptr) distgrad::requeue_slurm_job();
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "rank %d: no preemption notice within 60 s\n", rank);
  return 4;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  const std::string dir = argc > 2 ? argv[2] : ".";
  if (mode == "env") {
    std::printf(
        "RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s ROLE_RANK=%s "
        "ROLE_WORLD_SIZE=%s DISTGRAD_RESTART_COUNT=%s DISTGRAD_MAX_RESTARTS=%s DISTGRAD_RUN_ID=%s "
        "OMP_NUM_THREADS=%s token_length=%zu\n",
        env("RANK").c_str(), env("LOCAL_RANK").c_str(), env("WORLD_SIZE").c_str(), env("LOCAL_WORLD_SIZE").c_str(),
        env("GROUP_RANK").c_str(), env("ROLE_RANK").c_str(), env("ROLE_WORLD_SIZE").c_str(),
        env("DISTGRAD_RESTART_COUNT").c_str(), env("DISTGRAD_MAX_RESTARTS").c_str(), env("DISTGRAD_RUN_ID").c_str(),
        env("OMP_NUM_THREADS").c_str(), env("DISTGRAD_TOKEN").size());
    return 0;
  }
  if (mode == "rpc_fail_first" && env("RANK") == "3" && env("DISTGRAD_RESTART_COUNT") == "0") {
    std::fprintf(stderr, "failing on purpose in the first attempt\n");
    return 5;
  }
  if (mode == "rpc" || mode == "rpc_fail_first") {
    return distgrad::rpc::auto_init_rpc(
        nullptr, distgrad::rpc::rank_zero_only([] {
          const int world = distgrad::rpc::get_world_size();
          for (int rank = 0; rank < world; ++rank) {
            if (distgrad::rpc::rpc_sync(rank, &whoami) != distgrad::rpc::get_worker_name(rank)) {
              throw std::runtime_error("a worker gave another name");
            }
          }
          std::printf("all %d workers answered\n", world);
        }));
  }
  if (mode == "checkpoint") return checkpoint(dir);
  if (mode == "preemptible") return preemptible(dir);
  if (mode == "elastic") return elastic(dir);
  if (mode == "lost_twice") {
    std::printf("rank %s rejoin %s\n", env("RANK").c_str(), env("DISTGRAD_REJOIN").c_str());
    std::fflush(stdout);
    if (env("RANK") == "1") return 5;
    std::this_thread::sleep_for(std::chrono::seconds(2));
    return 0;
  }
  if (mode == "progress") {
    std::printf("step 1\rstep 2\rdone\n");
    return 0;
  }
  if (mode == "echo") {
    std::printf("%s from rank %s\n", dir.c_str(), env("RANK").c_str());
    std::fprintf(stderr, "%s on stderr from rank %s\n", dir.c_str(), env("RANK").c_str());
    return 0;
  }
  if (mode == "unflushed") {
    std::printf("a line without fflush\n");
    std::fprintf(stderr, "then sleeping\n");
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (mode == "late") {
    if (env("RANK") == "1") std::this_thread::sleep_for(std::chrono::seconds(30));
    distgrad::rpc::RpcOptions options;
    options.init_timeout = std::chrono::seconds(3);
    return distgrad::rpc::auto_init_rpc(nullptr, nullptr, options);
  }
  if (mode == "fail") {
    if (env("RANK") == "2") {
      std::fprintf(stderr, "[worker2] error: boom\n");
      return 7;
    }
    std::this_thread::sleep_for(std::chrono::seconds(30));
    return 0;
  }
  if (mode == "stubborn_child") {
    const pid_t child = fork();
    if (child == 0) {
      std::signal(SIGINT, SIG_IGN);
      ::close(STDOUT_FILENO);
      ::close(STDERR_FILENO);
      std::signal(SIGTERM, SIG_IGN);
      std::ofstream(dir + "/child" + env("RANK")) << getpid();
      std::this_thread::sleep_for(std::chrono::seconds(60));
      _exit(0);
    }
    mode = "sleep";
  }
  if (mode == "sleep") {
    std::ofstream(dir + "/pid" + env("RANK")) << getpid();
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  std::fprintf(stderr,
               "launch_worker: unknown mode '%s' (env, rpc, rpc_fail_first, checkpoint, fail, sleep, stubborn_child, "
               "late, progress, echo, unflushed)\n",
               mode.c_str());
  return 2;
}
