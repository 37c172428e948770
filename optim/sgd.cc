#include "optim/sgd.h"

#include "core/ops.h"

namespace distgrad::optim {

SGD::SGD(std::vector<Tensor> parameters, const SGDOptions& options)
    : Optimizer("SGD", std::move(parameters)), options_(options) {
  detail::check_hyperparameter(options.lr >= 0, name(), "lr >= 0", options.lr);
  detail::check_hyperparameter(options.momentum >= 0, name(), "momentum >= 0", options.momentum);
  detail::check_hyperparameter(options.weight_decay >= 0, name(), "weight_decay >= 0", options.weight_decay);
  DISTGRAD_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0), name(),
                 ": Nesterov momentum requires a momentum > 0 and zero dampening, found momentum ", options.momentum,
                 " and dampening ", options.dampening);
}

std::vector<std::string> SGD::state_names() const {
  if (options_.momentum == 0) return {};
  return {"momentum_buffer"};
}

void SGD::update(const Tensor& parameter, const Tensor& grad, nn::ParamDict& state) {
  Tensor direction = grad;
  if (options_.weight_decay != 0)
    direction = untracked::add(direction, untracked::mul(parameter, options_.weight_decay));
  if (options_.momentum != 0) {
    const Tensor* buffer = state.find("momentum_buffer");
    if (buffer == nullptr) {
      state.insert("momentum_buffer", untracked::clone(direction));
      buffer = state.find("momentum_buffer");
    } else {
      untracked::mul_(*buffer, options_.momentum);
      untracked::add_(*buffer, untracked::mul(direction, 1 - options_.dampening));
    }
    direction = options_.nesterov ? untracked::add(direction, untracked::mul(*buffer, options_.momentum)) : *buffer;
  }
  untracked::sub_(parameter, untracked::mul(direction, options_.lr));
}

}  // namespace distgrad::optim
