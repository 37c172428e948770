#include "launcher/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "core/error.h"
#include "launcher/job_status.h"
#include "launcher/stop_signals.h"

extern char** environ;

namespace distgrad::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// "0".."3" -> a mask of the std streams (bit 1 stdout, bit 2 stderr).
int std_streams(const std::string& spec, const char* flag) {
  DISTGRAD_CHECK(spec.size() == 1 && spec[0] >= '0' && spec[0] <= '3', "distgrad-run: --", flag, " ", spec,
                 " is not 0 (none), 1 (stdout), 2 (stderr) or 3 (both); per-rank settings are not supported");
  return spec[0] - '0';
}

std::map<std::string, std::string> own_environment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const size_t equals = text.find('=');
    if (equals != std::string::npos) env[text.substr(0, equals)] = text.substr(equals + 1);
  }
  return env;
}

// Makes this run's own log directory, LOG_DIR/<run-id>_XXXXXX, and says where it is. See
// Note [Log files].
std::filesystem::path make_run_log_dir(const std::string& log_dir, const std::string& run_id) {
  std::error_code error;
  std::filesystem::create_directories(log_dir, error);
  DISTGRAD_CHECK(!error, "distgrad-run: cannot create the --log-dir ", log_dir, ": ", error.message());
  std::string path = (std::filesystem::path(log_dir) / (run_id + "_XXXXXX")).string();
  DISTGRAD_CHECK(mkdtemp(path.data()) != nullptr, "distgrad-run: cannot create a log directory ", path, ": ",
                 std::strerror(errno));
  std::fprintf(stderr, "distgrad-run: writing the workers' logs to %s\n", path.c_str());
  return path;
}

// Makes `path`, a directory that must not exist yet.
void make_new_dir(const std::filesystem::path& path) {
  DISTGRAD_CHECK(mkdir(path.c_str(), 0777) == 0, "distgrad-run: cannot create ", path.string(), ": ",
                 std::strerror(errno));
}

}  // namespace

std::string WorkerExit::describe() const {
  std::string text = "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ") ";
  text += signal != 0 ? "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")"
                      : "exited with code " + std::to_string(exit_code);
  if (!last_error_line.empty()) text += ": " + last_error_line;
  return text;
}

WorkerGroup::WorkerGroup(LaunchOptions options, GroupInfo group, JobStatus* job)
    : options_(std::move(options)), group_(std::move(group)), job_(job) {
  const int redirected = std_streams(options_.redirects, "redirects");
  logged_streams_ = redirected | std_streams(options_.tee, "tee");
  console_streams_ = 3 & ~redirected;
  DISTGRAD_CHECK(logged_streams_ == 0 || options_.log_dir.has_value(), "distgrad-run: --redirects ", options_.redirects,
                 " and --tee ", options_.tee, " write log files, which need --log-dir");
}

void WorkerGroup::start_attempt(int attempt) {
  group_.restart_count = attempt;
  if (logged_streams_ != 0) {
    if (run_log_dir_.empty()) run_log_dir_ = make_run_log_dir(*options_.log_dir, options_.run_id);
    attempt_log_dir_ = run_log_dir_ / ("attempt_" + std::to_string(attempt));
    make_new_dir(attempt_log_dir_);
  }
  workers_.clear();
  rejoins_.assign(group_.nproc_per_node, 0);
  to_rejoin_.clear();
  const std::map<std::string, std::string> base = own_environment();
  for (int local_rank = 0; local_rank < group_.nproc_per_node; ++local_rank) start_worker(local_rank, 0, base);
}

