#include "nn/pooling.h"

#include <array>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/ops.h"

namespace distgrad::nn {

MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, bool ceil_mode)
    : kernel_size_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding), ceil_mode_(ceil_mode) {
  DISTGRAD_CHECK(
      kernel_size.values[0] > 0 && kernel_size.values[1] > 0 && stride_.values[0] > 0 && stride_.values[1] > 0,
      "MaxPool2d: expected positive kernel_size and stride, found kernel_size=", kernel_size.str(),
      ", stride=", stride_.str());
}

std::string MaxPool2d::name() const {
  return absl::StrCat("MaxPool2d(kernel_size=", kernel_size_.str(), ", stride=", stride_.str(),
                      ", padding=", padding_.str(), ceil_mode_ ? ", ceil_mode=true" : "", ")");
}

Tensor MaxPool2d::forward(const Tensor& input) {
  input.check_defined("MaxPool2d");
  DISTGRAD_CHECK(input.dim() == 3 || input.dim() == 4, name(),
                 ": expected input of shape [N, C, H, W] or [C, H, W], found ", shape_str(input.sizes()));
  return distgrad::max_pool2d(input, {.kernel_size = kernel_size_.values,
                                      .stride = stride_.values,
                                      .padding = padding_.values,
                                      .ceil_mode = ceil_mode_})
      .values;
}

namespace {

// The means of `x` over the adaptive bins of `dim` (of size `bins` each way): each bin a mean over
// a narrowed range, the bins joined back along dim.
Tensor adaptive_means(const Tensor& x, int64_t dim, int64_t bins) {
  const int64_t size = x.size(dim);
  if (bins == size) return x;
  std::vector<Tensor> means;
  for (int64_t i = 0; i < bins; ++i) {
    const int64_t start = i * size / bins, end = ((i + 1) * size + bins - 1) / bins;
    means.push_back(mean(narrow(x, dim, start, end - start), {dim}, /*keepdim=*/true));
  }
  return cat(means, dim);
}

}  // namespace

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size) {
  input.check_defined("adaptive_avg_pool2d");
  DISTGRAD_CHECK(is_floating(input.dtype()) && (input.dim() == 3 || input.dim() == 4),
                 "adaptive_avg_pool2d: expected a floating input of shape [N, C, H, W] or [C, H, W], found a ",
                 input.describe());
  const auto [out_h, out_w] = output_size.values;
  DISTGRAD_CHECK(out_h > 0 && out_w > 0, "adaptive_avg_pool2d: expected a positive output_size, found ",
                 output_size.str());
  const int64_t height = input.size(-2), width = input.size(-1);
  DISTGRAD_CHECK(height > 0 && width > 0, "adaptive_avg_pool2d: expected a non-empty image, found input of shape ",
                 shape_str(input.sizes()));
  if (height % out_h == 0 && width % out_w == 0) {  // equal bins side by side: one avg_pool2d
    const std::array<int64_t, 2> bin{height / out_h, width / out_w};
    return avg_pool2d(input, {.kernel_size = bin, .stride = bin});
  }
  return adaptive_means(adaptive_means(input, input.dim() - 2, out_h), input.dim() - 1, out_w);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {
  DISTGRAD_CHECK(output_size.values[0] > 0 && output_size.values[1] > 0,
                 "AdaptiveAvgPool2d: expected a positive output_size, found ", output_size.str());
}

std::string AdaptiveAvgPool2d::name() const {
  return absl::StrCat("AdaptiveAvgPool2d(output_size=", output_size_.str(), ")");
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) { return adaptive_avg_pool2d(input, output_size_); }

}  // namespace distgrad::nn
