#include "core/nn_ops.h"

#include <algorithm>
#include <vector>

#include "core/copy.h"
#include "core/creation.h"
#include "core/elementwise.h"
#include "core/indexing.h"
#include "core/kernels.h"
#include "core/op_checks.h"
#include "core/views.h"

namespace distgrad::untracked {
namespace {

// Output length of a sliding window, or 0 when the window does not fit.
int64_t window_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t span = input + 2 * padding - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

// Output length with ceil_mode: a last, partial window is kept when it starts inside the input
// or its left padding (PyTorch's rule); the window is known to fit at least once.
int64_t ceil_mode_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t span = input + 2 * padding - dilation * (kernel - 1) - 1;
  int64_t size = (span + stride - 1) / stride + 1;
  if ((size - 1) * stride >= input + padding) --size;
  return size;
}

// An NCHW view of `input` (CHW input gets a batch of 1); `unbatched` says which it was.
Tensor as_batched(const char* op, const Tensor& input, bool& unbatched) {
  detail::check_floating(op, input);
  DISTGRAD_CHECK(input.dim() == 3 || input.dim() == 4, op, ": expected input of shape [N, C, H, W] or [C, H, W], ",
                 "found ", shape_str(input.sizes()));
  unbatched = input.dim() == 3;
  return unbatched ? unsqueeze(input, 0) : input;
}

// The NCHW sizes of input of `input_sizes` [N, C, H, W], or [C, H, W] as a batch of one
// (`unbatched` says which), for the ops that get the input's shape rather than the input.
Shape batched_sizes(const char* op, const Shape& input_sizes, bool& unbatched) {
  DISTGRAD_CHECK(input_sizes.size() == 3 || input_sizes.size() == 4, op,
                 ": expected an input shape [N, C, H, W] or [C, H, W], found ", shape_str(input_sizes));
  unbatched = input_sizes.size() == 3;
  return unbatched ? Shape{1, input_sizes[0], input_sizes[1], input_sizes[2]} : input_sizes;
}

// The sizes of a window op's output of `channels` channels: [N, channels, out_h, out_w], or
// without N for unbatched input.
Shape output_sizes(const kernels::Window2d& w, int64_t channels, bool unbatched) {
  Shape sizes{w.batch, channels, w.out_h, w.out_w};
  if (unbatched) sizes.erase(sizes.begin());
  return sizes;
}

// Positive kernel size, stride and dilation, and non-negative padding.
void check_window_options(const char* op, const Im2colOptions& options) {
  const auto& [kernel, stride, padding, dilation] = options;
  for (int i = 0; i < 2; ++i) {
    DISTGRAD_CHECK(kernel[i] > 0 && stride[i] > 0 && dilation[i] > 0 && padding[i] >= 0, op,
                   ": expected positive kernel size, stride and dilation and non-negative padding, found kernel [",
                   kernel[0], ", ", kernel[1], "], stride [", stride[0], ", ", stride[1], "], padding [", padding[0],
                   ", ", padding[1], "], dilation [", dilation[0], ", ", dilation[1], "]");
  }
}

// The window `options` sliding over an NCHW image of `sizes`, which errors call `image` (the
// op's "input", or col2im's "output").
kernels::Window2d make_window(const char* op, const char* image, const Shape& sizes, const Im2colOptions& options) {
  check_window_options(op, options);
  const auto& [kernel, stride, padding, dilation] = options;
  kernels::Window2d w{.batch = sizes[0],
                      .channels = sizes[1],
                      .height = sizes[2],
                      .width = sizes[3],
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
                 dilation[0], ", ", dilation[1], "]) does not fit the padded ", image, " of shape ", shape_str(sizes));
  return w;
}

kernels::Window2d pool_window(const char* op, const Shape& input_sizes, const Pool2dOptions& options,
                              std::array<int64_t, 2> dilation) {
  std::array<int64_t, 2> stride = options.stride;
  for (int i = 0; i < 2; ++i) {
    if (stride[i] == 0) stride[i] = options.kernel_size[i];
    DISTGRAD_CHECK(options.padding[i] * 2 <= options.kernel_size[i], op, ": padding [", options.padding[0], ", ",
                   options.padding[1], "] must be at most half the kernel size [", options.kernel_size[0], ", ",
                   options.kernel_size[1], "]");
  }
  kernels::Window2d w = make_window(
      op, "input", input_sizes,
      {.kernel_size = options.kernel_size, .stride = stride, .padding = options.padding, .dilation = dilation});
  if (options.ceil_mode) {
    w.out_h = ceil_mode_output_size(w.height, w.kernel_h, w.stride_h, w.pad_h, w.dilation_h);
    w.out_w = ceil_mode_output_size(w.width, w.kernel_w, w.stride_w, w.pad_w, w.dilation_w);
  }
  return w;
}

Tensor unbatch(const Tensor& t, bool unbatched) { return unbatched ? squeeze(t, 0) : t; }

// Note [Convolution in chunks of images]
// conv2d and its gradients rearrange the windows of the input into columns (im2col) and
// multiply them with the filters (gemm). The columns are kernel_h * kernel_w times the input:
// made for a whole batch at once (14 MB for the second conv of the Fashion-MNIST CNN at batch
// 64) they go out to memory and come back for the gemm. On the CPU they are made a chunk of
// images at a time, at most kCpuColumnsBytes, which the gemm then reads from cache; other
// devices take the whole batch as one chunk (one launch per kernel).
constexpr int64_t kCpuColumnsBytes = int64_t{512} << 10;

// The images of a chunk whose work space, `image_elements` of x's dtype an image (im2col's
// columns, or Winograd's tiles and products), fits in `cpu_bytes` on the CPU; the whole batch
// (at least 1) on other devices.
int64_t images_per_chunk(const Tensor& x, const kernels::Window2d& w, int64_t image_elements, int64_t cpu_bytes) {
  const int64_t batch = std::max<int64_t>(w.batch, 1);
  if (!x.device().is_cpu()) return batch;
  const int64_t image_bytes = image_elements * static_cast<int64_t>(x.element_size());
  return std::clamp<int64_t>(cpu_bytes / std::max<int64_t>(image_bytes, 1), 1, batch);
}

// The window of a convolution with weight of `weight_sizes` over batched NCHW input of `sizes`;
// `input_sizes` (as given, perhaps unbatched) and the weight's for errors.
kernels::Window2d conv_window(const char* op, const Shape& sizes, const Shape& input_sizes, const Shape& weight_sizes,
                              const Conv2dOptions& options) {
  DISTGRAD_CHECK(options.groups == 1, op, ": expected groups = 1 (distgrad::conv2d composes grouped convolutions), ",
                 "found groups = ", options.groups);
  DISTGRAD_CHECK(weight_sizes.size() == 4 && weight_sizes[1] == sizes[1], op, ": expected weight of shape [O, ",
                 sizes[1], ", kh, kw] for input of shape ", shape_str(input_sizes), ", found ",
                 shape_str(weight_sizes));
  return make_window(op, "input", sizes,
                     {.kernel_size = {weight_sizes[2], weight_sizes[3]},
                      .stride = options.stride,
                      .padding = options.padding,
                      .dilation = options.dilation});
}

// The contiguous [N, O, L] gradient of a convolution's output, checked against the window.
Tensor conv_output_grad(const char* op, const Tensor& grad_output, const kernels::Window2d& w, bool unbatched,
                        const Shape& input_sizes, const Shape& weight_sizes) {
  const Shape out_sizes = output_sizes(w, weight_sizes[0], unbatched);
  DISTGRAD_CHECK(grad_output.sizes() == out_sizes, op, ": expected grad_output of shape ", shape_str(out_sizes),
                 " (conv2d's output for input ", shape_str(input_sizes), " and weight ", shape_str(weight_sizes),
                 "), found ", shape_str(grad_output.sizes()));
  return contiguous(reshape(grad_output, {w.batch, weight_sizes[0], w.out_h * w.out_w}));
}

// `w` over `count` images (a chunk of its batch).
kernels::Window2d images(kernels::Window2d w, int64_t count) {
  w.batch = count;
  return w;
}

// Note [Winograd convolution]
// A stride-1 3 x 3 convolution (the kind in the Fashion-MNIST CNN and the few-shot MAML net)
// gets each 2 x 2 block of outputs from a 4 x 4 tile of the input with 16 products per
// pair of channels instead of 36: Winograd's minimal filtering F(2 x 2, 3 x 3), as cuDNN, oneDNN
// and NNPACK have it. The input tiles are transformed (B^T d B, the device's
// winograd_input_tiles), and the filters (U = G g G^T, winograd_filters below); the 16 positions
// of a tile are 16 gemms [O, C] x [C, tiles]; the products are transformed back (A^T m A,
// winograd_output_tiles, which also adds the bias). The gradients run the forward backwards,
// from the output gradient's 2 x 2 blocks as tiles (dM = A g A^T, winograd_output_grad_tiles):
// the input's is U^T dM by 16 gemms, through the adjoint of the input transform (B dV B^T summed
// where tiles overlap, winograd_input_tiles_adjoint), with no col2im; the weight's is dM times the
// transformed input tiles summed over tiles by 16 gemms (dU), brought back to 3 x 3 filters
// (G^T dU G); the bias's sums dM at one tile position. conv2d_backward makes dM once for all
// three (a training step's backward: a pass over the output gradient and its transform saved).
// Devices with the tile kernels (the CPU) use it when both channel counts are at least
// kWinogradMinChannels (with fewer, the gemms are too shallow to pay for the transforms: both
// nets' first conv has one input channel) and the output is at least kWinogradMinWidth wide (the
// transforms go four tiles of a row at a time, and small planes waste most of their tiles: the
// few-shot net's last conv, 3 x 3 outputs, would compute 16 outputs for 9). On the CPU the
// images go a chunk at a time, at most kCpuTilesBytes of tiles and products, which the gemms then
// read from cache (a chunk of the whole batch, 19 MB for the CNN's weight gradient, was slower).
// Results differ from im2col's by rounding: the transforms add and subtract a tile's values.
constexpr int64_t kWinogradMinChannels = 8;
constexpr int64_t kWinogradMinWidth = 7;  // four tiles
constexpr int64_t kCpuTilesBytes = int64_t{1} << 20;

// Whether the convolution with window `w` (over w.channels, into out_channels) goes through
// Winograd's tiles.
bool winograd_applies(const kernels::Window2d& w, int64_t out_channels, Device device) {
  return kernels::kernels_for(device).winograd_input_tiles != nullptr && w.kernel_h == 3 && w.kernel_w == 3 &&
         w.stride_h == 1 && w.stride_w == 1 && w.dilation_h == 1 && w.dilation_w == 1 &&
         w.channels >= kWinogradMinChannels && out_channels >= kWinogradMinChannels && w.out_h >= 1 &&
         w.out_w >= kWinogradMinWidth;
}

// The transforms G g G^T of 3 x 3 filters [O, C, 3, 3] as [16, O, C].
Tensor winograd_filters(const Tensor& weight) {
  const Tensor filters =
      empty({16, weight.size(0), weight.size(1)}, {.dtype = weight.dtype(), .device = weight.device()});
  kernels::kernels_for(weight.device()).winograd_filters(filters, contiguous(weight));
  return filters;
}

// The adjoint of winograd_filters: the gradient of the filters [O, C, 3, 3] from
// that of their transforms [16, O, C], G^T dU G.
Tensor winograd_filters_grad(const Tensor& transformed_grad, const Shape& weight_sizes) {
  const Tensor grad = empty(weight_sizes, {.dtype = transformed_grad.dtype(), .device = transformed_grad.device()});
  kernels::kernels_for(transformed_grad.device()).winograd_filters_adjoint(grad, contiguous(transformed_grad));
  return grad;
}

// Tiles of 2 x 2 outputs per image.
int64_t winograd_tiles(const kernels::Window2d& w) { return (w.out_h + 1) / 2 * ((w.out_w + 1) / 2); }

// out (contiguous, [batch, O, out_h * out_w]) = the stride-1 3 x 3 convolution of contiguous
// NCHW x (window w) whose filters have the transforms `filters` [16, O, C], plus the bias
// (contiguous, when defined).
void winograd_conv3x3(const Tensor& out, const Tensor& x, const Tensor& filters, const Tensor& bias,
                      const kernels::Window2d& w) {
  const kernels::DeviceKernels& device = kernels::kernels_for(x.device());
  const int64_t out_channels = filters.size(1), per_image = winograd_tiles(w);
  const int64_t chunk = images_per_chunk(x, w, 16 * (w.channels + out_channels) * per_image, kCpuTilesBytes);
  const TensorOptions like_x{.dtype = x.dtype(), .device = x.device()};
  const Tensor tiles = empty({16, w.channels, chunk * per_image}, like_x);
  const Tensor products = empty({16, out_channels, chunk * per_image}, like_x);
  for (int64_t first = 0; first < w.batch; first += chunk) {
    const int64_t count = std::min(chunk, w.batch - first);
    device.winograd_input_tiles(narrow(tiles, 2, 0, count * per_image), narrow(x, 0, first, count), images(w, count));
    device.gemm({.device = x.device(),
                 .dtype = x.dtype(),
                 .batch = 16,
                 .m = out_channels,
                 .n = count * per_image,
                 .k = w.channels,
                 .a = filters.data_ptr(),
                 .lda = w.channels,
                 .stride_a = out_channels * w.channels,
                 .b = tiles.data_ptr(),
                 .ldb = chunk * per_image,
                 .stride_b = w.channels * chunk * per_image,
                 .c = products.data_ptr(),
                 .ldc = chunk * per_image,
                 .stride_c = out_channels * chunk * per_image});
    device.winograd_output_tiles(narrow(out, 0, first, count), narrow(products, 2, 0, count * per_image), bias,
                                 images(w, count));
  }
}

// The gradients `needed` of the stride-1 3 x 3 convolution with window w from g, its output's
// (contiguous, [batch, O, out_h * out_w]), a chunk of images at a time: the output gradient's
// tiles dM = A g A^T serve all three. The bias's is the sum of dM at tile position 5 ((1, 1): a
// tile's four output gradients added up). The filters' is dM times the transformed tiles V of x
// (contiguous NCHW, read only for it) summed over tiles by 16 gemms (dU), brought back to 3 x 3 by
// G^T dU G. The input's is U^T dM, U the transforms of `weight` (read only for it), through the
// adjoint of the input transform (B dV B^T, summed where tiles overlap).
Conv2dGrads winograd_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Shape& weight_sizes,
                              const kernels::Window2d& w, const Conv2dGradsNeeded& needed) {
  const kernels::DeviceKernels& device = kernels::kernels_for(g.device());
  const int64_t out_channels = weight_sizes[0], per_image = winograd_tiles(w);
  const int64_t chunk = images_per_chunk(g, w, 16 * (w.channels + out_channels) * per_image, kCpuTilesBytes);
  const int64_t chunk_tiles = chunk * per_image;
  const TensorOptions like_g{.dtype = g.dtype(), .device = g.device()};
  const Tensor grad_tiles = empty({16, out_channels, chunk_tiles}, like_g);
  const Tensor tiles = empty({16, w.channels, chunk_tiles}, like_g);  // V, then dV
  const Tensor filters = needed.input ? winograd_filters(weight) : Tensor();
  const Tensor transformed_grad = needed.weight ? zeros({16, out_channels, w.channels}, like_g) : Tensor();
  Conv2dGrads grads;
  if (needed.input) grads.input = empty({w.batch, w.channels, w.height, w.width}, like_g);
  if (needed.bias) grads.bias = zeros({out_channels}, like_g);
  for (int64_t first = 0; first < w.batch; first += chunk) {
    const int64_t count = std::min(chunk, w.batch - first);
    const Tensor chunk_grad_tiles = narrow(grad_tiles, 2, 0, count * per_image);
    device.winograd_output_grad_tiles(chunk_grad_tiles, narrow(g, 0, first, count), images(w, count));
    if (needed.bias) add_(grads.bias, sum(select(chunk_grad_tiles, 0, 5), {1}));
    if (needed.weight) {
      device.winograd_input_tiles(narrow(tiles, 2, 0, count * per_image), narrow(x, 0, first, count), images(w, count));
      device.gemm({.device = g.device(),
                   .dtype = g.dtype(),
                   .batch = 16,
                   .m = out_channels,
                   .n = w.channels,
                   .k = count * per_image,
                   .transpose_b = true,
                   .beta = 1,
                   .a = grad_tiles.data_ptr(),
                   .lda = chunk_tiles,
                   .stride_a = out_channels * chunk_tiles,
                   .b = tiles.data_ptr(),
                   .ldb = chunk_tiles,
                   .stride_b = w.channels * chunk_tiles,
                   .c = transformed_grad.data_ptr(),
                   .ldc = w.channels,
                   .stride_c = out_channels * w.channels});
    }
    if (needed.input) {
      device.gemm({.device = g.device(),
                   .dtype = g.dtype(),
                   .batch = 16,
                   .m = w.channels,
                   .n = count * per_image,
                   .k = out_channels,
                   .transpose_a = true,
                   .a = filters.data_ptr(),
                   .lda = w.channels,
                   .stride_a = out_channels * w.channels,
                   .b = grad_tiles.data_ptr(),
                   .ldb = chunk_tiles,
                   .stride_b = out_channels * chunk_tiles,
                   .c = tiles.data_ptr(),
                   .ldc = chunk_tiles,
                   .stride_c = w.channels * chunk_tiles});
      device.winograd_input_tiles_adjoint(narrow(grads.input, 0, first, count), narrow(tiles, 2, 0, count * per_image),
                                          images(w, count));
    }
  }
  if (needed.weight) grads.weight = winograd_filters_grad(transformed_grad, weight_sizes);
  return grads;
}

