#include "optim/adam.h"

#include <cmath>
#include <string>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/creation.h"

namespace distgrad::optim {

Tensor adam_update(const AdamOptions& options, bool decoupled_weight_decay, const Tensor& parameter, const Tensor& grad,
                   AdamState& state) {
  const auto [beta1, beta2] = options.betas;
  if (!state.exp_avg.defined()) {
    const TensorOptions zeros_options{
        .dtype = parameter.dtype(),
        .device = parameter.device(),
        .requires_grad = options.moment_requires_grad && autograd::GradMode::is_enabled()};
    state.exp_avg = zeros(parameter.sizes(), zeros_options);
    state.exp_avg_sq = zeros(parameter.sizes(), zeros_options);
    if (options.amsgrad) state.max_exp_avg_sq = zeros(parameter.sizes(), zeros_options);
  }
  const auto step = static_cast<double>(++state.step);

  Tensor p = parameter, g = grad;
  if (options.weight_decay != 0) {
    if (decoupled_weight_decay) {
      p = mul(p, 1 - options.lr * options.weight_decay);
    } else {
      g = add(g, mul(p, options.weight_decay));
    }
  }
  // torch's arithmetic: exp_avg.lerp_(g, 1 - beta1), exp_avg_sq * beta2 + (1 - beta2) g^2.
  state.exp_avg = add(state.exp_avg, mul(sub(g, state.exp_avg), 1 - beta1));
  state.exp_avg_sq = add(mul(state.exp_avg_sq, beta2), mul(mul(g, g), 1 - beta2));
  Tensor second_moment = state.exp_avg_sq;
  if (options.amsgrad) {
    state.max_exp_avg_sq = maximum(state.max_exp_avg_sq, state.exp_avg_sq);
    second_moment = state.max_exp_avg_sq;
  }
  const double bias_correction2 = 1 - std::pow(beta2, step);
  if (options.eps_root != 0) second_moment = add(second_moment, options.eps_root * bias_correction2);
  const double step_size = options.lr / (1 - std::pow(beta1, step));
  const Tensor denominator = add(div(sqrt(second_moment), std::sqrt(bias_correction2)), options.eps);
  return sub(p, mul(div(state.exp_avg, denominator), step_size));
}

namespace detail {

void check_adam_options(const AdamOptions& options, const std::string& optimizer) {
  check_hyperparameter(options.lr >= 0, optimizer, "lr >= 0", options.lr);
  check_hyperparameter(options.eps >= 0, optimizer, "eps >= 0", options.eps);
  check_hyperparameter(options.eps_root >= 0, optimizer, "eps_root >= 0", options.eps_root);
  check_hyperparameter(options.betas[0] >= 0 && options.betas[0] < 1, optimizer, "0 <= betas[0] < 1", options.betas[0]);
  check_hyperparameter(options.betas[1] >= 0 && options.betas[1] < 1, optimizer, "0 <= betas[1] < 1", options.betas[1]);
  check_hyperparameter(options.weight_decay >= 0, optimizer, "weight_decay >= 0", options.weight_decay);
}

}  // namespace detail

namespace {

std::vector<Adam::ParamGroup> as_adam_groups(std::vector<AdamW::ParamGroup> groups) {
  std::vector<Adam::ParamGroup> adam_groups;
  adam_groups.reserve(groups.size());
  for (AdamW::ParamGroup& group : groups) {
    const AdamWOptions& options = group.options;
    adam_groups.push_back({.params = std::move(group.params),
                           .options = {.lr = options.lr,
                                       .betas = options.betas,
                                       .eps = options.eps,
                                       .weight_decay = options.weight_decay,
                                       .amsgrad = options.amsgrad}});
  }
  return adam_groups;
}

}  // namespace

Adam::Adam(std::vector<ParamGroup> groups) : Adam("Adam", std::move(groups), /*decoupled_weight_decay=*/false) {}

Adam::Adam(std::vector<Tensor> parameters, const AdamOptions& options)
    : Adam(std::vector<ParamGroup>{{.params = std::move(parameters), .options = options}}) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, bool decoupled_weight_decay)
    : GroupedOptimizer(std::move(name), std::move(groups)), decoupled_weight_decay_(decoupled_weight_decay) {
  for (size_t group = 0; group < num_param_groups(); ++group) {
    detail::check_adam_options(options_of(group), group_context(group));
  }
}

AdamW::AdamW(std::vector<ParamGroup> groups)
    : Adam("AdamW", as_adam_groups(std::move(groups)), /*decoupled_weight_decay=*/true) {}

AdamW::AdamW(std::vector<Tensor> parameters, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{{.params = std::move(parameters), .options = options}}) {}

std::vector<std::string> Adam::state_names(size_t group) const {
  if (options_of(group).amsgrad) return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"step", "exp_avg", "exp_avg_sq"};
}

void Adam::update(size_t group, const Tensor& parameter, const Tensor& grad, nn::ParamDict& state) {
  const AdamOptions& options = options_of(group);
  AdamState adam;
  if (!state.empty()) {
    adam = {.step = state.at("step").item<int64_t>(),
            .exp_avg = state.at("exp_avg"),
            .exp_avg_sq = state.at("exp_avg_sq"),
            .max_exp_avg_sq = options.amsgrad ? state.at("max_exp_avg_sq") : Tensor()};
  }
  copy_(parameter, adam_update(options, decoupled_weight_decay_, parameter, grad, adam));
  state.insert("step", scalar_tensor(static_cast<double>(adam.step), {.dtype = kInt64}));
  state.insert("exp_avg", adam.exp_avg);
  state.insert("exp_avg_sq", adam.exp_avg_sq);
  if (options.amsgrad) state.insert("max_exp_avg_sq", adam.max_exp_avg_sq);
}

}  // namespace distgrad::optim
