#include "optim/meta_sgd.h"

namespace distgrad::optim {

MetaSGD::MetaSGD(nn::ParamDict params, const SGDOptions& options)
    : MetaOptimizer("MetaSGD", std::move(params)), options_(options), momentum_buffers_(num_optimized()) {
  detail::check_sgd_options(options, name());
}

Tensor MetaSGD::update(size_t index, const Tensor& parameter, const Tensor& grad) {
  return sgd_update(options_, parameter, grad, momentum_buffers_[index]);
}

}  // namespace distgrad::optim
