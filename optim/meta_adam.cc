#include "optim/meta_adam.h"

#include <cmath>

#include "autograd/ops.h"
#include "core/creation.h"
#include "optim/optimizer.h"

namespace distgrad::optim {

MetaAdam::MetaAdam(nn::ParamDict params, const MetaAdamOptions& options)
    : MetaOptimizer("MetaAdam", std::move(params)), options_(options), moments_(num_optimized()) {
  detail::check_hyperparameter(options.lr >= 0, name(), "lr >= 0", options.lr);
  detail::check_hyperparameter(options.eps >= 0, name(), "eps >= 0", options.eps);
  detail::check_hyperparameter(options.eps_root >= 0, name(), "eps_root >= 0", options.eps_root);
  detail::check_hyperparameter(options.betas[0] >= 0 && options.betas[0] < 1, name(), "0 <= betas[0] < 1",
                               options.betas[0]);
  detail::check_hyperparameter(options.betas[1] >= 0 && options.betas[1] < 1, name(), "0 <= betas[1] < 1",
                               options.betas[1]);
  detail::check_hyperparameter(options.weight_decay >= 0, name(), "weight_decay >= 0", options.weight_decay);
}

Tensor MetaAdam::update(size_t index, const Tensor& parameter, const Tensor& grad) {
  const auto [beta1, beta2] = options_.betas;
  Moments& moments = moments_[index];
  if (!moments.mu.defined()) {
    const TensorOptions zeros_options{
        .dtype = parameter.dtype(), .device = parameter.device(), .requires_grad = options_.moment_requires_grad};
    moments.mu = zeros(parameter.sizes(), zeros_options);
    moments.nu = zeros(parameter.sizes(), zeros_options);
  }
  Tensor g = grad;
  if (options_.weight_decay != 0) g = add(g, mul(parameter, options_.weight_decay));
  moments.mu = add(mul(moments.mu, beta1), mul(g, 1 - beta1));
  moments.nu = add(mul(moments.nu, beta2), mul(mul(g, g), 1 - beta2));
  moments.count += 1;
  const auto count = static_cast<double>(moments.count);
  const Tensor mu_hat = div(moments.mu, 1 - std::pow(beta1, count));
  Tensor nu_hat = div(moments.nu, 1 - std::pow(beta2, count));
  if (options_.eps_root != 0) nu_hat = add(nu_hat, options_.eps_root);
  return sub(parameter, mul(div(mu_hat, add(sqrt(nu_hat), options_.eps)), options_.lr));
}

}  // namespace distgrad::optim
