// DeviceKernels: the few primitives each device backend implements (internal to core).
//
// Note [Primitive kernels]
// Ops in core/ops.h check their arguments, compute output shapes, broadcast operands with
// stride-0 views (untracked::expand) and allocate outputs; then they call one of the primitives
// below through `kernels_for(device)`. Everything else (softmax, var, norm, cat, one_hot,
// conv2d's bias, ...) is composed from these primitives, so the CPU (core/cpu/) and CUDA
// (core/cuda/) backends implement the same short list and every composed op works on both.
//
// Contract for every primitive:
//   - all tensors are on the backend's device; shapes and dtypes were checked by the caller;
//   - `out` is freshly allocated or a caller-checked in-place target, never overlapping the
//     inputs except in elementwise ops where out and an input are exactly the same view;
//   - inputs may have any strides (including 0 from broadcasting) unless marked contiguous.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace distgrad::kernels {

// clang-format off
enum class UnaryOp {
  kNeg, kAbs, kSign, kExp, kExpm1, kLog, kLog1p, kSqrt, kRsqrt, kSin, kCos, kTanh, kSigmoid, kRelu, kGelu, kErf,
  kClamp, kLogicalNot,
};

enum class BinaryOp {
  kAdd, kSub, kMul, kDiv, kPow, kMaximum, kMinimum,
  kEq, kNe, kLt, kLe, kGt, kGe,  // comparisons write a bool output
  kLogicalAnd, kLogicalOr,       // bool inputs and output
  kReluBackward,                 // a, but 0 where b <= 0: ReLU's gradient a through its output b
};
// clang-format on

constexpr bool is_comparison(BinaryOp op) { return op >= BinaryOp::kEq && op <= BinaryOp::kGe; }

enum class ReduceOp { kSum, kProd, kMax, kMin };

// Bounds for kClamp; an absent bound is not applied.
struct ClampBounds {
  double min = 0, max = 0;
  bool has_min = false, has_max = false;
};

// Row-major C = alpha * op(A) * op(B) + beta * C for `batch` independent matrices.
// A is m x k after op, B is k x n after op; ld* are leading dimensions in elements;
// stride_* are the distances between consecutive batch entries (0 to reuse one matrix).
struct GemmArgs {
  Device device;  // where a, b and c live
  DType dtype = kFloat32;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  double alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
};

// A sliding 2-D window over NCHW input: im2col, col2im and the pooling kernels.
struct Window2d {
  int64_t batch = 0, channels = 0, height = 0, width = 0;
  int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t out_h = 0, out_w = 0;
};

// How batch normalisation's kernels read contiguous input-shaped tensors: [batch, channels,
// inner], statistics over batch and inner for each channel.
struct BatchNormLayout {
  int64_t batch = 0, channels = 0, inner = 0;
};

// The tensors of batch normalisation's double backward: batch_norm_backward's arguments, the
// gradients of its results (gg_*; undefined reads as zeros) and the gradients it gets w.r.t.
// grad_output, input and weight (d_*; those defined are written). Input-shaped ones are
// contiguous in the layout, the others contiguous [channels]; an undefined weight reads as ones.
struct BatchNormDoubleBackwardArgs {
  BatchNormLayout layout;
  Tensor grad_output, input, weight, mean, invstd;
  Tensor gg_input, gg_weight, gg_bias;
  Tensor d_grad_output, d_input, d_weight;
};

