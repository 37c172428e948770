#include "launcher/stop_signals.h"

namespace distgrad::launcher {
namespace {

// Set by the handlers: the stop signal received, and the notices not yet passed on.
volatile sig_atomic_t received_signal = 0;
volatile sig_atomic_t usr1_to_forward = 0;
volatile sig_atomic_t usr2_to_forward = 0;

void remember_signal(int signal) { received_signal = signal; }
void remember_to_forward(int signal) { (signal == SIGUSR1 ? usr1_to_forward : usr2_to_forward) = 1; }

}  // namespace

StopSignals::StopSignals() {
  received_signal = 0;
  usr1_to_forward = 0;
  usr2_to_forward = 0;
  for (size_t i = 0; i < kSignals.size(); ++i) {
    struct sigaction action {};
    action.sa_handler = kSignals[i] == SIGINT || kSignals[i] == SIGTERM ? &remember_signal : &remember_to_forward;
    sigemptyset(&action.sa_mask);
    sigaction(kSignals[i], &action, &previous_[i]);
  }
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
}

int received_stop_signal() { return received_signal; }

std::vector<int> take_notices() {
  std::vector<int> notices;
  for (auto [pending, signal] : {std::pair{&usr1_to_forward, SIGUSR1}, std::pair{&usr2_to_forward, SIGUSR2}}) {
    if (*pending == 0) continue;
    *pending = 0;
    notices.push_back(signal);
  }
  return notices;
}

}  // namespace distgrad::launcher
