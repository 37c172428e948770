// Adam and AdamW (torch.optim.Adam / torch.optim.AdamW, same formulas and defaults).
//
// For each parameter p with gradient g, at its step t (counted from 1):
//   g = g + weight_decay * p                     (Adam: L2 penalty folded into the gradient)
//   p = p * (1 - lr * weight_decay)              (AdamW: decoupled weight decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   v_max = max(v_max, v)                        (amsgrad; v_max replaces v below)
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v + eps_root (1 - beta2^t)) / sqrt(1 - beta2^t) + eps)
// eps_root (TorchOpt's, 0 by default as in torch) is sqrt(v / (1 - beta2^t) + eps_root) rewritten
// so that without it the arithmetic is torch.optim.Adam's, operation for operation. The state of
// each parameter is "step" (int64, 0-dim), "exp_avg" (m), "exp_avg_sq" (v) and, with amsgrad,
// "max_exp_avg_sq" (v_max), as in torch. The rule is written once, in adam_update below: Adam
// runs it with grad mode off and copies the result into the parameter; MetaAdam
// (optim/meta_adam.h) runs it recorded.
//
//   dg::optim::Adam adam(net.parameters(), 1e-3);
//   dg::optim::AdamW adamw(net.parameters(), {.lr = 1e-3, .weight_decay = 0.05, .amsgrad = true});
//   dg::optim::AdamW grouped({{.params = weights},
//                             {.params = biases, .options = {.weight_decay = 0}}});
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace distgrad::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  // Added to the second moment inside the square root (TorchOpt's): keeps a meta-gradient
  // through the step finite where v is zero.
  double eps_root = 0;
  double weight_decay = 0;
  bool amsgrad = false;
  // MetaAdam: the moments start as zero leaves that require grad (TorchOpt's default).
  bool moment_requires_grad = true;
};

// AdamOptions with AdamW's default weight decay.
struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

// One parameter's Adam state: its step count and moment estimates (undefined before its first
// step; max_exp_avg_sq only with amsgrad).
struct AdamState {
  int64_t step = 0;
  Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
};

// Adam's update of one parameter, the rule that Adam, AdamW and MetaAdam run: returns the new
// value of `parameter` and advances `state`. With `decoupled_weight_decay` (AdamW) the decay
// scales the parameter instead of adding to the gradient. Built from distgrad's ops: recorded
// with grad mode on (MetaAdam), plain tensors with it off (Adam).
Tensor adam_update(const AdamOptions& options, bool decoupled_weight_decay, const Tensor& parameter, const Tensor& grad,
                   AdamState& state);

namespace detail {
// Checks Adam's hyper-parameters for `optimizer` ("Adam", "MetaAdam", ...); errors name it.
void check_adam_options(const AdamOptions& options, const std::string& optimizer);
}  // namespace detail

class Adam : public GroupedOptimizer<AdamOptions> {
 public:
  // Parameter groups, each with its options (Note [Optimizer state dict] numbers their
  // parameters in order).
  explicit Adam(std::vector<ParamGroup> groups);
  // One group.
  Adam(std::vector<Tensor> parameters, const AdamOptions& options);
  // Adam(params, 1e-3): the learning rate alone (a template, so that `Adam(params, {})` means
  // default options rather than lr = 0).
  template <std::convertible_to<double> Lr>
  Adam(std::vector<Tensor> parameters, Lr lr)
      : Adam(std::move(parameters), AdamOptions{.lr = static_cast<double>(lr)}) {}

  // param_groups(), lr(group) and set_lr(group, lr): GroupedOptimizer's (AdamW's groups hold its
  // options as AdamOptions, eps_root 0).

 protected:
  // AdamW's constructor: with `decoupled_weight_decay` the decay scales the parameters
  // instead of adding to the gradient.
  Adam(std::string name, std::vector<ParamGroup> groups, bool decoupled_weight_decay);

  void update(size_t group, const Tensor& parameter, const Tensor& grad, nn::ParamDict& state) override;
  std::vector<std::string> state_names(size_t group) const override;

 private:
  bool decoupled_weight_decay_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay
// Regularization"): the decay shrinks the parameters directly and does not pass through the
// moment estimates.
class AdamW : public Adam {
 public:
  using ParamGroup = optim::ParamGroup<AdamWOptions>;

  explicit AdamW(std::vector<ParamGroup> groups);
  AdamW(std::vector<Tensor> parameters, const AdamWOptions& options);
  template <std::convertible_to<double> Lr>
  AdamW(std::vector<Tensor> parameters, Lr lr)
      : AdamW(std::move(parameters), AdamWOptions{.lr = static_cast<double>(lr)}) {}
};

}  // namespace distgrad::optim
