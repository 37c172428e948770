// MetaSGD: differentiable SGD for inner loops (torchopt.MetaSGD, torchopt.sgd's formulas).
//
// For each optimized parameter p with gradient g, the new parameter is built with recorded
// ops (see optim/meta_optimizer.h):
//   g = g + weight_decay * p
//   b = g at the first step, else momentum * b + (1 - dampening) * g     (when momentum != 0)
//   g = g + momentum * b if nesterov, else b                              (when momentum != 0)
//   p' = p - lr * g
// These are torch.optim.SGD's formulas, written once in sgd_update (optim/sgd.h), which SGD runs
// in place; here it is recorded, and the momentum buffer b is differentiable state.
//
//   dg::optim::MetaSGD inner(params, 0.01);
//   dg::optim::MetaSGD with_momentum(params, {.lr = 0.01, .momentum = 0.9, .nesterov = true});
//   dg::optim::MetaSGD scheduled(params, dg::optim::schedule::linear(0.1, 0.01, 5),
//                                {.momentum = 0.9});
//   params = inner.step(loss);
#pragma once

#include <concepts>
#include <cstdint>
#include <utility>
#include <vector>

#include "optim/meta_optimizer.h"
#include "optim/sgd.h"

namespace distgrad::optim {

class MetaSGD : public MetaOptimizer {
 public:
  MetaSGD(nn::ParamDict params, const SGDOptions& options);
  // MetaSGD(params, 0.01): the learning rate alone (a template, so that `MetaSGD(params, {})`
  // means default options rather than lr = 0).
  template <std::convertible_to<double> Lr>
  MetaSGD(nn::ParamDict params, Lr lr) : MetaSGD(std::move(params), SGDOptions{.lr = static_cast<double>(lr)}) {}
  // The learning rate as a schedule of the step count (optim/schedule.h; TorchOpt's
  // lr=schedule), with `options` for the rest: options.lr is not used.
  MetaSGD(nn::ParamDict params, Schedule lr, const SGDOptions& options);
  // MetaSGD(params, schedule::linear(...)): a schedule with default options (a template, so
  // that `MetaSGD(params, {})` still means default options).
  template <std::invocable<int64_t> LrSchedule>
  MetaSGD(nn::ParamDict params, LrSchedule lr) : MetaSGD(std::move(params), Schedule(std::move(lr)), SGDOptions{}) {}

  const SGDOptions& options() const { return options_; }

 protected:
  Tensor update(size_t index, const Tensor& parameter, const Tensor& grad, double lr) override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;  // per optimized entry; undefined before its first update
};

}  // namespace distgrad::optim
