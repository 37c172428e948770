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
  return linear(input, weight, bias);
}

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  input.check_defined("linear");
  weight.check_defined("linear");
  DISTGRAD_CHECK(weight.dim() == 2, "linear: expected a weight of shape [out_features, in_features], found ",
                 shape_str(weight.sizes()));
  DISTGRAD_CHECK(input.dim() >= 1 && input.size(-1) == weight.size(1), "linear: expected input of shape [..., ",
                 weight.size(1), "] for a weight of shape ", shape_str(weight.sizes()), ", found ",
                 shape_str(input.sizes()));
  DISTGRAD_CHECK(!bias.defined() || bias.sizes() == Shape{weight.size(0)}, "linear: expected a bias of shape [",
                 weight.size(0), "], found ", bias.defined() ? shape_str(bias.sizes()) : "");
  if (input.dim() != 2) {
    Shape out_sizes = input.sizes();
    out_sizes.back() = 1;
    const int64_t rows = shape_numel(out_sizes);  // the product of the leading dims
    out_sizes.back() = weight.size(0);
    return reshape(linear(reshape(input, {rows, weight.size(1)}), weight, bias), out_sizes);
  }
  if (!bias.defined()) return matmul(input, t(weight));
  return addmm(bias, input, t(weight));
}

}  // namespace distgrad::nn