void WorkerGroup::start_worker(int local_rank, int rejoin, const std::map<std::string, std::string>& base) {
  std::map<std::string, std::string> env = worker_environment(options_, group_, local_rank, base);
  if (rejoin > 0) env.insert_or_assign("DISTGRAD_REJOIN", std::string(1, '1'));  // Note [Rejoining workers]
  Worker& worker = workers_.emplace_back();
  worker.local_rank = local_rank;
  worker.rank = std::stoi(env.at("RANK"));
  int out_pipe[2], err_pipe[2];
  DISTGRAD_CHECK(pipe2(out_pipe, O_CLOEXEC) == 0 && pipe2(err_pipe, O_CLOEXEC) == 0,
                 "distgrad-run: cannot create pipes: ", std::strerror(errno));
  std::vector<std::string> env_text;
  for (const auto& [name, value] : env) env_text.push_back(name + "=" + value);
  std::vector<char*> envp, argv;
  for (std::string& entry : env_text) envp.push_back(entry.data());
  envp.push_back(nullptr);
  for (std::string& arg : options_.program) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  DISTGRAD_CHECK(pid >= 0, "distgrad-run: cannot start a worker: ", std::strerror(errno));
  if (pid == 0) {  // the worker: only async-signal-safe calls until exec (the Store runs threads)
    setpgid(0, 0);
    // The worker dies with the launcher, even a SIGKILLed one (this thread, which forks every
    // worker, lives as long as the launcher).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);  // it died before the line above
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execvpe(argv[0], argv.data(), envp.data());
    constexpr char kCannotRun[] = "distgrad-run: cannot run (not found, or not executable): ";
    (void)!write(STDERR_FILENO, kCannotRun, sizeof(kCannotRun) - 1);
    (void)!write(STDERR_FILENO, argv[0], std::strlen(argv[0]));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with the child's own call
  close(out_pipe[1]);
  close(err_pipe[1]);
  worker.pid = pid;
  worker.running = true;
  worker.out.fd = out_pipe[0];
  worker.err.fd = err_pipe[0];
  worker.err.is_stderr = true;
  std::filesystem::path rank_log_dir;
  if (logged_streams_ != 0) {
    rank_log_dir =
        attempt_log_dir_ / (std::to_string(local_rank) + (rejoin > 0 ? "_rejoin" + std::to_string(rejoin) : ""));
    make_new_dir(rank_log_dir);
  }
  for (Stream* stream : {&worker.out, &worker.err}) {
    stream->rank = worker.rank;
    fcntl(stream->fd, F_SETFL, fcntl(stream->fd, F_GETFL) | O_NONBLOCK);
    const int bit = stream->is_stderr ? 2 : 1;
    if (logged_streams_ & bit) {
      const auto path = rank_log_dir / (stream->is_stderr ? "stderr.log" : "stdout.log");
      stream->log = std::fopen(path.c_str(), "wx");  // a new file: nothing is overwritten
      DISTGRAD_CHECK(stream->log != nullptr, "distgrad-run: cannot write ", path.string(), ": ", std::strerror(errno));
    }
  }
}

void WorkerGroup::emit(Stream& stream, bool flush_partial) {
  FILE* console = stream.is_stderr ? stderr : stdout;
  const bool to_console = (console_streams_ & (stream.is_stderr ? 2 : 1)) != 0;
  size_t start = 0;
  for (;;) {
    // A line ends at '\n', or at '\r' (a progress bar redrawing itself), kept as it was.
    const size_t end = stream.pending.find_first_of("\r\n", start);
    if (end == std::string::npos && !(flush_partial && start < stream.pending.size())) break;
    const std::string line = stream.pending.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const char terminator = end == std::string::npos ? '\n' : stream.pending[end];
    if (to_console) std::fprintf(console, "[%d] %s%c", stream.rank, line.c_str(), terminator);
    if (stream.log != nullptr) std::fprintf(stream.log, "%s%c", line.c_str(), terminator);
    if (stream.is_stderr && !line.empty()) stream.last_line = line;
    if (end == std::string::npos) {
      start = stream.pending.size();
      break;
    }
    start = end + 1;
  }
  stream.pending.erase(0, start);
  std::fflush(console);
  if (stream.log != nullptr) std::fflush(stream.log);
}

bool WorkerGroup::watch(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  std::vector<Stream*> streams;
  for (Worker& worker : workers_) {
    for (Stream* stream : {&worker.out, &worker.err}) {
      if (stream->fd < 0) continue;
      fds.push_back({stream->fd, POLLIN, 0});
      streams.push_back(stream);
    }
  }
  ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));  // with no pipes left: a sleep
  forward_notices();
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Stream& stream = *streams[i];
    char buffer[65536];
    for (;;) {
      const ssize_t count = ::read(stream.fd, buffer, sizeof(buffer));
      if (count > 0) {
        stream.pending.append(buffer, static_cast<size_t>(count));
        continue;
      }
      if (count < 0 && (errno == EAGAIN || errno == EINTR)) break;
      close(stream.fd);  // end of file, or an error: nothing more comes
      stream.fd = -1;
      break;
    }
    emit(stream, stream.fd < 0);
  }
  bool any_running = false;
  for (Worker& worker : workers_) {
    if (!worker.running) continue;
    int status = 0;
    const pid_t done = waitpid(worker.pid, &status, WNOHANG);
    if (done == 0) {
      any_running = true;
      continue;
    }
    worker.running = false;
    WorkerExit exit{worker.rank, worker.pid, 0, 0, ""};
    if (done > 0 && WIFEXITED(status)) exit.exit_code = WEXITSTATUS(status);
    if (done > 0 && WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
    if (exit.failed() && options_.tolerate_lost_workers && exit.rank != 0) {
      exit.last_error_line = worker.err.last_line;
      const bool rejoins = rejoins_[worker.local_rank] < options_.max_rejoins;
      std::fprintf(stderr, "distgrad-run: %s; the other workers go on (%s)\n", exit.describe().c_str(),
                   rejoins ? "--max-rejoins: it starts again" : "--tolerate-lost-workers");
      if (rejoins) to_rejoin_.push_back(worker.local_rank);
      continue;
    }
    if (exit.failed() && !first_failure_) first_failure_ = exit;
  }
  return any_running;
}

