#include "tests/rpc/multiprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "rendezvous/net_util.h"

extern char** environ;

namespace distgrad::rpc::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPortTries = 3;
// What rank 0 prints when its Store cannot bind MASTER_PORT (rpc/store.cc).
constexpr std::string_view kPortTaken = "StoreServer: cannot listen on";

// Variables a launcher sets: the children get only the ones run_world gives them.
bool is_launcher_variable(std::string_view entry) {
  const std::string_view name = entry.substr(0, entry.find('='));
  for (std::string_view exact :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    if (name == exact) return true;
  }
  // The transport settings of a test variant (ctest's ENVIRONMENT) do reach them, and where the
  // dataset is (docs/gpu.md: a machine without the Debian package).
  for (std::string_view kept : {"DISTGRAD_GRPC_ONLY", "DISTGRAD_SAME_HOST", "DISTGRAD_SHM", "DISTGRAD_SHM_THRESHOLD",
                                "DISTGRAD_SOCKET_CALLS", "DISTGRAD_FASHION_MNIST_DIR"}) {
    if (name == kept) return false;
  }
  for (std::string_view prefix : {"DISTGRAD_", "SLURM_", "OMPI_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("run_world: " + what + ": " + std::strerror(errno));
}

// One started process: its pid (also its process group) and the file its output goes to.
struct Child {
  pid_t pid = -1;
  int output_fd = -1;
  Clock::time_point start;
  bool reaped = false;
  int status = 0;
};

// Owns the children of one run: kills and reaps whatever is still running, and closes the
// output files (already unlinked), whatever happens.
class World {
 public:
  World() = default;
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  ~World() {
    for (Child& child : children_) {
      if (child.pid > 0 && !child.reaped) {
        ::kill(-child.pid, SIGKILL);
        ::waitpid(child.pid, &child.status, 0);
      }
      if (child.output_fd >= 0) ::close(child.output_fd);
    }
  }

  std::vector<Child>& children() { return children_; }

 private:
  std::vector<Child> children_;
};

// An unlinked temporary file for a child's output (it lives as long as its descriptor).
int open_output_file(int rank) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string path = std::string(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp") + "/distgrad-rank" +
                     std::to_string(rank) + "-XXXXXX";
  const int fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) fail("cannot create " + path);
  ::unlink(path.c_str());
  return fd;
}

std::string read_output(int fd) {
  std::string output;
  char buffer[1 << 16];
  off_t offset = 0;
  for (;;) {
    const ssize_t got = ::pread(fd, buffer, sizeof buffer, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    output.append(buffer, static_cast<size_t>(got));
    offset += got;
  }
  return output;
}

// Starts `argv` with `envp` in its own process group, its output going to `output_fd`.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& envp, int output_fd) {
  // Everything the child uses is built before fork(): after it, only async-signal-safe calls.
  std::vector<char*> arguments, environment;
  for (const std::string& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  for (const std::string& setting : envp) environment.push_back(const_cast<char*>(setting.c_str()));
  environment.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::dup2(output_fd, STDOUT_FILENO);
    ::dup2(output_fd, STDERR_FILENO);
    ::execve(arguments[0], arguments.data(), environment.data());
    static constexpr char kMessage[] = "run_world: execve failed\n";
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so that the group exists before any kill(-pid)
  return pid;
}

std::vector<std::string> environment_of(int rank, int world_size, int port, const WorldOptions& options) {
  std::map<std::string, std::string> variables = {
      {"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(world_size)},
      {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(world_size)},
      {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", std::to_string(port)},
  };
  for (const auto& [name, value] : options.env) variables[name] = value;
  if (auto overrides = options.rank_env.find(rank); overrides != options.rank_env.end()) {
    for (const auto& [name, value] : overrides->second) variables[name] = value;
  }
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view setting(*entry);
    // A variable the world sets replaces the parent's (getenv would find the first of two).
    if (!is_launcher_variable(*entry) && !variables.contains(std::string(setting.substr(0, setting.find('='))))) {
      environment.emplace_back(*entry);
    }
  }
  for (const auto& [name, value] : variables) environment.push_back(name + "=" + value);
  return environment;
}

bool failed(const Child& child) { return !(WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0); }

std::vector<ProcessResult> run_once(const std::string& binary, const std::vector<std::string>& args, int world_size,
                                    const WorldOptions& options, int port) {
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  World world;
  std::vector<Child>& children = world.children();
  children.resize(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    children[rank].output_fd = open_output_file(rank);
    children[rank].start = Clock::now();
    children[rank].pid = spawn(argv, environment_of(rank, world_size, port, options), children[rank].output_fd);
  }

  std::vector<ProcessResult> results(world_size);
  const Clock::time_point deadline = Clock::now() + options.timeout;
  Clock::time_point cut_off = Clock::time_point::max();  // set once a rank fails
  int running = world_size;
  while (running > 0) {
    bool progressed = false;
    for (int rank = 0; rank < world_size; ++rank) {
      Child& child = children[rank];
      if (child.reaped) continue;
      const pid_t done = ::waitpid(child.pid, &child.status, WNOHANG);
      if (done != child.pid) continue;
      child.reaped = true;
      progressed = true;
      --running;
      results[rank].seconds = std::chrono::duration<double>(Clock::now() - child.start).count();
      if (failed(child) && options.failure_grace.count() > 0) {
        cut_off = std::min(cut_off, Clock::now() + options.failure_grace);
      }
    }
    if (running == 0) break;
    const Clock::time_point now = Clock::now();
    if (now >= deadline || now >= cut_off) {
      for (int rank = 0; rank < world_size; ++rank) {
        Child& child = children[rank];
        if (child.reaped) continue;
        ::kill(-child.pid, SIGKILL);
        ::waitpid(child.pid, &child.status, 0);
        child.reaped = true;
        results[rank].timed_out = now >= deadline;
        results[rank].cut_short = !results[rank].timed_out;
        results[rank].seconds = std::chrono::duration<double>(Clock::now() - child.start).count();
      }
      break;
    }
    // Polling: waitpid cannot wait for several children with a deadline.
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  for (int rank = 0; rank < world_size; ++rank) {
    const Child& child = children[rank];
    ProcessResult& result = results[rank];
    result.rank = rank;
    if (WIFEXITED(child.status)) result.exit_code = WEXITSTATUS(child.status);
    if (WIFSIGNALED(child.status)) result.signal = WTERMSIG(child.status);
    result.output = read_output(child.output_fd);
  }
  return results;
}

}  // namespace

std::string ProcessResult::describe() const {
  std::ostringstream out;
  out << "rank " << rank << ": ";
  if (timed_out) {
    out << "timed out and was killed";
  } else if (cut_short) {
    out << "killed after another rank failed";
  } else if (signal != 0) {
    out << "killed by signal " << signal << " (" << strsignal(signal) << ")";
  } else {
    out << "exited with code " << exit_code;
  }
  out << " after " << std::fixed << std::setprecision(1) << seconds << " s";
  if (output.empty()) return out.str() + ", no output";
  out << ", output:";
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) out << "\n    " << line;
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const ProcessResult& result) { return out << result.describe(); }

std::string describe(const std::vector<ProcessResult>& results) {
  std::string text;
  for (const ProcessResult& result : results) text += result.describe() + "\n";
  return text;
}

std::vector<ProcessResult> run_world(const std::string& binary, const std::vector<std::string>& args, int world_size,
                                     const WorldOptions& options) {
  if (world_size <= 0) throw std::invalid_argument("run_world: world_size must be positive");
  std::vector<ProcessResult> results;
  for (int attempt = 0; attempt < kPortTries; ++attempt) {
    results = run_once(binary, args, world_size, options, rendezvous::pick_free_port());
    const bool port_taken = !results[0].succeeded() && results[0].output.find(kPortTaken) != std::string::npos;
    if (!port_taken) break;
  }
  return results;
}

std::vector<ProcessResult> run_world(const std::string& binary, const std::vector<std::string>& args, int world_size,
                                     const Environment& extra_env, std::chrono::seconds timeout) {
  WorldOptions options;
  options.env = extra_env;
  options.timeout = timeout;
  return run_world(binary, args, world_size, options);
}

}  // namespace distgrad::rpc::testing