// im2col's columns [batch, channels * kernel_h * kernel_w, out_h * out_w] of contiguous NCHW `x`.
Tensor window_columns(const Tensor& x, const kernels::Window2d& w) {
  Tensor columns = empty({w.batch, w.channels * w.kernel_h * w.kernel_w, w.out_h * w.out_w},
                         {.dtype = x.dtype(), .device = x.device()});
  if (columns.numel() > 0) kernels::kernels_for(x.device()).im2col(columns, x, w);
  return columns;
}

// The weight gradient [O, patch] of the convolution with window w (patch = channels * kernel_h *
// kernel_w) from g, its output's (contiguous, [batch, O, out_h * out_w]), and contiguous NCHW x:
// g times im2col's columns of x, summed over the images. With `with_bias`, the columns get a row
// of ones and the result a last column [O, patch + 1]: the bias's gradient, g summed, in the same
// pass over g.
Tensor columns_weight_grad(const Tensor& g, const Tensor& x, const kernels::Window2d& w, int64_t out_channels,
                           bool with_bias) {
  const int64_t patch = w.channels * w.kernel_h * w.kernel_w, depth = with_bias ? patch + 1 : patch;
  const int64_t windows = w.out_h * w.out_w;
  const TensorOptions like_x{.dtype = x.dtype(), .device = x.device()};
  Tensor grad_weight = zeros({out_channels, depth}, like_x);
  if (grad_weight.numel() == 0 || w.batch == 0) return grad_weight;
  const kernels::DeviceKernels& device = kernels::kernels_for(x.device());
  const kernels::GemmArgs product{.device = x.device(),
                                  .dtype = x.dtype(),
                                  .m = out_channels,
                                  .n = depth,
                                  .transpose_b = true,
                                  .beta = 1,
                                  .c = grad_weight.data_ptr(),
                                  .ldc = depth};
  if (x.device().is_cpu()) {
    // One gemm per image adds g[image] ([O, window]) times its columns to grad_weight: the
    // chunk's columns are read from cache, and g is read where it lies.
    const int64_t chunk = images_per_chunk(x, w, patch * windows, kCpuColumnsBytes);
    const Tensor columns = empty({chunk, depth, windows}, like_x);  // [image, patch (+ ones), window]
    if (with_bias) fill_(narrow(columns, 1, patch, 1), 1);
    for (int64_t first = 0; first < w.batch; first += chunk) {
      const int64_t count = std::min(chunk, w.batch - first);
      const Tensor windows_of_part = narrow(narrow(columns, 0, 0, count), 1, 0, patch);
      if (patch > 0) device.im2col(windows_of_part, narrow(x, 0, first, count), images(w, count));
      for (int64_t image = 0; image < count; ++image) {
        kernels::GemmArgs args = product;
        args.k = windows;
        args.a = select(g, 0, first + image).data_ptr();
        args.lda = windows;
        args.b = select(columns, 0, image).data_ptr();
        args.ldb = windows;
        device.gemm(args);
      }
    }
    return grad_weight;
  }
  // Other devices take the batch as one chunk ([patch (+ ones), image, window]) and g reordered to
  // [O, image, window]: one gemm over (image, window) sums every image into grad_weight.
  const Tensor columns = empty({depth, w.batch, windows}, like_x);
  if (with_bias) fill_(narrow(columns, 0, patch, 1), 1);
  if (patch > 0) device.im2col(permute(narrow(columns, 0, 0, patch), {1, 0, 2}), x, w);
  const Tensor g_by_channel = contiguous(permute(g, {1, 0, 2}));
  kernels::GemmArgs args = product;
  args.k = w.batch * windows;
  args.a = g_by_channel.data_ptr();
  args.lda = w.batch * windows;
  args.b = columns.data_ptr();
  args.ldb = w.batch * windows;
  device.gemm(args);
  return grad_weight;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  bool unbatched = false;
  const Tensor x = contiguous(as_batched("conv2d", input, unbatched));
  detail::check_same_dtype_and_device("conv2d", input, weight);
  const kernels::Window2d w = conv_window("conv2d", x.sizes(), input.sizes(), weight.sizes(), options);
  const int64_t out_channels = weight.size(0);
  if (bias.defined()) {
    detail::check_same_dtype_and_device("conv2d", input, bias);
    DISTGRAD_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, "conv2d: expected bias of shape [", out_channels,
                   "], found ", shape_str(bias.sizes()));
  }
  if (is_half(input.dtype())) {
    return to(conv2d(detail::widened(input), detail::widened(weight), detail::widened(bias), options), input.dtype());
  }
  const int64_t patch = w.channels * w.kernel_h * w.kernel_w, windows = w.out_h * w.out_w;
  if (winograd_applies(w, out_channels, x.device())) {
    Tensor out = empty({w.batch, out_channels, windows}, {.dtype = x.dtype(), .device = x.device()});
    if (out.numel() > 0) {
      winograd_conv3x3(out, x, winograd_filters(weight), bias.defined() ? contiguous(bias) : bias, w);
    }
    return unbatch(reshape(out, {w.batch, out_channels, w.out_h, w.out_w}), unbatched);
  }
  // With a bias, the filters get a last column holding it and the columns a last row of ones:
  // the product adds the bias as it writes out, with no pass over out of its own.
  const int64_t depth = bias.defined() ? patch + 1 : patch;
  const Tensor filters = bias.defined()
                             ? cat({reshape(weight, {out_channels, patch}), reshape(bias, {out_channels, 1})}, 1)
                             : contiguous(reshape(weight, {out_channels, patch}));
  Tensor out = empty({w.batch, out_channels, windows}, {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) {
    const kernels::DeviceKernels& device = kernels::kernels_for(x.device());
    const int64_t chunk = images_per_chunk(x, w, patch * windows, kCpuColumnsBytes);
    const Tensor columns = empty({chunk, depth, windows}, {.dtype = x.dtype(), .device = x.device()});
    if (bias.defined()) fill_(narrow(columns, 1, patch, 1), 1);
    for (int64_t first = 0; first < w.batch; first += chunk) {
      const int64_t count = std::min(chunk, w.batch - first);
      const Tensor part = narrow(columns, 0, 0, count);
      const Tensor windows_of_part = narrow(part, 1, 0, patch);
      if (windows_of_part.numel() > 0) device.im2col(windows_of_part, narrow(x, 0, first, count), images(w, count));
      device.gemm({.device = x.device(),
                   .dtype = x.dtype(),
                   .batch = count,
                   .m = out_channels,
                   .n = windows,
                   .k = depth,
                   .a = filters.data_ptr(),
                   .lda = depth,
                   .stride_a = 0,  // one filter bank for every image
                   .b = part.data_ptr(),
                   .ldb = windows,
                   .stride_b = depth * windows,
                   .c = narrow(out, 0, first, count).data_ptr(),
                   .ldc = windows,
                   .stride_c = out_channels * windows});
    }
  }
  return unbatch(reshape(out, {w.batch, out_channels, w.out_h, w.out_w}), unbatched);
}

