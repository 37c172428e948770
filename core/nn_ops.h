// Forward kernels of the convolution and pooling layers, over NCHW (or unbatched CHW) input.
//
//   Tensor y = ops::conv2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}});
//   auto [pooled, indices] = ops::max_pool2d(y, {.kernel_size = {2, 2}});
#pragma once

#include <array>

#include "core/reduction.h"
#include "core/tensor.h"

namespace distgrad::ops {

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
};

// input [N, C, H, W], weight [O, C, kh, kw], bias [O] or undefined -> [N, O, oh, ow] (groups = 1).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv2dOptions& options = {});

struct Pool2dOptions {
  std::array<int64_t, 2> kernel_size{1, 1};
  std::array<int64_t, 2> stride{0, 0};  // 0 means kernel_size, as in PyTorch
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};  // max_pool2d only
  bool count_include_pad = true;          // avg_pool2d only
};

// Max over each window; indices are flat positions in each input H*W plane (PyTorch's convention).
ValuesIndices max_pool2d(const Tensor& input, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);

}  // namespace distgrad::ops
