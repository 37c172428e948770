// The signals distgrad-run handles while it runs workers: SIGINT and SIGTERM stop the workers
// (and the launcher then exits with 128 + the signal); SIGUSR1 and SIGUSR2, preemption notices
// (rendezvous/preemption.h), are passed on to the workers instead of ending the launcher.
//
//   StopSignals signals;                       // for the scope of the run
//   while (received_stop_signal() == 0) { ...; for (int notice : take_notices()) forward(notice); }
#pragma once

#include <signal.h>

#include <array>
#include <vector>

namespace distgrad::launcher {

// For its scope: records SIGINT, SIGTERM, SIGUSR1 and SIGUSR2 instead of their default actions.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr std::array<int, 4> kSignals = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
  std::array<struct sigaction, 4> previous_{};
};

// SIGINT or SIGTERM when one was received in a StopSignals scope, else 0.
int received_stop_signal();

// The preemption notices (SIGUSR1, SIGUSR2) received since the last call, to pass on.
std::vector<int> take_notices();

}  // namespace distgrad::launcher
