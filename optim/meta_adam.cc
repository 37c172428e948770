#include "optim/meta_adam.h"

namespace distgrad::optim {

MetaAdam::MetaAdam(nn::ParamDict params, const AdamOptions& options)
    : MetaAdam(
          std::move(params), [lr = options.lr](int64_t) { return lr; }, options) {}

MetaAdam::MetaAdam(nn::ParamDict params, Schedule lr, const AdamOptions& options)
    : MetaOptimizer("MetaAdam", std::move(params), std::move(lr)), options_(options), states_(num_optimized()) {
  detail::check_adam_options(options, name());
}

Tensor MetaAdam::update(size_t index, const Tensor& parameter, const Tensor& grad, double lr) {
  AdamOptions options = options_;
  options.lr = lr;
  return adam_update(options, /*decoupled_weight_decay=*/false, parameter, grad, states_[index]);
}

}  // namespace distgrad::optim
