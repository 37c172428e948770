#include "optim/adam.h"

#include <cmath>

#include "core/ops.h"

namespace distgrad::optim {

Adam::Adam(std::vector<Tensor> parameters, const AdamOptions& options)
    : Adam("Adam", std::move(parameters), options, /*decoupled_weight_decay=*/false) {}

Adam::Adam(std::string name, std::vector<Tensor> parameters, const AdamOptions& options, bool decoupled_weight_decay)
    : Optimizer(std::move(name), std::move(parameters)),
      options_(options),
      decoupled_weight_decay_(decoupled_weight_decay) {
  detail::check_hyperparameter(options.lr >= 0, this->name(), "lr >= 0", options.lr);
  detail::check_hyperparameter(options.eps >= 0, this->name(), "eps >= 0", options.eps);
  detail::check_hyperparameter(options.betas[0] >= 0 && options.betas[0] < 1, this->name(), "0 <= betas[0] < 1",
                               options.betas[0]);
  detail::check_hyperparameter(options.betas[1] >= 0 && options.betas[1] < 1, this->name(), "0 <= betas[1] < 1",
                               options.betas[1]);
  detail::check_hyperparameter(options.weight_decay >= 0, this->name(), "weight_decay >= 0", options.weight_decay);
}

AdamW::AdamW(std::vector<Tensor> parameters, const AdamWOptions& options)
    : Adam("AdamW", std::move(parameters),
           AdamOptions{.lr = options.lr,
                       .betas = options.betas,
                       .eps = options.eps,
                       .weight_decay = options.weight_decay,
                       .amsgrad = options.amsgrad},
           /*decoupled_weight_decay=*/true) {}

std::vector<std::string> Adam::state_names() const {
  if (options_.amsgrad) return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"step", "exp_avg", "exp_avg_sq"};
}

void Adam::update(const Tensor& parameter, const Tensor& grad, nn::ParamDict& state) {
  const auto [beta1, beta2] = options_.betas;
  if (state.empty()) {
    state.insert("step", scalar_tensor(0, {.dtype = kInt64}));
    state.insert("exp_avg", zeros_like(parameter));
    state.insert("exp_avg_sq", zeros_like(parameter));
    if (options_.amsgrad) state.insert("max_exp_avg_sq", zeros_like(parameter));
  }
  const Tensor& step_count = state.at("step");
  const auto step = static_cast<double>(step_count.item<int64_t>() + 1);
  untracked::fill_(step_count, step);

  Tensor g = grad;
  if (options_.weight_decay != 0) {
    if (decoupled_weight_decay_) {
      untracked::mul_(parameter, 1 - options_.lr * options_.weight_decay);
    } else {
      g = untracked::add(g, untracked::mul(parameter, options_.weight_decay));
    }
  }
  const Tensor& exp_avg = state.at("exp_avg");
  const Tensor& exp_avg_sq = state.at("exp_avg_sq");
  // The same arithmetic as torch.optim, in place wherever a temporary can be reused: a step
  // is a handful of passes over each parameter, not one pass and one allocation per operator.
  const Tensor momentum_step = untracked::sub(g, exp_avg);
  untracked::add_(exp_avg, untracked::mul_(momentum_step, 1 - beta1));
  untracked::mul_(exp_avg_sq, beta2);
  const Tensor square = untracked::mul(g, g);
  untracked::add_(exp_avg_sq, untracked::mul_(square, 1 - beta2));

  Tensor second_moment = exp_avg_sq;
  if (options_.amsgrad) {
    const Tensor& max_exp_avg_sq = state.at("max_exp_avg_sq");
    untracked::copy_(max_exp_avg_sq, untracked::maximum(max_exp_avg_sq, exp_avg_sq));
    second_moment = max_exp_avg_sq;
  }
  const double step_size = options_.lr / (1 - std::pow(beta1, step));
  const double bias_correction2_sqrt = std::sqrt(1 - std::pow(beta2, step));
  const Tensor denominator = untracked::sqrt(second_moment);
  untracked::add_(untracked::div_(denominator, bias_correction2_sqrt), options_.eps);
  const Tensor update = untracked::div(exp_avg, denominator);
  untracked::sub_(parameter, untracked::mul_(update, step_size));
}

}  // namespace distgrad::optim
