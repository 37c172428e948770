// Forward kernels of the convolution and pooling layers, over NCHW (or unbatched CHW) input,
// and the sliding-window rearrangements they are built from: im2col and its adjoint col2im.
//
//   Tensor y = untracked::conv2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}});
//   auto [pooled, indices] = untracked::max_pool2d(y, {.kernel_size = {2, 2}});
//   Tensor columns = untracked::im2col(x, {.kernel_size = {3, 3}, .padding = {1, 1}});
//   Tensor summed = untracked::col2im(columns, {x.size(2), x.size(3)}, {.kernel_size = {3, 3}, .padding = {1, 1}});
#pragma once

#include <array>

#include "core/reduction.h"
#include "core/tensor.h"

namespace distgrad {

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  // Input and output channels split into this many groups, each convolved with its own filters
  // (weight [O, C / groups, kh, kw]); groups = C is a depthwise convolution. The kernels here
  // take groups = 1; distgrad::conv2d composes the others.
  int64_t groups = 1;
};
// Which of conv2d's gradients conv2d_backward computes.
struct Conv2dGradsNeeded {
  bool input = true, weight = true, bias = true;
};
struct Conv2dGrads {
  Tensor input, weight, bias;  // undefined where not needed
};
struct Im2colOptions {
  std::array<int64_t, 2> kernel_size{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
};
struct Pool2dOptions {
  std::array<int64_t, 2> kernel_size{1, 1};
  std::array<int64_t, 2> stride{0, 0};  // 0 means kernel_size, as in PyTorch
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};  // max_pool2d only
  bool count_include_pad = true;          // avg_pool2d only
  // max_pool2d only: the output size rounded up, so that a last partial window counts (one that
  // would start in the right padding does not), as PyTorch's ceil_mode.
  bool ceil_mode = false;
};

namespace untracked {

// input [N, C, H, W], weight [O, C, kh, kw], bias [O] or undefined -> [N, O, oh, ow] (groups = 1).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv2dOptions& options = {});

// conv2d's gradients for its output's gradient `grad_output` ([N, O, oh, ow] or [O, oh, ow]):
// w.r.t. the input, of `input_sizes` (col2im of weight^T x grad_output, a transposed
// convolution), and w.r.t. the weight, of `weight_sizes` [O, C, kh, kw] (grad_output x
// im2col(input)^T summed over the images). The bias's is sum(grad_output, {0, 2, 3}).
Tensor conv2d_input_grad(const Tensor& grad_output, const Tensor& weight, const Shape& input_sizes,
                         const Conv2dOptions& options = {});
Tensor conv2d_weight_grad(const Tensor& grad_output, const Tensor& input, const Shape& weight_sizes,
                          const Conv2dOptions& options = {});

// conv2d's gradients w.r.t. input, weight and bias, those `needed`, at once: the work they share
// is done once (the output gradient's Winograd tiles, or its pass with the weight gradient's
// columns, which also sum it for the bias). The same values as conv2d_input_grad,
// conv2d_weight_grad and sum(grad_output, {0, 2, 3}), up to rounding (autograd's
// distgrad::conv2d_backward is its differentiable form, conv2d's backward).
Conv2dGrads conv2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                            const Conv2dGradsNeeded& needed, const Conv2dOptions& options = {});

// Every sliding window of `input` [N, C, H, W] (or unbatched [C, H, W]) as a column:
// [N, C*kh*kw, L] (or [C*kh*kw, L]), L = out_h * out_w (torch.nn.functional.unfold). Row
// (c, i, j) holds input channel c at kernel position (i, j) of each window, 0 where it is padding.
Tensor im2col(const Tensor& input, const Im2colOptions& options);

// The adjoint of im2col: sums columns [N, C*kh*kw, L] (or [C*kh*kw, L]) back into an image of
// spatial size `output_size` {H, W} (torch.nn.functional.fold). Each pixel gets the sum of the
// entries that im2col would have read from it; entries that fall on padding are dropped, so
// col2im(im2col(ones)) counts the windows covering each pixel.
Tensor col2im(const Tensor& columns, std::array<int64_t, 2> output_size, const Im2colOptions& options);

// Max over each window; indices are flat positions in each input H*W plane (PyTorch's convention).
ValuesIndices max_pool2d(const Tensor& input, const Pool2dOptions& options);
// max_pool2d's adjoint: the gradient for input of `input_sizes` ([N, C, H, W] or [C, H, W]) of
// the outputs' gradient `grad_output` ([N, C, oh, ow] or [C, oh, ow]), whose maxima came from the
// flat plane positions `indices` (int64, grad_output's shape): each input element gets the sum of
// the gradients of the outputs that took it, 0 where none did.
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices, const Shape& input_sizes,
                           const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);

}  // namespace untracked
}  // namespace distgrad
