#include "optim/meta_sgd.h"

namespace distgrad::optim {

MetaSGD::MetaSGD(nn::ParamDict params, const SGDOptions& options)
    : MetaSGD(
          std::move(params), [lr = options.lr](int64_t) { return lr; }, options) {}

MetaSGD::MetaSGD(nn::ParamDict params, Schedule lr, const SGDOptions& options)
    : MetaOptimizer("MetaSGD", std::move(params), std::move(lr)),
      options_(options),
      momentum_buffers_(num_optimized()) {
  detail::check_sgd_options(options, name());
}

Tensor MetaSGD::update(size_t index, const Tensor& parameter, const Tensor& grad, double lr) {
  SGDOptions options = options_;
  options.lr = lr;
  return sgd_update(options, parameter, grad, momentum_buffers_[index]);
}

}  // namespace distgrad::optim
