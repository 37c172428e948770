#include "nn/linear.h"

#include "absl/strings/str_cat.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "nn/init.h"

namespace distgrad::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, TensorOptions options)
    : in_features_(in_features), out_features_(out_features) {
  DISTGRAD_CHECK(in_features >= 0 && out_features >= 0,
                 "Linear: expected non-negative sizes, found in_features=", in_features,
                 ", out_features=", out_features);
  weight = init::fan_in_uniform({out_features, in_features}, in_features, options);
  register_parameter("weight", weight);
  if (with_bias) {
    bias = init::fan_in_uniform({out_features}, in_features, options);
    register_parameter("bias", bias);
  }
}

std::string Linear::name() const {
  return absl::StrCat("Linear(in_features=", in_features_, ", out_features=", out_features_,
                      ", bias=", bias.defined() ? "true" : "false", ")");
}

Tensor Linear::forward(const Tensor& input) {
  input.check_defined("Linear");
  DISTGRAD_CHECK(input.dim() >= 1 && input.size(-1) == in_features_, name(), ": expected input of shape [..., ",
                 in_features_, "], found ", shape_str(input.sizes()));
  if (input.dim() != 2) {
    Shape out_sizes = input.sizes();
    out_sizes.back() = 1;
    const int64_t rows = shape_numel(out_sizes);  // the product of the leading dims
    out_sizes.back() = out_features_;
    return reshape(forward(reshape(input, {rows, in_features_})), out_sizes);
  }
  if (!bias.defined()) return matmul(input, t(weight));
  return addmm(bias, input, t(weight));
}

}  // namespace distgrad::nn
