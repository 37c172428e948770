// How the MAML benchmarks time outer iterations (bench/maml_bench, bench/maml_fewshot_bench):
// warm-up iterations, then each timed iteration on its own, reported as one JSON line of
// medians and deciles that bench/run_maml_bench.py reads beside the peer's
// (bench/peer/maml_common.py prints the same keys).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "dist_autograd/dist_autograd.h"

namespace bench {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// The q-quantile of samples, interpolated linearly between neighbours (numpy's default, as the
// peer's statistics.quantiles(method="inclusive")).
inline double quantile(std::vector<double> samples, double q) {
  std::sort(samples.begin(), samples.end());
  const double position = q * static_cast<double>(samples.size() - 1);
  const size_t below = static_cast<size_t>(position), above = std::min(below + 1, samples.size() - 1);
  return samples[below] + (position - static_cast<double>(below)) * (samples[above] - samples[below]);
}

// The two parts of one outer iteration: up to the mean loss (cloning the weights, the calls,
// the reduction), and its backward pass.
struct OuterIterationPhases {
  double forward_seconds, backward_seconds;
};

// Runs forward(context) (cloning the weights, the calls, the mean loss) inside a distributed
// autograd context, which it is given, or without one (null) when `local`, then the loss's
// backward pass (distributed unless `local`); returns the seconds of each part, the backward's
// ending once `device` (a GPU) has finished its queued work.
template <typename Forward>
OuterIterationPhases forward_and_backward(bool local, distgrad::Device device, Forward forward) {
  std::optional<distgrad::autograd::Context> context;
  if (!local) context.emplace();
  const auto forward_start = Clock::now();
  const distgrad::Tensor loss = forward(context ? &*context : nullptr);
  const auto backward_start = Clock::now();
  if (context) {
    distgrad::autograd::backward(*context, {loss});
  } else {
    loss.backward();
  }
  if (device.is_cuda()) distgrad::cuda::synchronize(device.index);
  return {seconds_between(forward_start, backward_start), seconds_between(backward_start, Clock::now())};
}

// Runs `warmup` outer iterations, then `iterations` timed ones, and prints {"name": name,
// "seconds_per_iter": median, "p10", "p90", "iterations", "forward_seconds",
// "backward_seconds"} (the last two: medians of the phases each iteration reports).
inline void time_outer_iterations(const std::string& name, int warmup, int iterations,
                                  const std::function<OuterIterationPhases()>& outer_iteration) {
  DISTGRAD_CHECK(iterations >= 1, name, ": expected --iterations >= 1, found ", iterations);
  for (int i = 0; i < warmup; ++i) outer_iteration();
  std::vector<double> samples, forward_samples, backward_samples;
  for (int i = 0; i < iterations; ++i) {
    const auto start = Clock::now();
    const OuterIterationPhases phases = outer_iteration();
    samples.push_back(seconds_between(start, Clock::now()));
    forward_samples.push_back(phases.forward_seconds);
    backward_samples.push_back(phases.backward_seconds);
  }
  std::printf(
      "{\"name\": \"%s\", \"seconds_per_iter\": %.9g, \"p10\": %.9g, \"p90\": %.9g, \"iterations\": %zu, "
      "\"forward_seconds\": %.9g, \"backward_seconds\": %.9g}\n",
      name.c_str(), quantile(samples, 0.5), quantile(samples, 0.1), quantile(samples, 0.9), samples.size(),
      quantile(forward_samples, 0.5), quantile(backward_samples, 0.5));
  std::fflush(stdout);
}

}  // namespace bench
