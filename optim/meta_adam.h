// MetaAdam: differentiable Adam for inner loops (torchopt.MetaAdam, torchopt.adam's formulas).
//
// For each optimized parameter p with gradient g, at its step t (counted from 1), the new
// parameter is built with recorded ops (see optim/meta_optimizer.h) by Adam's rule, adam_update
// (optim/adam.h, which Adam runs in place):
//   g = g + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   p' = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t) + eps_root) + eps)
// (TorchOpt's formula; the rule computes it in torch.optim.Adam's order of operations, equal up
// to rounding). eps_root, inside the square root, keeps the meta-gradient finite where v is zero
// (the derivative of sqrt at 0 is infinite); TorchOpt recommends it when differentiating through
// Adam. m and v are differentiable state; with moment_requires_grad they start as zero leaves
// that require grad, as in TorchOpt. amsgrad works as in Adam (its maximum differentiable).
//
//   dg::optim::MetaAdam inner(params, {.lr = 0.01, .eps_root = 1e-8});
//   dg::optim::MetaAdam scheduled(params, dg::optim::schedule::cosine(0.01, /*t_max=*/10),
//                                 {.eps_root = 1e-8});
//   params = inner.step(loss);
#pragma once

#include <concepts>
#include <cstdint>
#include <utility>
#include <vector>

#include "optim/adam.h"
#include "optim/meta_optimizer.h"

namespace distgrad::optim {

class MetaAdam : public MetaOptimizer {
 public:
  MetaAdam(nn::ParamDict params, const AdamOptions& options);
  // MetaAdam(params, 1e-3): the learning rate alone (a template, so that `MetaAdam(params, {})`
  // means default options rather than lr = 0).
  template <std::convertible_to<double> Lr>
  MetaAdam(nn::ParamDict params, Lr lr) : MetaAdam(std::move(params), AdamOptions{.lr = static_cast<double>(lr)}) {}
  // The learning rate as a schedule of the step count (optim/schedule.h; TorchOpt's
  // lr=schedule), with `options` for the rest: options.lr is not used.
  MetaAdam(nn::ParamDict params, Schedule lr, const AdamOptions& options);
  // MetaAdam(params, schedule::linear(...)): a schedule with default options (a template, so
  // that `MetaAdam(params, {})` still means default options).
  template <std::invocable<int64_t> LrSchedule>
  MetaAdam(nn::ParamDict params, LrSchedule lr) : MetaAdam(std::move(params), Schedule(std::move(lr)), AdamOptions{}) {}

  const AdamOptions& options() const { return options_; }

 protected:
  Tensor update(size_t index, const Tensor& parameter, const Tensor& grad, double lr) override;

 private:
  AdamOptions options_;
  std::vector<AdamState> states_;  // per optimized entry; undefined tensors before its first update
};

}  // namespace distgrad::optim