Tensor conv2d_input_grad(const Tensor& grad_output, const Tensor& weight, const Shape& input_sizes,
                         const Conv2dOptions& options) {
  detail::check_floating("conv2d_input_grad", grad_output);
  detail::check_same_dtype_and_device("conv2d_input_grad", grad_output, weight);
  if (is_half(weight.dtype())) {
    return to(conv2d_input_grad(detail::widened(grad_output), detail::widened(weight), input_sizes, options),
              weight.dtype());
  }
  bool unbatched = false;
  const Shape sizes = batched_sizes("conv2d_input_grad", input_sizes, unbatched);
  const kernels::Window2d w = conv_window("conv2d_input_grad", sizes, input_sizes, weight.sizes(), options);
  const Tensor g = conv_output_grad("conv2d_input_grad", grad_output, w, unbatched, input_sizes, weight.sizes());
  const int64_t out_channels = weight.size(0), patch = w.channels * w.kernel_h * w.kernel_w;
  const int64_t windows = w.out_h * w.out_w;
  const TensorOptions like_g{.dtype = g.dtype(), .device = g.device()};
  if (shape_numel(sizes) == 0) return empty(input_sizes, like_g);
  if (out_channels == 0) return zeros(input_sizes, like_g);
  if (winograd_applies(w, out_channels, g.device())) {
    const Conv2dGrads grads =
        winograd_backward(g, Tensor(), weight, weight.sizes(), w, {.input = true, .weight = false, .bias = false});
    return unbatch(grads.input, unbatched);
  }
  Tensor grad_input = empty(sizes, like_g);
  const Tensor filters = contiguous(reshape(weight, {out_channels, patch}));
  const kernels::DeviceKernels& device = kernels::kernels_for(g.device());
  const int64_t chunk = images_per_chunk(g, w, patch * windows, kCpuColumnsBytes);
  const Tensor columns = empty({chunk, patch, windows}, like_g);  // [image, patch, window]
  for (int64_t first = 0; first < w.batch; first += chunk) {
    const int64_t count = std::min(chunk, w.batch - first);
    const Tensor part = narrow(columns, 0, 0, count);
    device.gemm({.device = g.device(),
                 .dtype = g.dtype(),
                 .batch = count,
                 .m = patch,
                 .n = windows,
                 .k = out_channels,
                 .transpose_a = true,
                 .a = filters.data_ptr(),
                 .lda = patch,
                 .stride_a = 0,
                 .b = narrow(g, 0, first, count).data_ptr(),
                 .ldb = windows,
                 .stride_b = out_channels * windows,
                 .c = part.data_ptr(),
                 .ldc = windows,
                 .stride_c = patch * windows});
    device.col2im(narrow(grad_input, 0, first, count), part, images(w, count));
  }
  return unbatch(grad_input, unbatched);
}

