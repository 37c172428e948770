#include "optim/meta_adam.h"

namespace distgrad::optim {

MetaAdam::MetaAdam(nn::ParamDict params, const AdamOptions& options)
    : MetaOptimizer("MetaAdam", std::move(params)), options_(options), states_(num_optimized()) {
  detail::check_adam_options(options, name());
}

Tensor MetaAdam::update(size_t index, const Tensor& parameter, const Tensor& grad) {
  return adam_update(options_, /*decoupled_weight_decay=*/false, parameter, grad, states_[index]);
}

}  // namespace distgrad::optim
