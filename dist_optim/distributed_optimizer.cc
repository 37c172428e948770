#include "dist_optim/distributed_optimizer.h"

namespace distgrad::optim::detail {

std::mutex& local_step_mutex() {
  static std::mutex mutex;
  return mutex;
}

ContextGradients::ContextGradients(const std::vector<Tensor>& parameters, int64_t context) : parameters_(parameters) {
  const autograd::GradientMap gradients = autograd::get_gradients(context);
  for (const Tensor& parameter : parameters_) {
    saved_.push_back(parameter.grad());
    parameter.set_grad(gradients.contains(parameter) ? gradients.at(parameter) : Tensor());
  }
}

ContextGradients::~ContextGradients() {
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].set_grad(saved_[i]);
}

}  // namespace distgrad::optim::detail
