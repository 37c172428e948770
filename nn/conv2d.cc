#include "nn/conv2d.h"

#include "absl/strings/str_cat.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "nn/init.h"

namespace distgrad::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options, bool with_bias,
               TensorOptions tensor_options)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  const auto [kh, kw] = kernel_size.values;
  DISTGRAD_CHECK(in_channels > 0 && out_channels > 0 && kh > 0 && kw > 0,
                 "Conv2d: expected positive channels and kernel size, found in_channels=", in_channels,
                 ", out_channels=", out_channels, ", kernel_size=", kernel_size.str());
  DISTGRAD_CHECK(options.groups > 0 && in_channels % options.groups == 0 && out_channels % options.groups == 0,
                 "Conv2d: expected groups to divide in_channels and out_channels, found groups=", options.groups,
                 ", in_channels=", in_channels, ", out_channels=", out_channels);
  const int64_t group_channels = in_channels / options.groups;
  const int64_t fan_in = group_channels * kh * kw;
  weight = init::fan_in_uniform({out_channels, group_channels, kh, kw}, fan_in, tensor_options);
  register_parameter("weight", weight);
  if (with_bias) {
    bias = init::fan_in_uniform({out_channels}, fan_in, tensor_options);
    register_parameter("bias", bias);
  }
}

std::string Conv2d::name() const {
  return absl::StrCat("Conv2d(", in_channels_, ", ", out_channels_, ", kernel_size=", kernel_size_.str(),
                      ", stride=", options_.stride.str(), ", padding=", options_.padding.str(),
                      ", dilation=", options_.dilation.str(),
                      options_.groups == 1 ? "" : absl::StrCat(", groups=", options_.groups),
                      ", bias=", bias.defined() ? "true" : "false", ")");
}

Tensor Conv2d::forward(const Tensor& input) {
  input.check_defined("Conv2d");
  DISTGRAD_CHECK((input.dim() == 3 || input.dim() == 4) && input.size(-3) == in_channels_, name(),
                 ": expected input of shape [N, ", in_channels_, ", H, W] or [", in_channels_, ", H, W], found ",
                 shape_str(input.sizes()));
  return distgrad::conv2d(input, weight, bias,
                          {.stride = options_.stride.values,
                           .padding = options_.padding.values,
                           .dilation = options_.dilation.values,
                           .groups = options_.groups});
}

}  // namespace distgrad::nn
