#include "nn/normalization.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/ops.h"

namespace distgrad::nn {
namespace {

// (x - mean) * rsqrt(var + eps) over the trailing `count` dims of x, with their biased variance.
Tensor normalized_over_last_dims(const Tensor& x, int64_t count, double eps) {
  Shape dims;
  for (int64_t d = x.dim() - count; d < x.dim(); ++d) dims.push_back(d);
  const Tensor centered = x - mean(x, dims, /*keepdim=*/true);
  return centered * rsqrt(mean(centered * centered, dims, /*keepdim=*/true) + eps);
}

void check_eps(const char* op, double eps) {
  DISTGRAD_CHECK(eps >= 0, op, ": expected a non-negative eps, found ", eps);
}

void check_affine(const char* op, const char* name, const Tensor& t, const Shape& expected, const Tensor& input) {
  if (!t.defined()) return;
  DISTGRAD_CHECK(t.sizes() == expected, op, ": expected a ", name, " of shape ", shape_str(expected), ", found ",
                 shape_str(t.sizes()));
  DISTGRAD_CHECK(t.dtype() == input.dtype() && t.device() == input.device(), op, ": expected a ", name,
                 " with the input's dtype and device (", dtype_name(input.dtype()), " on ", input.device().str(),
                 "), found a ", t.describe());
}

// `t` in float32 (undefined stays undefined): how a half input is normalised, so that its
// statistics are not rounded and only the result is (Note [Half precision compute]).
Tensor in_float32(const Tensor& t) { return t.defined() ? to(t, kFloat32) : t; }

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (autograd::casts_to_float32({&input, &weight, &bias})) {
    return layer_norm(autograd::autocast_to_float32(input), normalized_shape, autograd::autocast_to_float32(weight),
                      autograd::autocast_to_float32(bias), eps);
  }
  input.check_defined("layer_norm");
  DISTGRAD_CHECK(is_floating(input.dtype()), "layer_norm: expected a floating input, found a ", input.describe());
  const int64_t count = static_cast<int64_t>(normalized_shape.size());
  const bool trailing_match =
      count >= 1 && input.dim() >= count && Shape(input.sizes().end() - count, input.sizes().end()) == normalized_shape;
  DISTGRAD_CHECK(trailing_match, "layer_norm: expected input of shape [*, ", absl::StrJoin(normalized_shape, ", "),
                 "] (normalized_shape ", shape_str(normalized_shape), "), found ", shape_str(input.sizes()));
  check_eps("layer_norm", eps);
  check_affine("layer_norm", "weight", weight, normalized_shape, input);
  check_affine("layer_norm", "bias", bias, normalized_shape, input);
  if (is_half(input.dtype())) {
    return to(layer_norm(in_float32(input), normalized_shape, in_float32(weight), in_float32(bias), eps),
              input.dtype());
  }
  Tensor out = normalized_over_last_dims(input, count, eps);
  if (weight.defined()) out = out * weight;
  if (bias.defined()) out = out + bias;
  return out;
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  if (autograd::casts_to_float32({&input, &weight, &bias})) {
    return group_norm(autograd::autocast_to_float32(input), num_groups, autograd::autocast_to_float32(weight),
                      autograd::autocast_to_float32(bias), eps);
  }
  input.check_defined("group_norm");
  DISTGRAD_CHECK(is_floating(input.dtype()) && input.dim() >= 2,
                 "group_norm: expected a floating input of shape [N, C, *], found a ", input.describe());
  const int64_t channels = input.size(1);
  DISTGRAD_CHECK(num_groups > 0 && channels % num_groups == 0, "group_norm: expected num_groups to divide the ",
                 channels, " channels of input ", shape_str(input.sizes()), ", found num_groups=", num_groups);
  check_eps("group_norm", eps);
  check_affine("group_norm", "weight", weight, {channels}, input);
  check_affine("group_norm", "bias", bias, {channels}, input);
  if (is_half(input.dtype())) {
    return to(group_norm(in_float32(input), num_groups, in_float32(weight), in_float32(bias), eps), input.dtype());
  }
  Tensor out =
      reshape(normalized_over_last_dims(reshape(input, {input.size(0), num_groups, -1}), 1, eps), input.sizes());
  Shape channel_shape(input.dim(), 1);
  channel_shape[1] = channels;
  if (weight.defined()) out = out * reshape(weight, channel_shape);
  if (bias.defined()) out = out + reshape(bias, channel_shape);
  return out;
}

LayerNorm::LayerNorm(Shape normalized_shape, LayerNormOptions options, TensorOptions tensor_options)
    : normalized_shape_(std::move(normalized_shape)), options_(options) {
  DISTGRAD_CHECK(!normalized_shape_.empty(), "LayerNorm: expected a non-empty normalized_shape");
  DISTGRAD_CHECK(is_floating(tensor_options.dtype), "LayerNorm: expected a floating dtype, found ",
                 dtype_name(tensor_options.dtype));
  check_eps("LayerNorm", options.eps);
  const TensorOptions plain{.dtype = tensor_options.dtype, .device = tensor_options.device};
  if (options.elementwise_affine) {
    weight = ones(normalized_shape_, plain);
    register_parameter("weight", weight);
    if (options.bias) {
      bias = zeros(normalized_shape_, plain);
      register_parameter("bias", bias);
    }
  }
}

std::string LayerNorm::name() const {
  return absl::StrCat("LayerNorm(", shape_str(normalized_shape_), ", eps=", options_.eps,
                      ", elementwise_affine=", options_.elementwise_affine ? "true" : "false", ")");
}

Tensor LayerNorm::forward(const Tensor& input) {
  return layer_norm(input, normalized_shape_, weight, bias, options_.eps);
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options, TensorOptions tensor_options)
    : num_groups_(num_groups), num_channels_(num_channels), options_(options) {
  DISTGRAD_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0,
                 "GroupNorm: expected num_groups to divide num_channels, found num_groups=", num_groups,
                 ", num_channels=", num_channels);
  DISTGRAD_CHECK(is_floating(tensor_options.dtype), "GroupNorm: expected a floating dtype, found ",
                 dtype_name(tensor_options.dtype));
  check_eps("GroupNorm", options.eps);
  const TensorOptions plain{.dtype = tensor_options.dtype, .device = tensor_options.device};
  if (options.affine) {
    weight = ones({num_channels}, plain);
    bias = zeros({num_channels}, plain);
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}

std::string GroupNorm::name() const {
  return absl::StrCat("GroupNorm(", num_groups_, ", ", num_channels_, ", eps=", options_.eps,
                      ", affine=", options_.affine ? "true" : "false", ")");
}

Tensor GroupNorm::forward(const Tensor& input) {
  input.check_defined("GroupNorm");
  DISTGRAD_CHECK(input.dim() >= 2 && input.size(1) == num_channels_, name(), ": expected input of shape [N, ",
                 num_channels_, ", *], found ", shape_str(input.sizes()));
  return group_norm(input, num_groups_, weight, bias, options_.eps);
}

}  // namespace distgrad::nn
