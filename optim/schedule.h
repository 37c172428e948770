// Schedules: learning rates as functions of the step count (TorchOpt's torchopt.schedule).
//
// A Schedule maps a count of steps taken so far (0 at the first step) to a value. The
// differentiable optimizers take one as their learning rate (MetaSGD, MetaAdam: the lr of
// their n-th step, counted from 0, is lr(n)), and the in-place schedulers
// (optim/lr_scheduler.h) are built on the same functions, so a shape of schedule reads the same
// in an inner loop as in a training loop:
//
//   dg::optim::MetaSGD inner(params, dg::optim::schedule::linear(0.1, 0.01, inner_steps));
//   dg::optim::StepLR outer_schedule(outer, /*step_size=*/30);   // schedule::step per group
//
// Each maker checks its arguments; errors name it ("schedule::linear: expected ...").
#pragma once

#include <cstdint>
#include <functional>

namespace distgrad::optim {

// A value (a learning rate) as a function of the count of steps taken so far (TorchOpt's
// Schedule).
using Schedule = std::function<double(int64_t count)>;

namespace schedule {

// From init_value to end_value in a straight line over transition_steps steps that start after
// transition_begin steps; init_value before, end_value after (torchopt.schedule.linear_schedule):
//   lerp(init_value, end_value, clamp(count - transition_begin, 0, transition_steps)
//                               / transition_steps)
// (std::lerp: TorchOpt's (init - end) * (1 - t) + end up to rounding, and exactly init_value and
// end_value at the ends).
// Requires transition_steps > 0 and transition_begin >= 0 (TorchOpt instead turns a
// non-positive transition_steps into a constant and a negative transition_begin into 0).
Schedule linear(double init_value, double end_value, int64_t transition_steps, int64_t transition_begin = 0);

// init_value times gamma every step_size steps: init_value * gamma^floor(count / step_size)
// (torch.optim.lr_scheduler.StepLR's closed form). Requires step_size > 0 and gamma >= 0.
Schedule step(double init_value, int64_t step_size, double gamma = 0.1);

// Half a cosine from init_value down to eta_min over t_max steps:
//   eta_min + (init_value - eta_min) * (1 + cos(pi * count / t_max)) / 2
// (torch.optim.lr_scheduler.CosineAnnealingLR's closed form; past t_max it rises again, as
// torch's does, with period 2 * t_max). Requires t_max > 0 and eta_min >= 0.
Schedule cosine(double init_value, int64_t t_max, double eta_min = 0);

}  // namespace schedule

}  // namespace distgrad::optim
