// Pooling over NCHW images: MaxPool2d (torch.nn.MaxPool2d) and adaptive average pooling
// (torch.nn.functional.adaptive_avg_pool2d, torch.nn.AdaptiveAvgPool2d).
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
// With ceil_mode the output size is rounded up: a last partial window counts (PyTorch's rule).
//
//   dg::nn::MaxPool2d pool(2);
//   dg::Tensor y = pool.forward(dg::randn({8, 64, 28, 28}));   // [8, 64, 14, 14]
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                     bool ceil_mode = false);

  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  Size2 kernel_size_;
  Size2 stride_;
  Size2 padding_;
  bool ceil_mode_;
};

// The mean of each of output_size {oh, ow} bins of [N, C, H, W] (or [C, H, W]) input: bin (i, j)
// covers rows floor(i H / oh) to ceil((i + 1) H / oh) - 1 and the columns alike, so bins
// overlap when the sizes do not divide. Differentiable to any order.
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);

  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  Size2 output_size_;
};

}  // namespace distgrad::nn