Tensor conv2d_weight_grad(const Tensor& grad_output, const Tensor& input, const Shape& weight_sizes,
                          const Conv2dOptions& options) {
  bool unbatched = false;
  const Tensor x = contiguous(as_batched("conv2d_weight_grad", input, unbatched));
  detail::check_same_dtype_and_device("conv2d_weight_grad", input, grad_output);
  if (is_half(input.dtype())) {
    return to(conv2d_weight_grad(detail::widened(grad_output), detail::widened(input), weight_sizes, options),
              input.dtype());
  }
  const kernels::Window2d w = conv_window("conv2d_weight_grad", x.sizes(), input.sizes(), weight_sizes, options);
  const Tensor g = conv_output_grad("conv2d_weight_grad", grad_output, w, unbatched, input.sizes(), weight_sizes);
  const int64_t out_channels = weight_sizes[0];
  if (w.batch > 0 && winograd_applies(w, out_channels, x.device())) {
    return winograd_backward(g, x, Tensor(), weight_sizes, w, {.input = false, .weight = true, .bias = false}).weight;
  }
  return reshape(columns_weight_grad(g, x, w, out_channels, /*with_bias=*/false), weight_sizes);
}

Conv2dGrads conv2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                            const Conv2dGradsNeeded& needed, const Conv2dOptions& options) {
  detail::check_floating("conv2d_backward", grad_output);
  detail::check_same_dtype_and_device("conv2d_backward", grad_output, input);
  detail::check_same_dtype_and_device("conv2d_backward", grad_output, weight);
  if (is_half(weight.dtype())) {
    Conv2dGrads grads =
        conv2d_backward(detail::widened(grad_output), detail::widened(input), detail::widened(weight), needed, options);
    detail::round_back(weight.dtype(), {&grads.input, &grads.weight, &grads.bias});
    return grads;
  }
  bool unbatched = false;
  const Tensor x = contiguous(as_batched("conv2d_backward", input, unbatched));
  const kernels::Window2d w = conv_window("conv2d_backward", x.sizes(), input.sizes(), weight.sizes(), options);
  const Tensor g = conv_output_grad("conv2d_backward", grad_output, w, unbatched, input.sizes(), weight.sizes());
  const int64_t out_channels = weight.size(0);
  if (w.batch > 0 && (needed.input || needed.weight) && winograd_applies(w, out_channels, x.device())) {
    Conv2dGrads grads = winograd_backward(g, x, weight, weight.sizes(), w, needed);
    if (grads.input.defined()) grads.input = unbatch(grads.input, unbatched);
    return grads;
  }
  Conv2dGrads grads;
  if (needed.input) grads.input = conv2d_input_grad(grad_output, weight, input.sizes(), options);
  if (needed.weight) {
    const Tensor both = columns_weight_grad(g, x, w, out_channels, needed.bias);
    const int64_t patch = w.channels * w.kernel_h * w.kernel_w;
    grads.weight = reshape(contiguous(narrow(both, 1, 0, patch)), weight.sizes());
    if (needed.bias) grads.bias = contiguous(select(both, 1, patch));
  } else if (needed.bias) {
    grads.bias = sum(g, {0, 2});
  }
  return grads;
}

