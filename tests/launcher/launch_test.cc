// distgrad-run with real workers (tests/launcher/launch_worker.cc): the environment of 4 workers,
// a rendezvous through the launcher's Store, restarts that resume from a checkpoint, a failure
// with no restarts left, log files of several runs and attempts, Ctrl-C (and what the workers
// started), a SIGKILLed launcher, line-buffered workers, and a bad command line.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/net_util.h"
#include "tests/core/test_util.h"
#include "tests/rpc/multiprocess.h"

#ifndef DISTGRAD_RUN
#error "DISTGRAD_RUN must name the distgrad-run binary (tests/launcher/CMakeLists.txt)"
#endif

namespace distgrad::launcher {
namespace {

using rpc::testing::ProcessResult;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
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

// The text of the file at `path` ("" when there is none).
std::string file_text(const std::string& path) {
  std::ifstream file(path);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

// The names in directory `path`, sorted (none when there is no such directory).
std::vector<std::string> entries(const std::string& path) {
  std::vector<std::string> names;
  std::error_code missing;
  for (const auto& entry : std::filesystem::directory_iterator(path, missing)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// The log directory the launcher said it writes to ("" when it said none).
std::string logs_dir_of(const ProcessResult& result) {
  constexpr std::string_view kSaid = "distgrad-run: writing the workers' logs to ";
  const size_t start = result.output.find(kSaid);
  if (start == std::string::npos) return "";
  const size_t end = result.output.find('\n', start);
  return result.output.substr(start + kSaid.size(), end - start - kSaid.size());
}

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

TEST(DistgradRun, MaxRejoinsStartsALostWorkerAgainAtMostThatManyTimes) {
  const ProcessResult result = launch({"--nproc-per-node", "3", "--max-rejoins", "1", kWorker, "lost_twice"});
  ASSERT_EQ(result.exit_code, 0) << result;
  EXPECT_THAT(result.output, HasSubstr("[1] rank 1 rejoin (unset)")) << result;
  EXPECT_THAT(result.output, HasSubstr("exited with code 5; the other workers go on (--max-rejoins: it starts again)"))
      << result;
  EXPECT_THAT(result.output, HasSubstr("distgrad-run: starting rank 1 again into the running world (rejoin 1 of 1)"))
      << result;
  EXPECT_THAT(result.output, HasSubstr("[1] rank 1 rejoin 1")) << result;
  EXPECT_THAT(result.output, HasSubstr("exited with code 5; the other workers go on (--tolerate-lost-workers)"))
      << result;
  size_t starts = 0;
  for (size_t at = result.output.find("starting rank 1 again"); at != std::string::npos;
       at = result.output.find("starting rank 1 again", at + 1)) {
    ++starts;
  }
  EXPECT_EQ(starts, 1u) << result;
}

// `nodes` launchers of one elastic job on loopback with the c10d rendezvous (the first to bind
// the endpoint serves it): `distgrad-run --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:<free>
// args...` each; their outputs and exit codes.
std::vector<ProcessResult> launch_elastic(int nodes, std::vector<std::string> args) {
  const std::vector<std::string> rendezvous = {
      "--rdzv-backend", "c10d",         "--rdzv-endpoint", "127.0.0.1:" + std::to_string(rendezvous::pick_free_port()),
      "--rdzv-id",      "elastic-test", "--rdzv-conf",     "last_call_timeout=1,keep_alive_interval=0.5"};
  args.insert(args.begin(), rendezvous.begin(), rendezvous.end());
  rpc::testing::WorldOptions options;
  options.timeout = 90s;
  return rpc::testing::run_world(kRun, args, nodes, options);
}

TEST(DistgradRun, TwoElasticNodesFormOneWorldWithRanksByArrival) {
  const std::vector<ProcessResult> results =
      launch_elastic(2, {"--nnodes", "1:2", "--nproc-per-node", "2", kWorker, "rpc"});
  ASSERT_EQ(results.at(0).exit_code, 0) << results.at(0);
  ASSERT_EQ(results.at(1).exit_code, 0) << results.at(1);
  const std::string both = results[0].output + results[1].output;
  EXPECT_THAT(both, HasSubstr("elastic round 0: node 0 of 2, ranks 0-1 of 4")) << both;
  EXPECT_THAT(both, HasSubstr("elastic round 0: node 1 of 2, ranks 2-3 of 4")) << both;
  EXPECT_THAT(both, HasSubstr("[0] all 4 workers answered")) << both;
}

TEST(DistgradRun, AnElasticFailureReformsTheJobInTheNextRoundWhichResumes) {
  ScratchDir dir;
  const ProcessResult result = launch_elastic(1, {"--nnodes", "1", "--nproc-per-node", "2", "--max-restarts", "1",
                                                  kWorker, "checkpoint", dir.path()})
                                   .at(0);
  ASSERT_EQ(result.exit_code, 0) << result;
  EXPECT_THAT(result.output, HasSubstr("[0] starting at step 0 (restart 0)")) << result;
  EXPECT_THAT(result.output, HasSubstr("exited with code 3: crashing at step 5 on purpose; re-forming the job "
                                       "(restart 1 of 1)"))
      << result;
  EXPECT_THAT(result.output, HasSubstr("elastic round 1: node 0 of 1")) << result;
  EXPECT_THAT(result.output, HasSubstr("[0] starting at step 5 (restart 1)")) << result;
  EXPECT_THAT(result.output, HasSubstr("[0] finished 10 steps")) << result;
}

TEST(DistgradRun, AnElasticFailureWithNoRestartsLeftEndsTheJobOnEveryNode) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ProcessResult> results =
      launch_elastic(2, {"--nnodes", "2", "--nproc-per-node", "2", kWorker, "fail"});
  // Rank 2 is on node 1, whichever launcher that is: its launcher exits with the worker's code,
  // the other with 1, naming the failure.
  const bool first_is_node1 = results.at(0).exit_code == 7;
  const ProcessResult& node1 = results.at(first_is_node1 ? 0 : 1);
  const ProcessResult& node0 = results.at(first_is_node1 ? 1 : 0);
  EXPECT_EQ(node1.exit_code, 7) << node1;
  EXPECT_THAT(node1.output, HasSubstr("exited with code 7: [worker2] error: boom; no restarts left (--max-restarts 0): "
                                      "ending the job on every node"))
      << node1;
  EXPECT_EQ(node0.exit_code, 1) << node0;
  EXPECT_THAT(node0.output, HasSubstr("distgrad-run: the elastic rendezvous elastic-test at the Store at 127.0.0.1:"))
      << node0;
  EXPECT_THAT(node0.output, HasSubstr(" is closed: node 1: rank 2 (pid ")) << node0;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << "a node's workers were not stopped";
}

TEST(DistgradRun, AnElasticJobRefusesATraceAndAnUnprotectedRendezvousOffLoopback) {
  ScratchDir dir;
  const ProcessResult traced = launch_elastic(1, {"--trace", dir.path(), kWorker, "env"}).at(0);
  EXPECT_EQ(traced.exit_code, 1) << traced;
  EXPECT_THAT(traced.output, HasSubstr("--trace is not supported with an elastic rendezvous (--rdzv-backend c10d)"))
      << traced;
  rpc::testing::WorldOptions options;
  options.timeout = 30s;  // run_world leaves DISTGRAD_TOKEN out of the launcher's environment
  const ProcessResult no_token =
      rpc::testing::run_world(kRun, {"--rdzv-backend", "etcd", "--rdzv-endpoint", "10.0.0.9", kWorker, "env"}, 1,
                              options)
          .at(0);
  EXPECT_EQ(no_token.exit_code, 1) << no_token;
  EXPECT_THAT(no_token.output, HasSubstr("an elastic job whose rendezvous is not on loopback (10.0.0.9:2379) needs "
                                         "DISTGRAD_TOKEN"))
      << no_token;
}

TEST(DistgradRun, AnElasticRoundBelowMinNodesFailsAfterTheJoinTimeout) {
  const std::vector<ProcessResult> results =
      launch_elastic(1, {"--nnodes", "2:3", "--rdzv-conf", "join_timeout=1", kWorker, "env"});
  EXPECT_EQ(results.at(0).exit_code, 1) << results.at(0);
  EXPECT_THAT(results[0].output, HasSubstr("did not form within 1 s (join_timeout): round 0 has 1 of at least 2 nodes"))
      << results[0];
  EXPECT_THAT(results[0].output, Not(HasSubstr("RANK="))) << "a worker started";
}

TEST(DistgradRun, RedirectsSendAStreamToTheLogFilesOnly) {
  ScratchDir dir;
  const ProcessResult result = launch(
      {"--nproc-per-node", "2", "--log-dir", dir.path(), "--run-id", "job7", "--redirects", "1", kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result;
  EXPECT_THAT(result.output, Not(HasSubstr("RANK=1 LOCAL_RANK=1"))) << result;
  // Note [Log files]: D/<run-id>_XXXXXX/attempt_<k>/<local rank>/stdout.log, the directory said once.
  const std::vector<std::string> runs = dir.listing();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_THAT(runs[0], StartsWith("job7_"));
  EXPECT_EQ(logs_dir_of(result), dir.path() + "/" + runs[0]) << result;
  const std::string rank_dir = dir.path() + "/" + runs[0] + "/attempt_0/1";
  EXPECT_THAT(file_text(rank_dir + "/stdout.log"), HasSubstr("RANK=1 LOCAL_RANK=1 WORLD_SIZE=2"));
  EXPECT_THAT(entries(rank_dir), ElementsAre("stdout.log"));  // stderr is not redirected
}

// The run id is "none" unless given, so runs share it: each writes into a new directory of its
// own, and a second run leaves the first one's logs as they were.
TEST(DistgradRun, TwoRunsWithTheSameRunIdKeepTheirOwnLogs) {
  ScratchDir dir;
  const ProcessResult first =
      launch({"--nproc-per-node", "2", "--log-dir", dir.path(), "--tee", "3", kWorker, "echo", "first run"});
  ASSERT_EQ(first.exit_code, 0) << first;
  const ProcessResult second =
      launch({"--nproc-per-node", "2", "--log-dir", dir.path(), "--tee", "3", kWorker, "echo", "second run"});
  ASSERT_EQ(second.exit_code, 0) << second;
  const std::vector<std::string> runs = dir.listing();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_THAT(runs, ::testing::Each(StartsWith("none_")));
  const std::string first_dir = logs_dir_of(first), second_dir = logs_dir_of(second);
  EXPECT_THAT((std::vector<std::string>{first_dir, second_dir}),
              ::testing::UnorderedElementsAre(dir.path() + "/" + runs[0], dir.path() + "/" + runs[1]))
      << first << second;
  for (const auto& [run_dir, text] : {std::pair{first_dir, "first run"}, std::pair{second_dir, "second run"}}) {
    EXPECT_THAT(entries(run_dir), ElementsAre("attempt_0"));
    for (const std::string rank : {"0", "1"}) {
      const std::string rank_dir = run_dir + "/attempt_0/" + rank;
      EXPECT_EQ(file_text(rank_dir + "/stdout.log"), std::string(text) + " from rank " + rank + "\n") << rank_dir;
      EXPECT_EQ(file_text(rank_dir + "/stderr.log"), std::string(text) + " on stderr from rank " + rank + "\n")
          << rank_dir;
    }
  }
  EXPECT_THAT(second.output, HasSubstr("[1] second run on stderr from rank 1")) << second;  // --tee: also shown
}

TEST(DistgradRun, ARestartWritesItsLogsBesideThoseOfTheFailedAttempt) {
  ScratchDir checkpoints, logs;
  const ProcessResult result = launch({"--nproc-per-node", "2", "--max-restarts", "2", "--log-dir", logs.path(),
                                       "--run-id", "job7", "--tee", "3", kWorker, "checkpoint", checkpoints.path()});
  ASSERT_EQ(result.exit_code, 0) << result;
  const std::string run_dir = logs_dir_of(result);
  ASSERT_THAT(run_dir, StartsWith(logs.path() + "/job7_")) << result;
  EXPECT_THAT(entries(run_dir), ElementsAre("attempt_0", "attempt_1"));
  EXPECT_EQ(file_text(run_dir + "/attempt_0/0/stdout.log"), "starting at step 0 (restart 0)\n");
  EXPECT_EQ(file_text(run_dir + "/attempt_0/0/stderr.log"), "crashing at step 5 on purpose\n");
  EXPECT_EQ(file_text(run_dir + "/attempt_1/0/stdout.log"), "starting at step 5 (restart 1)\nfinished 10 steps\n");
  EXPECT_EQ(file_text(run_dir + "/attempt_1/0/stderr.log"), "");
  EXPECT_THAT(entries(run_dir + "/attempt_1/1"), ElementsAre("stderr.log", "stdout.log"));
  EXPECT_EQ(logs.listing().size(), 1u);  // the directory is said, and made, once
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

// --trace on a job whose workers record nothing (no RPC, no process group): the job runs as
// usual, old trace files are cleared first, and the merge says what it missed.
TEST(DistgradRun, TraceOfAJobThatRecordedNothingSaysSo) {
  ScratchDir dir;
  std::ofstream(dir.file("trace-1.jsonl")) << "{\"type\":\"process\",\"pid\":1,\"rank\":0,\"name\":\"stale\"}\n";
  const ProcessResult result = launch({"--trace", dir.path(), kWorker, "env"});
  EXPECT_EQ(result.exit_code, 0) << result;
  EXPECT_THAT(result.output,
              HasSubstr("distgrad-run: could not merge the trace in " + dir.path() +
                        ": trace merge: expected trace-<pid>.jsonl files in " + dir.path() + ", found none"))
      << result;
  EXPECT_THAT(dir.listing(), ::testing::IsEmpty());
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

// Starts `distgrad-run --standalone args...` in a process group of its own, its stdout and stderr
// into `output` (a pipe's write end) when given; returns its pid.
pid_t start_launcher(const std::vector<std::string>& args, int output = -1) {
  std::vector<std::string> words = {kRun, "--standalone"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  const pid_t launcher = fork();
  if (launcher == 0) {
    setpgid(0, 0);
    if (output >= 0) {
      dup2(output, STDOUT_FILENO);
      dup2(output, STDERR_FILENO);
    }
    execv(kRun, argv.data());
    _exit(127);
  }
  return launcher;
}

// Starts `distgrad-run --standalone --nproc-per-node 2 launch_worker MODE DIR`.
pid_t start_launcher(const std::string& mode, const ScratchDir& dir) {
  return start_launcher({"--nproc-per-node", "2", kWorker, mode, dir.path()});
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

// A preemption notice (SIGUSR1) sent to the launcher reaches every worker, which saves its step
// and ends; the launcher, which SIGUSR1 would otherwise end, exits 0 with them.
TEST(DistgradRun, PassesAPreemptionNoticeOnToEveryWorker) {
  ScratchDir dir;
  const pid_t launcher = start_launcher("preemptible", dir);
  ASSERT_GT(launcher, 0);
  const std::vector<pid_t> workers = wait_for_pids(dir, "pid");
  ASSERT_EQ(workers.size(), 2u) << "the workers did not start watching within 15 s";
  kill(launcher, SIGUSR1);
  const int status = wait_for_exit(launcher);
  ASSERT_NE(status, -1) << "distgrad-run did not exit within 15 s of SIGUSR1";
  ASSERT_TRUE(WIFEXITED(status)) << "distgrad-run was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (int rank = 0; rank < 2; ++rank) {
    int step = -1;
    EXPECT_TRUE(std::ifstream(dir.path() + "/step" + std::to_string(rank)) >> step)
        << "rank " << rank << " saved no step";
    EXPECT_GE(step, 0);
  }
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

// Reads `fd` into `output` until it holds `wanted`, the pipe is closed or `timeout` passed;
// whether it holds `wanted`.
bool read_until(int fd, std::string& output, const std::string& wanted, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (output.find(wanted) == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left <= 0ms) return false;
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(left.count())) <= 0) continue;
    char buffer[4096];
    const ssize_t count = ::read(fd, buffer, sizeof(buffer));
    if (count == 0 || (count < 0 && errno != EINTR)) return false;
    if (count > 0) output.append(buffer, static_cast<size_t>(count));
  }
  return true;
}

// Runs `launch_worker unflushed` (a stdout line left to C stdio's buffering, then a stderr line,
// then a minute's sleep) under `distgrad-run --standalone flags...`; returns what the launcher
// printed up to the worker's stderr line (within 30 s) and for one second more, while the worker
// sleeps, then stops the launcher.
std::string output_while_the_worker_sleeps(std::vector<std::string> flags) {
  int output[2];
  if (pipe2(output, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return "";
  }
  flags.insert(flags.end(), {kWorker, "unflushed"});
  const pid_t launcher = start_launcher(flags, output[1]);
  close(output[1]);
  std::string text;
  EXPECT_TRUE(read_until(output[0], text, "[0] then sleeping\n", 30s)) << "no stderr line within 30 s:\n" << text;
  read_until(output[0], text, "[0] a line without fflush\n", 1s);
  interrupt(launcher);
  close(output[0]);
  return text;
}

// Note [Line-buffered workers]: a line printed with printf reaches the console when printed,
// not when the program exits (or never, as here, where it is stopped while it sleeps).
TEST(DistgradRun, AWorkersStdoutIsLineBufferedThroughThePipe) {
  const std::string output = output_while_the_worker_sleeps({});
  if (output.find("libstdbuf.so was not found") != std::string::npos) GTEST_SKIP() << output;
  // Written before the stderr line, so read and printed no later than it.
  const size_t line = output.find("[0] a line without fflush\n");
  ASSERT_NE(line, std::string::npos) << output;
  EXPECT_LT(line, output.find("[0] then sleeping\n")) << output;
}

TEST(DistgradRun, NoLineBufferedLeavesTheWorkersStdoutBlockBuffered) {
  const std::string output = output_while_the_worker_sleeps({"--no-line-buffered"});
  EXPECT_THAT(output, HasSubstr("[0] then sleeping\n")) << output;
  EXPECT_THAT(output, Not(HasSubstr("a line without fflush"))) << output;
  EXPECT_THAT(output, Not(HasSubstr("libstdbuf"))) << output;  // no warning either
}

}  // namespace
}  // namespace distgrad::launcher
