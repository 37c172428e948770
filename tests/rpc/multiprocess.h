// A test helper that runs a world of real processes on loopback, as a launcher would.
//
// run_world starts `world_size` copies of a binary (fork + exec: a process running gRPC
// threads must never continue in a bare fork), each with the environment a launcher gives it:
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT,
// plus the test's own variables. Each process gets its own process group and a temporary file
// for its combined stdout and stderr. run_world waits for all of them within a timeout, kills
// (SIGKILL, whole group) whatever is left after it, and returns how each one ended and what it
// printed. It always stops and reaps what it started, even when it throws.
//
// The launcher variables the parent happens to have (RANK, SLURM_*, OMPI_*, DISTGRAD_TOKEN,
// DISTGRAD_INSECURE, ...) are removed from the children's environment first, so a test says
// every setting it relies on. The fast paths' variables (DISTGRAD_GRPC_ONLY, DISTGRAD_SAME_HOST,
// DISTGRAD_SHM, DISTGRAD_SHM_THRESHOLD, DISTGRAD_SOCKET_CALLS) are kept: ctest runs the
// multi-process suites with each set of paths through them; so is DISTGRAD_FASHION_MNIST_DIR.
//
//   std::vector<ProcessResult> results = run_world(kWorker, {"codecs"}, 2);
//   for (const ProcessResult& result : results) EXPECT_TRUE(result.succeeded()) << result;
#pragma once

#include <chrono>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace distgrad::rpc::testing {

// How one process of a world ended.
struct ProcessResult {
  int rank = 0;
  int exit_code = -1;      // when it exited; -1 when a signal ended it
  int signal = 0;          // the signal that ended it; 0 when it exited
  bool timed_out = false;  // killed by run_world when the timeout expired
  bool cut_short = false;  // killed by run_world after another rank failed (WorldOptions::failure_grace)
  double seconds = 0;      // from its start to its end
  std::string output;      // its stdout and stderr, interleaved as written

  bool succeeded() const { return exit_code == 0; }
  // "rank 1: killed by signal 9 (Killed) after 0.8 s", then the output, indented.
  std::string describe() const;
};

std::ostream& operator<<(std::ostream& out, const ProcessResult& result);
// Every rank's describe(), for a failure message.
std::string describe(const std::vector<ProcessResult>& results);

using Environment = std::map<std::string, std::string>;

struct WorldOptions {
  // Variables for every rank (over the launcher's: MASTER_ADDR may be changed here).
  Environment env;
  // Variables for one rank, over `env`.
  std::map<int, Environment> rank_env;
  // Every process still running after this is killed.
  std::chrono::seconds timeout{120};
  // Once a rank fails (a non-zero exit or a signal), the others get this long to finish before
  // they are killed too (0: they get the whole timeout). A world whose rank 0 failed to start
  // would otherwise wait for its rendezvous timeout.
  std::chrono::seconds failure_grace{15};
};

// Runs `binary args...` as the ranks of a world of `world_size` (see above). Returns one
// result per rank, in rank order. When rank 0 could not listen on the chosen MASTER_PORT
// (another process took it meanwhile), the world is run again on another port (3 tries).
std::vector<ProcessResult> run_world(const std::string& binary, const std::vector<std::string>& args, int world_size,
                                     const WorldOptions& options);
std::vector<ProcessResult> run_world(const std::string& binary, const std::vector<std::string>& args, int world_size,
                                     const Environment& extra_env = {},
                                     std::chrono::seconds timeout = std::chrono::seconds(120));

}  // namespace distgrad::rpc::testing