Tensor im2col(const Tensor& input, const Im2colOptions& options) {
  bool unbatched = false;
  const Tensor x = contiguous(as_batched("im2col", input, unbatched));
  if (is_half(x.dtype())) return detail::via_float32(input, [&](const Tensor& f) { return im2col(f, options); });
  return unbatch(window_columns(x, make_window("im2col", "input", x.sizes(), options)), unbatched);
}

Tensor col2im(const Tensor& columns, std::array<int64_t, 2> output_size, const Im2colOptions& options) {
  detail::check_floating("col2im", columns);
  if (is_half(columns.dtype())) {
    return detail::via_float32(columns, [&](const Tensor& f) { return col2im(f, output_size, options); });
  }
  DISTGRAD_CHECK(columns.dim() == 2 || columns.dim() == 3,
                 "col2im: expected columns of shape [N, C * kh * kw, L] or [C * kh * kw, L], found ",
                 shape_str(columns.sizes()));
  const bool unbatched = columns.dim() == 2;
  const Tensor col = contiguous(unbatched ? unsqueeze(columns, 0) : columns);
  check_window_options("col2im", options);
  const auto& [kernel, stride, padding, dilation] = options;
  DISTGRAD_CHECK(output_size[0] >= 0 && output_size[1] >= 0, "col2im: expected a non-negative output size, found [",
                 output_size[0], ", ", output_size[1], "]");
  const int64_t area = kernel[0] * kernel[1];
  DISTGRAD_CHECK(col.size(1) % area == 0, "col2im: expected dim 1 of columns to be a multiple of kh * kw = ", area,
                 " for kernel [", kernel[0], ", ", kernel[1], "], found columns of shape ", shape_str(columns.sizes()));
  const kernels::Window2d w =
      make_window("col2im", "output", {col.size(0), col.size(1) / area, output_size[0], output_size[1]}, options);
  DISTGRAD_CHECK(col.size(2) == w.out_h * w.out_w, "col2im: expected ", w.out_h * w.out_w, " columns (", w.out_h, " x ",
                 w.out_w, " windows) for output size [", output_size[0], ", ", output_size[1], "] with kernel [",
                 kernel[0], ", ", kernel[1], "], stride [", stride[0], ", ", stride[1], "], padding [", padding[0],
                 ", ", padding[1], "] and dilation [", dilation[0], ", ", dilation[1], "], found ", col.size(2),
                 " in columns of shape ", shape_str(columns.sizes()));
  Tensor image = empty({w.batch, w.channels, w.height, w.width}, {.dtype = col.dtype(), .device = col.device()});
  if (image.numel() > 0) kernels::kernels_for(col.device()).col2im(image, col, w);
  return unbatch(image, unbatched);
}

