// distgrad-run with real workers (tests/launcher/launch_worker.cc): the environment of 4 workers,
// a rendezvous through the launcher's Store, restarts that resume from a checkpoint, a failure
// with no restarts left, Ctrl-C (and what the workers started), a SIGKILLed launcher, and a bad
// command line.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/test_util.h"
#include "tests/rpc/multiprocess.h"

#ifndef DISTGRAD_RUN
#error "DISTGRAD_RUN must name the distgrad-run binary (tests/launcher/CMakeLists.txt)"
#endif

namespace distgrad::launcher {
namespace {

using rpc::testing::ProcessResult;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kRun[] = DISTGRAD_RUN;
constexpr char kWorker[] = DISTGRAD_LAUNCH_WORKER;

// Runs `distgrad-run --standalone args...` (a free port: tests run side by side) as one process:
// its output and exit code.
ProcessResult launch(std::vector<std::string> args) {
  args.insert(args.begin(), "--standalone");
  rpc::testing::WorldOptions options;
  options.timeout = 90s;
  return rpc::testing::run_world(kRun, args, 1, options).at(0);
}

using distgrad::testing::ScratchDir;

TEST(DistgradRun, FourWorkersGetTheLauncherEnvironment) {
  const ProcessResult result = launch({"--nproc-per-node", "4", "--run-id", "job7", kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_THAT(result.output, HasSubstr("[" + r + "] RANK=" + r + " LOCAL_RANK=" + r +
                                         " WORLD_SIZE=4 LOCAL_WORLD_SIZE=4 GROUP_RANK=0 ROLE_RANK=" + r +
                                         " ROLE_WORLD_SIZE=4 DISTGRAD_RESTART_COUNT=0 DISTGRAD_MAX_RESTARTS=0 "
                                         "DISTGRAD_RUN_ID=job7 OMP_NUM_THREADS=1 token_length=32"))
        << result;
  }
}

TEST(DistgradRun, WorkersRendezvousThroughTheLaunchersStore) {
  const ProcessResult result = launch({"--nproc-per-node", "4", kWorker, "rpc"});
  ASSERT_EQ(result.exit_code, 0) << result;
  EXPECT_THAT(result.output, HasSubstr("[0] all 4 workers answered")) << result;
}

TEST(DistgradRun, AFailedWorkerRestartsTheGroupWhichResumesFromItsCheckpoint) {
  ScratchDir dir;
  const ProcessResult result =
      launch({"--nproc-per-node", "2", "--max-restarts", "2", kWorker, "checkpoint", dir.path()});
  ASSERT_EQ(result.exit_code, 0) << result;
  EXPECT_THAT(result.output, HasSubstr("[0] starting at step 0 (restart 0)")) << result;
  EXPECT_THAT(result.output, HasSubstr("rank 0 (pid ")) << result;
  EXPECT_THAT(result.output, HasSubstr("exited with code 3: crashing at step 5 on purpose; restarting the workers "
                                       "(restart 1 of 2)"))
      << result;
  EXPECT_THAT(result.output, HasSubstr("[0] starting at step 5 (restart 1)")) << result;
  EXPECT_THAT(result.output, HasSubstr("[0] finished 10 steps")) << result;
}

TEST(DistgradRun, AFailureWithNoRestartsLeftEndsTheJobNamingTheRank) {
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult result = launch({"--nproc-per-node", "3", kWorker, "fail"});
  EXPECT_EQ(result.exit_code, 7) << result;
  EXPECT_THAT(result.output, HasSubstr("[2] [worker2] error: boom")) << result;
  EXPECT_THAT(result.output, HasSubstr("distgrad-run: rank 2 (pid ")) << result;
  EXPECT_THAT(result.output, HasSubstr("exited with code 7: [worker2] error: boom")) << result;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s) << "the other workers were not stopped";
}

TEST(DistgradRun, AWorkerLateForTheRendezvousFailsTheJobNamingIt) {
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult result = launch({"--nproc-per-node", "3", kWorker, "late"});
  EXPECT_NE(result.exit_code, 0) << result;
  EXPECT_THAT(result.output, HasSubstr("for workers to start, and these did not: 1 (of 3)")) << result;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 25s) << "the late worker was not stopped";
}

TEST(DistgradRun, RedirectsSendAStreamToTheLogFilesOnly) {
  ScratchDir dir;
  const ProcessResult result = launch(
      {"--nproc-per-node", "2", "--log-dir", dir.path(), "--run-id", "job7", "--redirects", "1", kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result;
  EXPECT_THAT(result.output, ::testing::Not(HasSubstr("RANK=1 LOCAL_RANK=1"))) << result;
  std::ifstream log(dir.path() + "/job7/attempt0/rank1.stdout");
  const std::string logged((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_THAT(logged, HasSubstr("RANK=1 LOCAL_RANK=1 WORLD_SIZE=2"));
}

TEST(DistgradRun, ACarriageReturnEndsALineAndIsKept) {
  const ProcessResult result = launch({kWorker, "progress"});
  ASSERT_EQ(result.exit_code, 0) << result;
  EXPECT_THAT(result.output, HasSubstr("[0] step 1\r[0] step 2\r[0] done\n")) << result;
}

TEST(DistgradRun, AProgramThatCannotRunExitsWith127NamingIt) {
  const ProcessResult result = launch({"/nonexistent/program"});
  EXPECT_EQ(result.exit_code, 127) << result;
  EXPECT_THAT(result.output, HasSubstr("exited with code 127: distgrad-run: cannot run (not found, or not "
                                       "executable): /nonexistent/program"))
      << result;
}

TEST(DistgradRun, LogSettingsAndTokensAreChecked) {
  const ProcessResult no_dir = launch({"--redirects", "3", kWorker, "env"});
  EXPECT_EQ(no_dir.exit_code, 1) << no_dir;
  EXPECT_THAT(no_dir.output, HasSubstr("--redirects 3 and --tee 0 write log files, which need --log-dir")) << no_dir;
  ScratchDir dir;
  const ProcessResult per_rank = launch({"--log-dir", dir.path(), "--tee", "0:1", kWorker, "env"});
  EXPECT_EQ(per_rank.exit_code, 1) << per_rank;
  EXPECT_THAT(per_rank.output, HasSubstr("--tee 0:1 is not 0 (none), 1 (stdout), 2 (stderr) or 3 (both); per-rank "
                                         "settings are not supported"))
      << per_rank;
  rpc::testing::WorldOptions options;
  options.timeout = 30s;  // run_world leaves DISTGRAD_TOKEN out of the launcher's environment
  const ProcessResult no_token = rpc::testing::run_world(kRun, {"--nnodes", "2", kWorker, "env"}, 1, options).at(0);
  EXPECT_EQ(no_token.exit_code, 1) << no_token;
  EXPECT_THAT(no_token.output, HasSubstr("a job of 2 nodes needs DISTGRAD_TOKEN set to the same secret on every node"))
      << no_token;
}

TEST(DistgradRun, BadCommandLineIsAUsageError) {
  const ProcessResult result = launch({"--nprocs", "2", kWorker, "env"});
  EXPECT_EQ(result.exit_code, 2) << result;
  EXPECT_THAT(result.output, HasSubstr("unknown option --nprocs")) << result;
  EXPECT_THAT(result.output, HasSubstr("usage: distgrad-run")) << result;
  const ProcessResult help = launch({"--help"});
  EXPECT_EQ(help.exit_code, 0) << help;
  EXPECT_THAT(help.output, HasSubstr("--max-restarts M")) << help;
}

// Starts `distgrad-run --standalone --nproc-per-node 2 launch_worker MODE DIR` in a process group
// of its own; returns its pid.
pid_t start_launcher(const std::string& mode, const ScratchDir& dir) {
  const pid_t launcher = fork();
  if (launcher == 0) {
    setpgid(0, 0);
    execl(kRun, kRun, "--standalone", "--nproc-per-node", "2", kWorker, mode.c_str(), dir.path().c_str(), nullptr);
    _exit(127);
  }
  return launcher;
}

// The pids the two ranks wrote to DIR/<prefix><rank>, once both did (empty after 15 s).
std::vector<pid_t> wait_for_pids(const ScratchDir& dir, const std::string& prefix) {
  std::vector<pid_t> pids;
  for (int waited = 0; waited < 300 && pids.size() < 2; ++waited) {
    std::this_thread::sleep_for(50ms);
    pids.clear();
    for (int rank = 0; rank < 2; ++rank) {
      pid_t pid = 0;
      if (std::ifstream(dir.path() + "/" + prefix + std::to_string(rank)) >> pid && pid > 0) pids.push_back(pid);
    }
  }
  return pids;
}

// Waits up to 15 s for the launcher to exit; its wait status, or -1 (then it was killed).
int wait_for_exit(pid_t launcher) {
  int status = 0;
  for (int waited = 0; waited < 300; ++waited) {
    if (waitpid(launcher, &status, WNOHANG) == launcher) return status;
    std::this_thread::sleep_for(50ms);
  }
  kill(-launcher, SIGKILL);
  waitpid(launcher, &status, 0);
  return -1;
}

// Whether process `pid` is gone within 5 s (a zombie waiting for its reaper counts as gone).
bool gone(pid_t pid) {
  for (int waited = 0; waited < 100; ++waited) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string pid_field, name, state;
    if (!(stat >> pid_field >> name >> state) || state == "Z") return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// Sends SIGINT to `launcher`, which must exit with 128 + SIGINT within 15 s.
void interrupt(pid_t launcher) {
  kill(launcher, SIGINT);
  const int status = wait_for_exit(launcher);
  ASSERT_NE(status, -1) << "distgrad-run did not exit within 15 s of SIGINT";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
}

// Requires every one of `pids` gone; kills the survivors, so that the test leaves nothing behind.
void expect_gone(const std::vector<pid_t>& pids, const std::string& what) {
  for (pid_t pid : pids) {
    if (gone(pid)) continue;
    ADD_FAILURE() << what << " " << pid << " is still alive";
    kill(pid, SIGKILL);
  }
}

TEST(DistgradRun, InterruptStopsEveryWorkerAndLeavesNoOrphan) {
  ScratchDir dir;
  const pid_t launcher = start_launcher("sleep", dir);
  ASSERT_GT(launcher, 0);
  const std::vector<pid_t> workers = wait_for_pids(dir, "pid");
  ASSERT_EQ(workers.size(), 2u) << "the workers did not start within 15 s";
  interrupt(launcher);
  expect_gone(workers, "worker");
}

// A worker's child that ignores SIGINT and SIGTERM (in the worker's process group) is stopped
// too, although its worker ended at once: stopping the launcher stops the job.
TEST(DistgradRun, InterruptStopsWhatTheWorkersStartedEvenWhatIgnoresIt) {
  ScratchDir dir;
  const pid_t launcher = start_launcher("stubborn_child", dir);
  ASSERT_GT(launcher, 0);
  const std::vector<pid_t> children = wait_for_pids(dir, "child");
  ASSERT_EQ(children.size(), 2u) << "the workers' children did not start within 15 s";
  ASSERT_EQ(wait_for_pids(dir, "pid").size(), 2u);
  interrupt(launcher);
  expect_gone(children, "a worker's child, outliving the launcher:");
}

// A launcher killed outright (SIGKILL: it runs no code) takes its workers with it.
TEST(DistgradRun, AKilledLauncherTakesItsWorkersWithIt) {
  ScratchDir dir;
  const pid_t launcher = start_launcher("sleep", dir);
  ASSERT_GT(launcher, 0);
  const std::vector<pid_t> workers = wait_for_pids(dir, "pid");
  ASSERT_EQ(workers.size(), 2u) << "the workers did not start within 15 s";
  kill(launcher, SIGKILL);
  int status = 0;
  waitpid(launcher, &status, 0);
  expect_gone(workers, "a worker of the SIGKILLed launcher:");
}

}  // namespace
}  // namespace distgrad::launcher
