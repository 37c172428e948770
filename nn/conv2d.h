// Conv2d: the 2-D convolution layer over NCHW images (torch.nn.Conv2d).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"
#include "nn/size2.h"

namespace distgrad::nn {

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;  // zeros on each side
  Size2 dilation = 1;
  // in_channels and out_channels in this many groups, each with its own filters over its own
  // input channels; groups = in_channels is a depthwise convolution.
  int64_t groups = 1;
};

// Cross-correlation of [N, in_channels, H, W] (or unbatched [in_channels, H, W]) input with
// out_channels filters, plus a bias per output channel.
//
// The weight is [out_channels, in_channels / groups, kh, kw] and the bias [out_channels]; both
// start as U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in_channels / groups * kh * kw, as in
// PyTorch.
// Forward is distgrad::conv2d, differentiable to any order. `tensor_options` gives the
// parameters' dtype and device.
//
//   dg::nn::Conv2d conv(1, 64, 3, {.padding = 1});
//   dg::Tensor y = conv.forward(dg::randn({8, 1, 28, 28}));   // [8, 64, 28, 28]
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {},
         bool with_bias = true, TensorOptions tensor_options = {});

  Tensor forward(const Tensor& input) override;
  std::string name() const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  const Size2& kernel_size() const { return kernel_size_; }
  const Conv2dOptions& options() const { return options_; }

  Tensor weight;  // [out_channels, in_channels / groups, kh, kw]
  Tensor bias;    // [out_channels], undefined without bias

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  Size2 kernel_size_;
  Conv2dOptions options_;
};

}  // namespace distgrad::nn
