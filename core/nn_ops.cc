#include "core/nn_ops.h"

#include "core/copy.h"
#include "core/creation.h"
#include "core/elementwise.h"
#include "core/kernels.h"
#include "core/op_checks.h"
#include "core/views.h"

namespace distgrad::ops {
namespace {

// Output length of a sliding window, or 0 when the window does not fit.
int64_t window_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t span = input + 2 * padding - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

// An NCHW view of `input` (CHW input gets a batch of 1); `unbatched` says which it was.
Tensor as_batched(const char* op, const Tensor& input, bool& unbatched) {
  detail::check_floating(op, input);
  DISTGRAD_CHECK(input.dim() == 3 || input.dim() == 4, op, ": expected input of shape [N, C, H, W] or [C, H, W], ",
                 "found ", shape_str(input.sizes()));
  unbatched = input.dim() == 3;
  return unbatched ? unsqueeze(input, 0) : input;
}

kernels::Window2d make_window(const char* op, const Tensor& input, std::array<int64_t, 2> kernel,
                              std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                              std::array<int64_t, 2> dilation) {
  for (int i = 0; i < 2; ++i) {
    DISTGRAD_CHECK(kernel[i] > 0 && stride[i] > 0 && dilation[i] > 0 && padding[i] >= 0, op,
                   ": expected positive kernel size, stride and dilation and non-negative padding, found kernel [",
                   kernel[0], ", ", kernel[1], "], stride [", stride[0], ", ", stride[1], "], padding [", padding[0],
                   ", ", padding[1], "], dilation [", dilation[0], ", ", dilation[1], "]");
  }
  kernels::Window2d w{.batch = input.size(0),
                      .channels = input.size(1),
                      .height = input.size(2),
                      .width = input.size(3),
                      .kernel_h = kernel[0],
                      .kernel_w = kernel[1],
                      .stride_h = stride[0],
                      .stride_w = stride[1],
                      .pad_h = padding[0],
                      .pad_w = padding[1],
                      .dilation_h = dilation[0],
                      .dilation_w = dilation[1]};
  w.out_h = window_output_size(w.height, w.kernel_h, w.stride_h, w.pad_h, w.dilation_h);
  w.out_w = window_output_size(w.width, w.kernel_w, w.stride_w, w.pad_w, w.dilation_w);
  DISTGRAD_CHECK(w.out_h > 0 && w.out_w > 0, op, ": the window (kernel [", kernel[0], ", ", kernel[1], "], dilation [",
                 dilation[0], ", ", dilation[1], "]) does not fit the padded input of shape ",
                 shape_str(input.sizes()));
  return w;
}

kernels::Window2d pool_window(const char* op, const Tensor& input, const Pool2dOptions& options,
                              std::array<int64_t, 2> dilation) {
  std::array<int64_t, 2> stride = options.stride;
  for (int i = 0; i < 2; ++i) {
    if (stride[i] == 0) stride[i] = options.kernel_size[i];
    DISTGRAD_CHECK(options.padding[i] * 2 <= options.kernel_size[i], op, ": padding [", options.padding[0], ", ",
                   options.padding[1], "] must be at most half the kernel size [", options.kernel_size[0], ", ",
                   options.kernel_size[1], "]");
  }
  return make_window(op, input, options.kernel_size, stride, options.padding, dilation);
}

Tensor unbatch(const Tensor& t, bool unbatched) { return unbatched ? squeeze(t, 0) : t; }

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  bool unbatched = false;
  const Tensor x = contiguous(as_batched("conv2d", input, unbatched));
  detail::check_same_dtype_and_device("conv2d", input, weight);
  DISTGRAD_CHECK(weight.dim() == 4 && weight.size(1) == x.size(1), "conv2d: expected weight of shape [O, ", x.size(1),
                 ", kh, kw] for input of shape ", shape_str(input.sizes()), ", found ", shape_str(weight.sizes()));
  const int64_t out_channels = weight.size(0);
  if (bias.defined()) {
    detail::check_same_dtype_and_device("conv2d", input, bias);
    DISTGRAD_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, "conv2d: expected bias of shape [", out_channels,
                   "], found ", shape_str(bias.sizes()));
  }
  const kernels::Window2d w =
      make_window("conv2d", x, {weight.size(2), weight.size(3)}, options.stride, options.padding, options.dilation);
  const int64_t patch = w.channels * w.kernel_h * w.kernel_w;
  Tensor columns = empty({w.batch, patch, w.out_h * w.out_w}, {.dtype = x.dtype(), .device = x.device()});
  if (columns.numel() > 0) kernels::kernels_for(x.device()).im2col(columns, x, w);
  const Tensor filters = contiguous(reshape(weight, {1, out_channels, patch}));
  Tensor out = empty({w.batch, out_channels, w.out_h * w.out_w}, {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) {
    kernels::GemmArgs args;
    args.device = x.device();
    args.dtype = x.dtype();
    args.batch = w.batch;
    args.m = out_channels;
    args.n = w.out_h * w.out_w;
    args.k = patch;
    args.a = filters.data_ptr();
    args.lda = patch;
    args.stride_a = 0;  // one filter bank for every image
    args.b = columns.data_ptr();
    args.ldb = args.n;
    args.stride_b = patch * args.n;
    args.c = out.data_ptr();
    args.ldc = args.n;
    args.stride_c = out_channels * args.n;
    kernels::kernels_for(x.device()).gemm(args);
  }
  if (bias.defined()) add_(out, reshape(bias, {1, out_channels, 1}));
  return unbatch(reshape(out, {w.batch, out_channels, w.out_h, w.out_w}), unbatched);
}

ValuesIndices max_pool2d(const Tensor& input, const Pool2dOptions& options) {
  bool unbatched = false;
  const Tensor x = contiguous(as_batched("max_pool2d", input, unbatched));
  const kernels::Window2d w = pool_window("max_pool2d", x, options, options.dilation);
  const Shape sizes{w.batch, w.channels, w.out_h, w.out_w};
  ValuesIndices result{empty(sizes, {.dtype = x.dtype(), .device = x.device()}),
                       empty(sizes, {.dtype = kInt64, .device = x.device()})};
  if (result.values.numel() > 0) kernels::kernels_for(x.device()).max_pool2d(result.values, result.indices, x, w);
  return {unbatch(result.values, unbatched), unbatch(result.indices, unbatched)};
}

Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  bool unbatched = false;
  const Tensor x = contiguous(as_batched("avg_pool2d", input, unbatched));
  DISTGRAD_CHECK(options.dilation[0] == 1 && options.dilation[1] == 1, "avg_pool2d: dilation is not supported ",
                 "(as in PyTorch), found [", options.dilation[0], ", ", options.dilation[1], "]");
  const kernels::Window2d w = pool_window("avg_pool2d", x, options, {1, 1});
  Tensor out = empty({w.batch, w.channels, w.out_h, w.out_w}, {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) kernels::kernels_for(x.device()).avg_pool2d(out, x, w, options.count_include_pad);
  return unbatch(out, unbatched);
}

}  // namespace distgrad::ops
