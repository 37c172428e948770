#include "rendezvous/preemption.h"

#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "core/error.h"

namespace distgrad::rendezvous {
namespace {

std::atomic<bool> notice_arrived{false};

void record_notice(int) { notice_arrived.store(true, std::memory_order_relaxed); }

}  // namespace

int requeue_signal(const EnvLookup& getenv) {
  const std::optional<std::string> given = getenv("DISTGRAD_REQUEUE_SIGNAL");
  if (!given || given->empty()) return SIGUSR1;
  int number = 0;
  if (absl::SimpleAtoi(*given, &number) && number > 0 && number < NSIG) return number;
  std::string name = absl::AsciiStrToUpper(*given);
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (int signal = 1; signal < NSIG; ++signal) {
    const char* abbreviation = sigabbrev_np(signal);
    if (abbreviation != nullptr && name == abbreviation) return signal;
  }
  DISTGRAD_FAIL("DISTGRAD_REQUEUE_SIGNAL=", *given, " names no signal (expected a name such as USR1 or SIGUSR2, or a ",
                "number)");
}

int watch_for_preemption() { return watch_for_preemption(requeue_signal(process_environment)); }

int watch_for_preemption(int signal) {
  struct sigaction action {};
  action.sa_handler = record_notice;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  DISTGRAD_CHECK(sigaction(signal, &action, nullptr) == 0, "watch_for_preemption: cannot handle signal ", signal, ": ",
                 std::strerror(errno));
  return signal;
}

bool preemption_requested() { return notice_arrived.load(std::memory_order_relaxed); }

std::string slurm_job_to_requeue(const EnvLookup& getenv) {
  const std::optional<std::string> array_job = getenv("SLURM_ARRAY_JOB_ID");
  const std::optional<std::string> array_task = getenv("SLURM_ARRAY_TASK_ID");
  if (array_job && array_task) return *array_job + "_" + *array_task;
  const std::optional<std::string> job = getenv("SLURM_JOB_ID");
  DISTGRAD_CHECK(job.has_value() && !job->empty(),
                 "requeue_slurm_job: this process is not in a Slurm job (SLURM_JOB_ID is unset)");
  return *job;
}

void requeue_slurm_job() {
  const std::string job = slurm_job_to_requeue(process_environment);
  const std::string command = "scontrol requeue " + job + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  DISTGRAD_CHECK(pipe != nullptr, "requeue_slurm_job: cannot run '", command, "': ", std::strerror(errno));
  std::string output;
  std::array<char, 512> chunk;
  while (size_t read = std::fread(chunk.data(), 1, chunk.size(), pipe.get())) output.append(chunk.data(), read);
  const int status = pclose(pipe.release());
  DISTGRAD_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "requeue_slurm_job: 'scontrol requeue ",
                 job, "' failed (status ", status, "): ", output);
  std::fprintf(stderr, "requeued Slurm job %s\n", job.c_str());
}

}  // namespace distgrad::rendezvous
