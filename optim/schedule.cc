#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "optim/optimizer.h"

namespace distgrad::optim::schedule {

using detail::check_hyperparameter;

Schedule linear(double init_value, double end_value, int64_t transition_steps, int64_t transition_begin) {
  check_hyperparameter(transition_steps > 0, "schedule::linear", "transition_steps > 0",
                       static_cast<double>(transition_steps));
  check_hyperparameter(transition_begin >= 0, "schedule::linear", "transition_begin >= 0",
                       static_cast<double>(transition_begin));
  return [=](int64_t count) {
    const int64_t done = std::clamp<int64_t>(count - transition_begin, 0, transition_steps);
    return std::lerp(init_value, end_value, static_cast<double>(done) / static_cast<double>(transition_steps));
  };
}

Schedule step(double init_value, int64_t step_size, double gamma) {
  check_hyperparameter(step_size > 0, "schedule::step", "step_size > 0", static_cast<double>(step_size));
  check_hyperparameter(gamma >= 0, "schedule::step", "gamma >= 0", gamma);
  return [=](int64_t count) { return init_value * std::pow(gamma, static_cast<double>(count / step_size)); };
}

Schedule cosine(double init_value, int64_t t_max, double eta_min) {
  check_hyperparameter(t_max > 0, "schedule::cosine", "t_max > 0", static_cast<double>(t_max));
  check_hyperparameter(eta_min >= 0, "schedule::cosine", "eta_min >= 0", eta_min);
  return [=](int64_t count) {
    const double angle = std::numbers::pi * static_cast<double>(count) / static_cast<double>(t_max);
    return eta_min + (init_value - eta_min) * (1 + std::cos(angle)) / 2;
  };
}

}  // namespace distgrad::optim::schedule