ValuesIndices max_pool2d(const Tensor& input, const Pool2dOptions& options) {
  bool unbatched = false;
  const Tensor x = contiguous(as_batched("max_pool2d", input, unbatched));
  if (is_half(x.dtype())) {
    ValuesIndices result = max_pool2d(detail::widened(input), options);
    result.values = to(result.values, input.dtype());  // a maximum of halves is exact
    return result;
  }
  const kernels::Window2d w = pool_window("max_pool2d", x.sizes(), options, options.dilation);
  const Shape sizes{w.batch, w.channels, w.out_h, w.out_w};
  ValuesIndices result{empty(sizes, {.dtype = x.dtype(), .device = x.device()}),
                       empty(sizes, {.dtype = kInt64, .device = x.device()})};
  if (result.values.numel() > 0) kernels::kernels_for(x.device()).max_pool2d(result.values, result.indices, x, w);
  return {unbatch(result.values, unbatched), unbatch(result.indices, unbatched)};
}

Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices, const Shape& input_sizes,
                           const Pool2dOptions& options) {
  detail::check_floating("max_pool2d_backward", grad_output);
  if (is_half(grad_output.dtype())) {
    return detail::via_float32(grad_output,
                               [&](const Tensor& f) { return max_pool2d_backward(f, indices, input_sizes, options); });
  }
  detail::check_same_device("max_pool2d_backward", grad_output, indices);
  DISTGRAD_CHECK(indices.dtype() == kInt64, "max_pool2d_backward: expected int64 indices, found a ",
                 indices.describe());
  bool unbatched = false;
  const Shape sizes = batched_sizes("max_pool2d_backward", input_sizes, unbatched);
  const kernels::Window2d w = pool_window("max_pool2d_backward", sizes, options, options.dilation);
  const Shape pooled = output_sizes(w, w.channels, unbatched);
  DISTGRAD_CHECK(grad_output.sizes() == pooled && indices.sizes() == pooled, "max_pool2d_backward: expected ",
                 "grad_output and indices of the pooled shape ", shape_str(pooled), " for input of shape ",
                 shape_str(input_sizes), ", found ", shape_str(grad_output.sizes()), " and ",
                 shape_str(indices.sizes()));
  Tensor grad_input = empty(input_sizes, {.dtype = grad_output.dtype(), .device = grad_output.device()});
  if (grad_input.numel() == 0) return grad_input;
  const int64_t outside = kernels::kernels_for(grad_output.device())
                              .max_pool2d_backward(grad_input, contiguous(grad_output), contiguous(indices), w);
  DISTGRAD_CHECK(outside == 0, "max_pool2d_backward: ", outside, " indices lie outside their ", w.height, " x ",
                 w.width, " plane (expected flat positions in [0, ", w.height * w.width, "))");
  return grad_input;
}

Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  bool unbatched = false;
  const Tensor x = contiguous(as_batched("avg_pool2d", input, unbatched));
  if (is_half(x.dtype())) return detail::via_float32(input, [&](const Tensor& f) { return avg_pool2d(f, options); });
  DISTGRAD_CHECK(options.dilation[0] == 1 && options.dilation[1] == 1, "avg_pool2d: dilation is not supported ",
                 "(as in PyTorch), found [", options.dilation[0], ", ", options.dilation[1], "]");
  DISTGRAD_CHECK(!options.ceil_mode, "avg_pool2d: ceil_mode is not supported (max_pool2d has it)");
  const kernels::Window2d w = pool_window("avg_pool2d", x.sizes(), options, {1, 1});
  Tensor out = empty({w.batch, w.channels, w.out_h, w.out_w}, {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) kernels::kernels_for(x.device()).avg_pool2d(out, x, w, options.count_include_pad);
  return unbatch(out, unbatched);
}

}  // namespace distgrad::untracked