void WorkerGroup::forward_notices() const {
  for (int signal : take_notices()) {
    std::fprintf(stderr, "distgrad-run: passing %s on to the workers\n", sigabbrev_np(signal));
    for (const Worker& worker : workers_) {
      if (worker.running) kill(-worker.pid, signal);
    }
  }
}

void WorkerGroup::signal_groups(int signal) const {
  for (const Worker& worker : workers_) {
    if (worker.pid > 0) kill(-worker.pid, signal);
  }
}

bool WorkerGroup::any_group_alive() const {
  for (const Worker& worker : workers_) {
    if (worker.pid > 0 && kill(-worker.pid, 0) == 0) return true;
  }
  return false;
}

void WorkerGroup::stop_all(int signal) {
  // A worker's group outlives the worker while anything it started is still in it (a child that
  // ignores `signal`, say): the groups are signalled, and waited for, not only the workers.
  signal_groups(signal);
  const Clock::time_point deadline = Clock::now() + kStopGrace;
  bool killed = false;
  for (;;) {
    const bool workers_running = watch(std::chrono::milliseconds(50));
    if (!workers_running && !any_group_alive()) return;
    if (Clock::now() < deadline) continue;
    if (killed && Clock::now() > deadline + kStopGrace) return;  // unkillable (a process in D state)
    signal_groups(SIGKILL);
    killed = true;
  }
}

void WorkerGroup::drain_and_close() {
  // The workers are gone; what they started may still hold a pipe open: read for a while.
  const Clock::time_point deadline = Clock::now() + kDrainTime;
  auto open_streams = [this] {
    for (const Worker& worker : workers_) {
      if (worker.out.fd >= 0 || worker.err.fd >= 0) return true;
    }
    return false;
  };
  while (open_streams() && Clock::now() < deadline) watch(std::chrono::milliseconds(50));
  for (Worker& worker : workers_) {
    for (Stream* stream : {&worker.out, &worker.err}) {
      if (stream->fd >= 0) {
        close(stream->fd);
        stream->fd = -1;
        emit(*stream, /*flush_partial=*/true);
      }
      if (stream->log != nullptr) std::fclose(stream->log);
      stream->log = nullptr;
    }
  }
}

