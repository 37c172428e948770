#include "optim/meta_sgd.h"

#include "autograd/ops.h"
#include "optim/optimizer.h"

namespace distgrad::optim {

MetaSGD::MetaSGD(nn::ParamDict params, const MetaSGDOptions& options)
    : MetaOptimizer("MetaSGD", std::move(params)), options_(options), momentum_buffers_(num_optimized()) {
  detail::check_hyperparameter(options.lr >= 0, name(), "lr >= 0", options.lr);
  detail::check_hyperparameter(options.momentum >= 0, name(), "momentum >= 0", options.momentum);
  detail::check_hyperparameter(options.weight_decay >= 0, name(), "weight_decay >= 0", options.weight_decay);
  DISTGRAD_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0), name(),
                 ": Nesterov momentum requires a momentum > 0 and zero dampening, found momentum ", options.momentum,
                 " and dampening ", options.dampening);
}

Tensor MetaSGD::update(size_t index, const Tensor& parameter, const Tensor& grad) {
  Tensor direction = grad;
  if (options_.weight_decay != 0) direction = add(direction, mul(parameter, options_.weight_decay));
  if (options_.momentum != 0) {
    Tensor& buffer = momentum_buffers_[index];
    if (!buffer.defined()) {
      buffer = direction;
    } else {
      const Tensor damped = options_.dampening == 0 ? direction : mul(direction, 1 - options_.dampening);
      buffer = add(mul(buffer, options_.momentum), damped);
    }
    direction = options_.nesterov ? add(direction, mul(buffer, options_.momentum)) : buffer;
  }
  return sub(parameter, mul(direction, options_.lr));
}

}  // namespace distgrad::optim
