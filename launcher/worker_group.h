// The workers of this node: started together, watched, stopped together, restarted together.
//
// Each worker runs in its own process group (so stopping it reaches whatever it started) with
// the environment of launcher/worker_env.h; its stdout and stderr come back through pipes and
// are printed line by line with a "[rank] " prefix (and written to log files with --log-dir,
// Note [Log files]).
// When a worker fails (non-zero exit or a signal), the others get SIGTERM, then SIGKILL after
// kStopGrace, and the group starts again while restarts are left (DISTGRAD_RESTART_COUNT
// counts them); the first failure of the last attempt is the result. SIGINT and SIGTERM sent
// to the launcher go to every worker, and the launcher then exits with 128 + the signal.
// Stopping reaches every process in the workers' groups, those whose worker already ended
// included, and at the end of an attempt whatever the workers left running is stopped too. A
// worker dies with the launcher (PR_SET_PDEATHSIG), even a SIGKILLed one; what it started then
// outlives it only if it ignores its parent's death itself (no cgroup holds the job).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/options.h"
#include "launcher/worker_env.h"

namespace distgrad::launcher {

class JobStatus;

// Note [Log files]
// As torchrun's: with --log-dir D and --redirects or --tee, each run of the launcher writes into
// a directory of its own, D/<run-id>_XXXXXX, made with mkdtemp (so never one that exists: the
// run id is "none" unless given, and a second run must not overwrite the first's logs) and
// printed once to the launcher's stderr. In it, each attempt (restart k) has attempt_<k>/, with
// <local-rank>/stdout.log and stderr.log for each worker of this node: the streams --redirects
// and --tee name, without the "[rank] " prefix. Each node's launcher makes its own directory.

// How a worker ended.
struct WorkerExit {
  int rank = 0;
  int pid = 0;
  int exit_code = 0;            // when it exited
  int signal = 0;               // when a signal killed it (then exit_code is 0)
  std::string last_error_line;  // its last stderr line, for the report

  bool failed() const { return exit_code != 0 || signal != 0; }
  // The launcher's exit code for this end: the worker's code, or 128 + the signal.
  int status() const { return signal != 0 ? 128 + signal : exit_code; }
  // "rank 2 (pid 1234) exited with code 1: <last stderr line>".
  std::string describe() const;
};

// How one attempt of WorkerGroup::run_attempt ended.
struct AttemptEnd {
  std::optional<WorkerExit> failure;  // the attempt's first failure, if any
  bool stopped_by_caller = false;     // stop_requested() said so
  int interrupted_by = 0;             // SIGINT or SIGTERM received by the launcher, or 0
};

// The outcome of WorkerGroup::run.
struct GroupResult {
  std::optional<WorkerExit> failure;  // the first failure of the last attempt, if any
  int interrupted_by = 0;             // SIGINT or SIGTERM received by the launcher, or 0
  int restarts = 0;                   // attempts after the first
  int exit_code() const { return interrupted_by != 0 ? 128 + interrupted_by : failure ? failure->status() : 0; }
};

class WorkerGroup {
 public:
  static constexpr std::chrono::seconds kStopGrace{10};
  // How long a node whose workers finished waits for the other nodes' (multi-node jobs).
  static constexpr std::chrono::seconds kOtherNodesTimeout{600};
  // How long output is still read after the workers ended (from what they started).
  static constexpr std::chrono::seconds kDrainTime{2};

  // `group.restart_count` is ignored: run() counts attempts itself. With `job` (a multi-node
  // job; not owned, may be null), a failure on any node stops and restarts every node's workers,
  // and a node whose workers finished waits for the others (launcher/job_status.h).
  WorkerGroup(LaunchOptions options, GroupInfo group, JobStatus* job = nullptr);

  // Starts the workers and watches them until all succeeded, or a failure used up the restarts,
  // or the launcher was told to stop. Installs SIGINT/SIGTERM handlers for its duration.
  GroupResult run();

  // One attempt, for launchers that decide about restarts themselves (launcher/elastic_agent.h):
  // starts the workers with DISTGRAD_RESTART_COUNT = `attempt`, watches them until they all
  // ended, one failed, the launcher received SIGINT or SIGTERM (needs a StopSignals in scope), or
  // `stop_requested` (asked every monitor interval) returned true; then stops what is left.
  AttemptEnd run_attempt(int attempt, const std::function<bool()>& stop_requested);
  // Replaces the group's settings for the attempts after this call (an elastic round's).
  void set_group(GroupInfo group) { group_ = std::move(group); }

 private:
  // One output stream of a worker: its pipe, the partial line read so far, its log file.
  struct Stream {
    int fd = -1;
    int rank = 0;  // the worker's, for the prefix
    bool is_stderr = false;
    std::string pending;
    FILE* log = nullptr;
    std::string last_line;  // the last non-empty line, for the failure report
  };
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    pid_t pid = 0;
    bool running = false;
    Stream out, err;
  };

  void start_attempt(int attempt);
  // Starts local worker `local_rank` with the launcher's environment `base` and the worker's own
  // variables; `rejoin` > 0: again, into the running world (--max-rejoins).
  void start_worker(int local_rank, int rejoin, const std::map<std::string, std::string>& base);
  // Starts again the lost workers watch() queued while --max-rejoins allows.
  void start_rejoining_workers();
  std::chrono::milliseconds monitor_interval() const;
  // Reads the pipes and reaps the workers for up to `timeout`; returns whether any worker is
  // still running.
  bool watch(std::chrono::milliseconds timeout);
  // Sends `signal` to every process of the workers' groups, then SIGKILL to what is left after
  // kStopGrace; returns when the groups are empty.
  void stop_all(int signal);
  // Passes the SIGUSR1 and SIGUSR2 the launcher received on to every running worker's group.
  void forward_notices() const;
  void signal_groups(int signal) const;
  // Whether a process of any worker's group is still there.
  bool any_group_alive() const;
  void drain_and_close();
  void emit(Stream& stream, bool flush_partial);

  // Waits until every node finished `attempt`, or one reports a failure of it (returned), or the
  // launcher is told to stop.
  std::optional<WorkerExit> wait_for_other_nodes(int attempt, std::chrono::milliseconds interval);
  // Tells the other nodes this launcher is done; node 0 (the Store's host) then waits for them.
  void leave_job(int attempt, std::chrono::milliseconds interval);

  LaunchOptions options_;
  GroupInfo group_;
  JobStatus* job_;
  int console_streams_ = 3;  // bit 1: stdout, bit 2: stderr
  int logged_streams_ = 0;
  std::filesystem::path run_log_dir_;  // Note [Log files]; made at the first attempt that logs
  std::filesystem::path attempt_log_dir_;
  // This attempt's workers, a rejoined worker after the one it replaces.
  std::vector<Worker> workers_;
  std::vector<int> rejoins_;    // by local rank: starts into the running world this attempt
  std::vector<int> to_rejoin_;  // local ranks lost, to start again
  std::optional<WorkerExit> first_failure_;
};

}  // namespace distgrad::launcher
