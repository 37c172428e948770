#include "optim/meta_optimizer.h"

#include <utility>

#include "autograd/autograd.h"

namespace distgrad::optim {

MetaOptimizer::MetaOptimizer(std::string name, nn::ParamDict params, Schedule lr)
    : name_(std::move(name)), params_(std::move(params)), lr_(std::move(lr)) {
  DISTGRAD_CHECK(lr_ != nullptr, name_, ": expected a learning-rate schedule, found an empty std::function");
  const auto& entries = params_.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [key, tensor] = entries[i];
    DISTGRAD_CHECK(tensor.defined(), name_, ": parameter '", key, "' is an undefined tensor");
    if (tensor.requires_grad()) optimized_.push_back(i);
  }
}

nn::ParamDict MetaOptimizer::step(const Tensor& loss) {
  DISTGRAD_CHECK(loss.defined(), name_, ".step: the loss is an undefined tensor");
  DISTGRAD_CHECK(loss.numel() == 1, name_, ".step: expected a scalar loss (one element), found a ", loss.describe());
  const double lr = lr_(step_count_);
  DISTGRAD_CHECK(lr >= 0, name_, ".step: the learning-rate schedule gives ", lr, " at count ", step_count_,
                 ", expected lr >= 0");
  if (optimized_.empty()) {
    ++step_count_;
    return params_;
  }
  DISTGRAD_CHECK(loss.requires_grad(), name_, ".step: the loss (a ", loss.describe(),
                 ") does not require grad; compute it from the current parameters with grad mode on");

  const auto& entries = params_.entries();
  std::vector<Tensor> inputs;
  for (size_t i : optimized_) inputs.push_back(entries[i].second);
  const std::vector<Tensor> grads =
      autograd::grad({loss}, inputs, {.retain_graph = true, .create_graph = true, .allow_unused = true});
  std::vector<nn::ParamDict::Entry> updated = entries;
  for (size_t k = 0; k < optimized_.size(); ++k) {
    if (grads[k].defined()) updated[optimized_[k]].second = update(k, inputs[k], grads[k], lr);
  }
  params_ = nn::ParamDict(std::move(updated));
  ++step_count_;
  return params_;
}

}  // namespace distgrad::optim