struct DeviceKernels {
  // out[...] = value (converted to out's dtype).
  void (*fill)(const Tensor& out, double value);
  // out[...] = in[...] converting dtype; `in` has out's shape (possibly expanded).
  void (*copy)(const Tensor& out, const Tensor& in);
  void (*unary)(UnaryOp op, const Tensor& out, const Tensor& in, const ClampBounds& bounds);
  // `a` and `b` have out's shape and one dtype; out is bool for comparisons.
  void (*binary)(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
  // out = op(a, scalar), or op(scalar, a) when `scalar_first`.
  void (*binary_scalar)(BinaryOp op, const Tensor& out, const Tensor& a, double scalar, bool scalar_first);
  // out = condition ? a : b; all four have out's shape, condition is bool.
  void (*where)(const Tensor& out, const Tensor& condition, const Tensor& a, const Tensor& b);
  // `in` is contiguous and read as [outer, reduced, inner]; `values` (contiguous, [outer * inner])
  // gets the reduction over the middle dimension; for kMax/kMin, `indices` (int64, contiguous,
  // or undefined) gets the position of the first extreme (NaN counts as the extreme).
  void (*reduce)(ReduceOp op, const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer,
                 int64_t reduced, int64_t inner);
  // values gets reduce(kSum)'s result over the product a * b (a and b contiguous, of one floating
  // dtype, read as [outer, reduced, inner]), to the same bits, without the product's tensor;
  // null where the device has none (untracked::sum_of_product then multiplies, then sums).
  void (*reduce_products)(const Tensor& values, const Tensor& a, const Tensor& b, int64_t outer, int64_t reduced,
                          int64_t inner);
  void (*gemm)(const GemmArgs& args);
  // Running sums along the middle dimension of contiguous `in` and `out`, read as [outer, length,
  // inner]: out[o, i, j] = in[o, 0, j] + ... + in[o, i, j], added in that order; with `reverse`
  // from the end instead (in[o, i, j] + ... + in[o, length - 1, j], cumsum's adjoint).
  void (*cumsum)(const Tensor& out, const Tensor& in, int64_t outer, int64_t length, int64_t inner, bool reverse);
  // out[o, j, i] = in[o, index[j], i] with `in` contiguous as [outer, dim_size, inner] and
  // out contiguous as [outer, index.numel(), inner]; indices were bounds-checked.
  void (*index_select)(const Tensor& out, const Tensor& in, const Tensor& index, int64_t outer, int64_t dim_size,
                       int64_t inner);
  // out = in gathered along `dim` at `index` (all contiguous, index has out's shape).
  void (*gather)(const Tensor& out, const Tensor& in, const Tensor& index, int64_t dim);
  // self[..., index[p], ...] += src[p] along `dim` for every position p of index
  // (self, index and src contiguous; src at least index's size in every dimension).
  void (*scatter_add)(const Tensor& self, const Tensor& index, const Tensor& src, int64_t dim);
  // col [batch, channels * kernel_h * kernel_w, out_h * out_w] from contiguous NCHW `in`; col's
  // last dim is contiguous, its first two may have any strides (a view of [rows, batch, L]).
  void (*im2col)(const Tensor& col, const Tensor& in, const Window2d& window);
  // The adjoint of im2col: every element of contiguous NCHW `image` (all of it written) gets the
  // sum of the entries of contiguous `col` that im2col reads from it; entries that im2col reads
  // from padding are dropped. The sum runs in a fixed order, so results are deterministic.
  void (*col2im)(const Tensor& image, const Tensor& col, const Window2d& window);
  // Max over each window (padding never wins); indices are flat positions in the H*W plane.
  void (*max_pool2d)(const Tensor& out, const Tensor& indices, const Tensor& in, const Window2d& window);
  // The adjoint of max_pool2d: contiguous NCHW `grad_input` (all of it written) gets at each
  // position the sum, in output order, of the contiguous `grad_output` entries whose `indices`
  // name it, 0 elsewhere. Returns how many indices lie outside their plane (those are skipped).
  int64_t (*max_pool2d_backward)(const Tensor& grad_input, const Tensor& grad_output, const Tensor& indices,
                                 const Window2d& window);
  void (*avg_pool2d)(const Tensor& out, const Tensor& in, const Window2d& window, bool count_include_pad);
  // Winograd F(2 x 2, 3 x 3) for a stride-1 3 x 3 convolution with `window` (Note [Winograd
  // convolution] in core/nn_ops.cc); all six null where the device has none. Its out_h x out_w
  // outputs (out_w at least 7) come in tiles of 2 x 2; tile (ty, tx) reads the 4 x 4 input at
  // row 2 ty - pad_h, column 2 tx - pad_w (padding, and what lies past the input, read as zeros).
  // `tiles` [16, C, batch * tiles per image] (last dim contiguous) gets B^T d B of every input
  // tile d of contiguous NCHW `in`, the 16 values of a tile along dim 0.
  void (*winograd_input_tiles)(const Tensor& tiles, const Tensor& in, const Window2d& window);
  // The adjoint of winograd_input_tiles: contiguous NCHW `grad_in` [batch, C, height, width] (all
  // of it written) gets B x B^T of every tile x of `tiles` [16, C, batch * tiles per image] (last
  // dim contiguous) summed where the tiles' 4 x 4 windows overlap; what falls on the padding is
  // dropped.
  void (*winograd_input_tiles_adjoint)(const Tensor& grad_in, const Tensor& tiles, const Window2d& window);
  // Contiguous NCHW `out` [batch, O, out_h, out_w] gets A^T m A + bias[o] from every tile m of
  // `products` [16, O, batch * tiles per image] (last dim contiguous); bias is contiguous or
  // undefined.
  void (*winograd_output_tiles)(const Tensor& out, const Tensor& products, const Tensor& bias, const Window2d& window);
  // The adjoint of winograd_output_tiles (without the bias): `tiles` [16, O, batch * tiles per
  // image] (last dim contiguous) gets A g A^T of every 2 x 2 block g of contiguous NCHW
  // `grad_out` [batch, O, out_h, out_w] (outputs past its edge read as zeros).
  void (*winograd_output_grad_tiles)(const Tensor& tiles, const Tensor& grad_out, const Window2d& window);
  // Contiguous `filters` [16, O, C] gets G g G^T of every 3 x 3 filter g of contiguous `weight`
  // [O, C, 3, 3], the 16 values of a transform along dim 0; and the adjoint: contiguous
  // `grad_weight` [O, C, 3, 3] (all of it written) gets G^T dU G of every dU in contiguous
  // `transformed_grad` [16, O, C].
  void (*winograd_filters)(const Tensor& filters, const Tensor& weight);
  void (*winograd_filters_adjoint)(const Tensor& grad_weight, const Tensor& transformed_grad);
  // Batch normalisation with the batch's own statistics (Note [Fused batch normalisation] in
  // core/batch_norm.cc); all three null where the device has none. Per channel c of contiguous
  // `input` (layout), [channels] `mean`, `var` (biased) and `invstd` = 1 / sqrt(var + eps) get its
  // statistics and `out` gets (input - mean) * invstd * weight + bias; weight and bias are
  // contiguous [channels], or undefined for ones and zeros.
  void (*batch_norm)(const BatchNormLayout& layout, const Tensor& out, const Tensor& mean, const Tensor& var,
                     const Tensor& invstd, const Tensor& input, const Tensor& weight, const Tensor& bias, double eps);
  // Its gradients from `grad_output` (input's layout) with the statistics batch_norm gave: those
  // of grad_input (input's layout; it may be grad_output itself), grad_weight and grad_bias
  // ([channels]) that are defined.
  void (*batch_norm_backward)(const BatchNormLayout& layout, const Tensor& grad_input, const Tensor& grad_weight,
                              const Tensor& grad_bias, const Tensor& grad_output, const Tensor& input,
                              const Tensor& weight, const Tensor& mean, const Tensor& invstd);
  // The backward of batch_norm_backward (untracked::batch_norm_double_backward).
  void (*batch_norm_double_backward)(const BatchNormDoubleBackwardArgs& args);
};

// The data of a tensor a kernel takes as optional, as T* (T may be const): null when undefined.
template <typename T>
T* data_or_null(const Tensor& tensor) {
  return tensor.defined() ? static_cast<T*>(tensor.data_ptr()) : nullptr;
}

// The kernels of `device`'s backend; throws when distgrad was built without it.
const DeviceKernels& kernels_for(Device device);

const DeviceKernels& cpu_kernels();

}  // namespace distgrad::kernels
