// Adam and AdamW (torch.optim.Adam / torch.optim.AdamW, same formulas and defaults).
//
// For each parameter p with gradient g, at its step t (counted from 1):
//   g = g + weight_decay * p                     (Adam: L2 penalty folded into the gradient)
//   p = p * (1 - lr * weight_decay)              (AdamW: decoupled weight decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   v_max = max(v_max, v)                        (amsgrad; v_max replaces v below)
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The state of each parameter is "step" (int64, 0-dim), "exp_avg" (m), "exp_avg_sq" (v) and,
// with amsgrad, "max_exp_avg_sq" (v_max), as in torch.
//
//   dg::optim::Adam adam(net.parameters(), 1e-3);
//   dg::optim::AdamW adamw(net.parameters(), {.lr = 1e-3, .weight_decay = 0.05, .amsgrad = true});
#pragma once

#include <array>
#include <concepts>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace distgrad::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
};

// AdamOptions with AdamW's default weight decay.
struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> parameters, const AdamOptions& options);
  // Adam(params, 1e-3): the learning rate alone (a template, so that `Adam(params, {})` means
  // default options rather than lr = 0).
  template <std::convertible_to<double> Lr>
  Adam(std::vector<Tensor> parameters, Lr lr)
      : Adam(std::move(parameters), AdamOptions{.lr = static_cast<double>(lr)}) {}

  const AdamOptions& options() const { return options_; }

 protected:
  // AdamW's constructor: with `decoupled_weight_decay` the decay scales the parameters
  // instead of adding to the gradient.
  Adam(std::string name, std::vector<Tensor> parameters, const AdamOptions& options, bool decoupled_weight_decay);

  void update(const Tensor& parameter, const Tensor& grad, nn::ParamDict& state) override;
  std::vector<std::string> state_names() const override;

 private:
  AdamOptions options_;
  bool decoupled_weight_decay_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay
// Regularization"): the decay shrinks the parameters directly and does not pass through the
// moment estimates.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> parameters, const AdamWOptions& options);
  template <std::convertible_to<double> Lr>
  AdamW(std::vector<Tensor> parameters, Lr lr)
      : AdamW(std::move(parameters), AdamWOptions{.lr = static_cast<double>(lr)}) {}
};

}  // namespace distgrad::optim
