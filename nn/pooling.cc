#include "nn/pooling.h"

#include "absl/strings/str_cat.h"
#include "autograd/ops.h"

namespace distgrad::nn {

MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding)
    : kernel_size_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding) {
  DISTGRAD_CHECK(
      kernel_size.values[0] > 0 && kernel_size.values[1] > 0 && stride_.values[0] > 0 && stride_.values[1] > 0,
      "MaxPool2d: expected positive kernel_size and stride, found kernel_size=", kernel_size.str(),
      ", stride=", stride_.str());
}

std::string MaxPool2d::name() const {
  return absl::StrCat("MaxPool2d(kernel_size=", kernel_size_.str(), ", stride=", stride_.str(),
                      ", padding=", padding_.str(), ")");
}

Tensor MaxPool2d::forward(const Tensor& input) {
  input.check_defined("MaxPool2d");
  DISTGRAD_CHECK(input.dim() == 3 || input.dim() == 4, name(),
                 ": expected input of shape [N, C, H, W] or [C, H, W], found ", shape_str(input.sizes()));
  return distgrad::max_pool2d(
             input, {.kernel_size = kernel_size_.values, .stride = stride_.values, .padding = padding_.values})
      .values;
}

}  // namespace distgrad::nn