std::optional<WorkerExit> WorkerGroup::wait_for_other_nodes(int attempt, std::chrono::milliseconds interval) {
  job_->report_finished(attempt);
  const Clock::time_point deadline = Clock::now() + kOtherNodesTimeout;
  while (received_stop_signal() == 0 && !job_->all_finished(attempt)) {
    if (std::optional<WorkerExit> failure = job_->failure(attempt)) return failure;
    DISTGRAD_CHECK(Clock::now() < deadline,
                   "distgrad-run: this node's workers finished, but not every node's did within ",
                   kOtherNodesTimeout.count(), " s (a node's launcher stopped?)");
    std::this_thread::sleep_for(interval);
  }
  return std::nullopt;
}

AttemptEnd WorkerGroup::run_attempt(int attempt, const std::function<bool()>& stop_requested) {
  first_failure_.reset();
  try {
    start_attempt(attempt);
  } catch (...) {
    stop_all(SIGKILL);  // the workers already started
    drain_and_close();
    throw;
  }
  AttemptEnd end;
  bool running = true;
  while (running && received_stop_signal() == 0 && !first_failure_ && !end.stopped_by_caller) {
    running = watch(monitor_interval());
    if (!first_failure_) end.stopped_by_caller = stop_requested();
    if (running && !first_failure_ && !end.stopped_by_caller) start_rejoining_workers();
  }
  end.interrupted_by = received_stop_signal();
  const bool failed = first_failure_.has_value();  // workers that end of the SIGTERM below did not fail
  if (end.interrupted_by != 0) {
    std::fprintf(stderr, "distgrad-run: received signal %d; stopping the workers\n", end.interrupted_by);
    stop_all(end.interrupted_by);
  } else {
    stop_all(SIGTERM);  // the other workers after a failure; what finished workers left running
  }
  drain_and_close();
  if (!failed) return end;
  for (const Worker& worker : workers_) {
    if (worker.rank == first_failure_->rank) first_failure_->last_error_line = worker.err.last_line;
  }
  end.failure = first_failure_;
  return end;
}

void WorkerGroup::start_rejoining_workers() {
  if (to_rejoin_.empty()) return;
  const std::map<std::string, std::string> base = own_environment();
  for (int local_rank : to_rejoin_) {
    const int rejoin = ++rejoins_[local_rank];
    start_worker(local_rank, rejoin, base);
    std::fprintf(stderr, "distgrad-run: starting rank %d again into the running world (rejoin %d of %d)\n",
                 workers_.back().rank, rejoin, options_.max_rejoins);
  }
  to_rejoin_.clear();
}

std::chrono::milliseconds WorkerGroup::monitor_interval() const {
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(options_.monitor_interval_s * 1000)));
}

GroupResult WorkerGroup::run() {
  StopSignals signals;
  GroupResult result;
  for (int attempt = 0;; ++attempt) {
    std::optional<WorkerExit> elsewhere;  // a failure of this attempt on another node
    const AttemptEnd end = run_attempt(attempt, [&] {
      if (job_ != nullptr) elsewhere = job_->failure(attempt);
      return elsewhere.has_value();
    });
    result.interrupted_by = end.interrupted_by;
    std::optional<WorkerExit> failure = end.failure;
    if (failure) {
      if (job_ != nullptr) job_->report_failure(attempt, *failure);
    } else if (job_ != nullptr && end.interrupted_by == 0) {
      // Workers that ended of our SIGTERM did not fail; the cause is another node's failure.
      failure = elsewhere ? elsewhere : wait_for_other_nodes(attempt, monitor_interval());
    }
    result.restarts = attempt;
    if (result.interrupted_by != 0 || !failure) break;
    if (attempt >= options_.max_restarts) {
      result.failure = failure;
      break;
    }
    std::fprintf(stderr, "distgrad-run: %s; restarting the workers (restart %d of %d)\n", failure->describe().c_str(),
                 attempt + 1, options_.max_restarts);
  }
  if (job_ != nullptr && result.interrupted_by == 0) leave_job(result.restarts, monitor_interval());
  return result;
}

void WorkerGroup::leave_job(int attempt, std::chrono::milliseconds interval) {
  job_->report_leaving(attempt);
  if (options_.node_rank != 0) return;
  const Clock::time_point deadline = Clock::now() + kOtherNodesTimeout;
  while (received_stop_signal() == 0 && !job_->all_left(attempt) && Clock::now() < deadline) {
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace distgrad::launcher
