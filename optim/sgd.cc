#include "optim/sgd.h"

#include "autograd/ops.h"

namespace distgrad::optim {

Tensor sgd_update(const SGDOptions& options, const Tensor& parameter, const Tensor& grad, Tensor& momentum_buffer) {
  Tensor direction = grad;
  if (options.weight_decay != 0) direction = add(direction, mul(parameter, options.weight_decay));
  if (options.momentum != 0) {
    if (!momentum_buffer.defined()) {
      momentum_buffer = direction;
    } else {
      const Tensor damped = options.dampening == 0 ? direction : mul(direction, 1 - options.dampening);
      momentum_buffer = add(mul(momentum_buffer, options.momentum), damped);
    }
    direction = options.nesterov ? add(direction, mul(momentum_buffer, options.momentum)) : momentum_buffer;
  }
  return sub(parameter, mul(direction, options.lr));
}

namespace detail {

void check_sgd_options(const SGDOptions& options, const std::string& optimizer) {
  check_hyperparameter(options.lr >= 0, optimizer, "lr >= 0", options.lr);
  check_hyperparameter(options.momentum >= 0, optimizer, "momentum >= 0", options.momentum);
  check_hyperparameter(options.weight_decay >= 0, optimizer, "weight_decay >= 0", options.weight_decay);
  DISTGRAD_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0), optimizer,
                 ": Nesterov momentum requires a momentum > 0 and zero dampening, found momentum ", options.momentum,
                 " and dampening ", options.dampening);
}

}  // namespace detail

SGD::SGD(std::vector<ParamGroup> groups) : GroupedOptimizer("SGD", std::move(groups)) {
  for (size_t group = 0; group < num_param_groups(); ++group) {
    detail::check_sgd_options(options_of(group), group_context(group));
  }
}

SGD::SGD(std::vector<Tensor> parameters, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{{.params = std::move(parameters), .options = options}}) {}

std::vector<std::string> SGD::state_names(size_t group) const {
  if (options_of(group).momentum == 0) return {};
  return {"momentum_buffer"};
}

void SGD::update(size_t group, const Tensor& parameter, const Tensor& grad, nn::ParamDict& state) {
  const SGDOptions& options = options_of(group);
  const Tensor* stored = state.find("momentum_buffer");
  Tensor buffer = stored == nullptr ? Tensor() : *stored;
  copy_(parameter, sgd_update(options, parameter, grad, buffer));
  // The first buffer is the gradient (or a tensor made from it): the state keeps its own copy.
  if (options.momentum != 0) state.insert("momentum_buffer", stored == nullptr ? clone(buffer) : buffer);
}

}  // namespace distgrad::optim
