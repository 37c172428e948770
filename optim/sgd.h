// SGD: stochastic gradient descent with momentum, dampening, Nesterov and weight decay
// (torch.optim.SGD, same formulas and defaults).
//
// For each parameter p with gradient g, at step t:
//   g = g + weight_decay * p
//   b = g at the first step, else momentum * b + (1 - dampening) * g     (when momentum != 0)
//   g = g + momentum * b if nesterov, else b                              (when momentum != 0)
//   p = p - lr * g
// The state of each parameter is its momentum buffer b ("momentum_buffer"), when momentum != 0.
// The rule is written once, in sgd_update below: SGD runs it with grad mode off and copies the
// result into the parameter; MetaSGD (optim/meta_sgd.h) runs it recorded.
//
//   dg::optim::SGD sgd(net.parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
//   dg::optim::SGD plain(net.parameters(), 0.01);
//   dg::optim::SGD grouped({{.params = backbone, .options = {.lr = 0.01}},
//                           {.params = head, .options = {.lr = 0.1}}});
#pragma once

#include <concepts>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace distgrad::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  // Requires momentum > 0 and dampening == 0.
  bool nesterov = false;
};

// SGD's update of one parameter, the rule that SGD and MetaSGD both run: returns the new value
// of `parameter` and replaces `momentum_buffer` (undefined before the first step; left alone
// without momentum) by its new value. Built from distgrad's ops: recorded with grad mode on
// (MetaSGD), plain tensors with it off (SGD). The first buffer may be `grad` itself.
Tensor sgd_update(const SGDOptions& options, const Tensor& parameter, const Tensor& grad, Tensor& momentum_buffer);

namespace detail {
// Checks SGD's hyper-parameters for `optimizer` ("SGD", "MetaSGD"); errors name it.
void check_sgd_options(const SGDOptions& options, const std::string& optimizer);
}  // namespace detail

class SGD : public GroupedOptimizer<SGDOptions> {
 public:
  // Parameter groups, each with its options (Note [Optimizer state dict] numbers their
  // parameters in order).
  explicit SGD(std::vector<ParamGroup> groups);
  // One group.
  SGD(std::vector<Tensor> parameters, const SGDOptions& options);
  // SGD(params, 0.01): the learning rate alone (a template, so that `SGD(params, {})` means
  // default options rather than lr = 0).
  template <std::convertible_to<double> Lr>
  SGD(std::vector<Tensor> parameters, Lr lr) : SGD(std::move(parameters), SGDOptions{.lr = static_cast<double>(lr)}) {}

  // param_groups(), lr(group) and set_lr(group, lr): GroupedOptimizer's.

 protected:
  void update(size_t group, const Tensor& parameter, const Tensor& grad, nn::ParamDict& state) override;
  std::vector<std::string> state_names(size_t group) const override;
};

}  // namespace distgrad::optim
