// MaxPool2d: max pooling over NCHW images (torch.nn.MaxPool2d).
#pragma once

#include <optional>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"
#include "nn/size2.h"

namespace distgrad::nn {

// The largest value of each kernel_size window of [N, C, H, W] (or [C, H, W]) input, windows
// `stride` apart (kernel_size when not given), over the input padded with -infinity by
// `padding` on each side. Differentiable: the gradient goes to the position of each maximum.
//
//   dg::nn::MaxPool2d pool(2);
//   dg::Tensor y = pool.forward(dg::randn({8, 64, 28, 28}));   // [8, 64, 14, 14]
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0);

  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  Size2 kernel_size_;
  Size2 stride_;
  Size2 padding_;
};

}  // namespace distgrad::nn
