#include "nn/init.h"

#include <cmath>

#include "core/ops.h"

namespace distgrad::nn::init {

Tensor uniform(const Shape& sizes, double low, double high, TensorOptions options) {
  DISTGRAD_CHECK(is_floating(options.dtype), "nn::init::uniform: expected a floating dtype, found ",
                 dtype_name(options.dtype));
  DISTGRAD_CHECK(low <= high, "nn::init::uniform: expected low <= high, found low=", low, ", high=", high);
  const TensorOptions plain{.dtype = options.dtype, .device = options.device};
  return untracked::add(untracked::mul(rand(sizes, plain), high - low), low);
}

Tensor fan_in_uniform(const Shape& sizes, int64_t fan_in, TensorOptions options) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  return uniform(sizes, -bound, bound, options);
}

}  // namespace distgrad::nn::init
