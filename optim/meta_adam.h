// MetaAdam: differentiable Adam for inner loops (torchopt.MetaAdam, torchopt.adam's formulas).
//
// For each optimized parameter p with gradient g, at its step t (counted from 1), the new
// parameter is built with recorded ops (see optim/meta_optimizer.h):
//   g = g + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   p' = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t) + eps_root) + eps)
// eps_root, inside the square root, keeps the meta-gradient finite where v is zero (the
// derivative of sqrt at 0 is infinite); TorchOpt recommends it when differentiating through
// Adam. m and v are differentiable state; with moment_requires_grad they start as zero
// leaves that require grad, as in TorchOpt.
//
//   dg::optim::MetaAdam inner(params, {.lr = 0.01, .eps_root = 1e-8});
//   params = inner.step(loss);
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <utility>
#include <vector>

#include "optim/meta_optimizer.h"

namespace distgrad::optim {

struct MetaAdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double eps_root = 0;
  double weight_decay = 0;
  bool moment_requires_grad = true;
};

class MetaAdam : public MetaOptimizer {
 public:
  MetaAdam(nn::ParamDict params, const MetaAdamOptions& options);
  // MetaAdam(params, 1e-3): the learning rate alone (a template, so that `MetaAdam(params, {})`
  // means default options rather than lr = 0).
  template <std::convertible_to<double> Lr>
  MetaAdam(nn::ParamDict params, Lr lr) : MetaAdam(std::move(params), MetaAdamOptions{.lr = static_cast<double>(lr)}) {}

  const MetaAdamOptions& options() const { return options_; }

 protected:
  Tensor update(size_t index, const Tensor& parameter, const Tensor& grad) override;

 private:
  struct Moments {
    Tensor mu;  // m
    Tensor nu;  // v
    int64_t count = 0;
  };

  MetaAdamOptions options_;
  std::vector<Moments> moments_;  // per optimized entry; undefined tensors before its first update
};

}  // namespace distgrad::optim
