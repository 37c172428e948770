#include "core/batch_norm.h"

#include "core/copy.h"
#include "core/creation.h"
#include "core/kernels.h"
#include "core/op_checks.h"
#include "core/shape.h"

namespace distgrad::untracked {
namespace {

// Note [Fused batch normalisation]
// Composed of elementwise ops and reductions, a training-mode BatchNorm makes four passes over its
// input for the statistics and output, and its backward about ten more, each out of cache and with
// a tensor of the input's size to allocate; second-order MAML keeps and replays every inner step's.
// The fused kernels make two passes for the mean and variance (the variance from the centred
// values, as PyTorch's CPU kernel takes it, not from the sum of squares) and one for the output;
// in backward, one for the sums and one for the gradients. On the CPU each pass reads a block of
// channels image by image, in memory order (core/cpu/batch_norm.cc). With M values per channel,
// xhat = (x - mean) * invstd, g the output's gradient, gc = g - mean(g), r = mean(g * xhat) and
// a = weight * invstd:
//   grad_bias = M mean(g),  grad_weight = M r,  grad_input = a * (gc - xhat * r).
// batch_norm_double_backward differentiates these three w.r.t. g, x and weight (mean and invstd
// depend on x): with gg_* the gradients arriving for them, ggc = gg_input - mean(gg_input),
// q = mean(gg_input * xhat) and p = mean(gg_input * gc),
//   d/dg      = a * (ggc - xhat * q) + gg_weight * xhat + gg_bias
//   d/dx      = a * invstd * (xhat * (3 r q - p) - q * gc - r * ggc)
//               + gg_weight * invstd * (gc - xhat * r)
//   d/dweight = M * invstd * (p - r q).
// distgrad::batch_norm (autograd/ops/nn.cc) differentiates the kernels, to any order: beyond the
// second it composes d/dg, d/dx and d/dweight of differentiable ops.

// The layout of input-shaped tensors [N, C, ...] as kernels read them.
kernels::BatchNormLayout layout_of(const Tensor& input) {
  const int64_t batch = input.size(0), channels = input.size(1);
  int64_t inner = 1;
  for (int64_t d = 2; d < input.dim(); ++d) inner *= input.size(d);
  return {.batch = batch, .channels = channels, .inner = inner};
}

const kernels::DeviceKernels& fused_kernels(const char* op, const Tensor& input) {
  const kernels::DeviceKernels& device = kernels::kernels_for(input.device());
  DISTGRAD_CHECK(device.batch_norm != nullptr, op, ": the backend of ", input.device(), " has no batch-norm kernels");
  return device;
}

void check_input(const char* op, const Tensor& input) {
  detail::check_floating(op, input);
  DISTGRAD_CHECK(input.dim() >= 2, op, ": expected input of shape [N, C, ...], found ", shape_str(input.sizes()));
}

// `tensor` (named `what`) is undefined where `optional`, or [C] of input's dtype and device.
void check_per_channel(const char* op, const char* what, const Tensor& tensor, const Tensor& input, bool optional) {
  if (optional && !tensor.defined()) return;
  DISTGRAD_CHECK(tensor.defined(), op, ": expected a defined ", what);
  detail::check_same_dtype_and_device(op, input, tensor);
  DISTGRAD_CHECK(tensor.dim() == 1 && tensor.size(0) == input.size(1), op, ": expected ", what, " of shape [",
                 input.size(1), "] for input of shape ", shape_str(input.sizes()), ", found ",
                 shape_str(tensor.sizes()));
}

// `tensor` (named `what`) is undefined where `optional`, or of input's shape, dtype and device.
void check_input_shaped(const char* op, const char* what, const Tensor& tensor, const Tensor& input, bool optional) {
  if (optional && !tensor.defined()) return;
  DISTGRAD_CHECK(tensor.defined(), op, ": expected a defined ", what);
  detail::check_same_dtype_and_device(op, input, tensor);
  DISTGRAD_CHECK(tensor.sizes() == input.sizes(), op, ": expected ", what, " of the input's shape ",
                 shape_str(input.sizes()), ", found ", shape_str(tensor.sizes()));
}

Tensor contiguous_or_undefined(const Tensor& tensor) { return tensor.defined() ? contiguous(tensor) : tensor; }

// The arguments the gradients of batch_norm(input, weight, ...) take: its output's gradient and
// the statistics it returned.
void check_backward_arguments(const char* op, const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                              const Tensor& mean, const Tensor& invstd) {
  check_input(op, input);
  check_input_shaped(op, "grad_output", grad_output, input, /*optional=*/false);
  check_per_channel(op, "weight", weight, input, /*optional=*/true);
  check_per_channel(op, "mean", mean, input, /*optional=*/false);
  check_per_channel(op, "invstd", invstd, input, /*optional=*/false);
}

// batch_norm_backward's gradients into `grad_input` when it is defined (grad_output itself, for
// batch_norm_backward_), else into fresh tensors.
BatchNormGrads run_backward(const char* op, const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                            const Tensor& mean, const Tensor& invstd, const BatchNormGradsNeeded& needed,
                            const Tensor& grad_input) {
  check_backward_arguments(op, grad_output, input, weight, mean, invstd);
  if (is_half(input.dtype())) {
    using detail::widened;
    BatchNormGrads grads = run_backward(op, widened(grad_output), widened(input), widened(weight), widened(mean),
                                        widened(invstd), needed, Tensor());
    detail::round_back(input.dtype(), {&grads.input, &grads.weight, &grads.bias});
    if (grad_input.defined() && grads.input.defined()) grads.input = copy_(grad_input, grads.input);
    return grads;
  }
  const kernels::DeviceKernels& device = fused_kernels(op, input);
  const Tensor x = contiguous(input);
  const TensorOptions like_x{.dtype = x.dtype(), .device = x.device()};
  const int64_t channels = x.size(1);
  BatchNormGrads grads;
  if (needed.input) grads.input = grad_input.defined() ? grad_input : empty(x.sizes(), like_x);
  if (needed.weight && weight.defined()) grads.weight = empty({channels}, like_x);
  if (needed.bias) grads.bias = empty({channels}, like_x);
  if (!grads.input.defined() && !grads.weight.defined() && !grads.bias.defined()) return grads;
  device.batch_norm_backward(layout_of(x), grads.input, grads.weight, grads.bias, contiguous(grad_output), x,
                             contiguous_or_undefined(weight), contiguous(mean), contiguous(invstd));
  return grads;
}

}  // namespace

BatchNormOutputs batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps) {
  check_input("batch_norm", input);
  check_per_channel("batch_norm", "weight", weight, input, /*optional=*/true);
  check_per_channel("batch_norm", "bias", bias, input, /*optional=*/true);
  DISTGRAD_CHECK(eps >= 0, "batch_norm: expected a non-negative eps, found ", eps);
  if (is_half(input.dtype())) {
    using detail::widened;
    BatchNormOutputs result = batch_norm(widened(input), widened(weight), widened(bias), eps);
    detail::round_back(input.dtype(), {&result.output, &result.mean, &result.var, &result.invstd});
    return result;
  }
  const kernels::DeviceKernels& device = fused_kernels("batch_norm", input);
  const Tensor x = contiguous(input);
  const TensorOptions like_x{.dtype = x.dtype(), .device = x.device()};
  const int64_t channels = x.size(1);
  BatchNormOutputs result{.output = empty(x.sizes(), like_x),
                          .mean = empty({channels}, like_x),
                          .var = empty({channels}, like_x),
                          .invstd = empty({channels}, like_x)};
  device.batch_norm(layout_of(x), result.output, result.mean, result.var, result.invstd, x,
                    contiguous_or_undefined(weight), contiguous_or_undefined(bias), eps);
  return result;
}

BatchNormGrads batch_norm_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                   const Tensor& mean, const Tensor& invstd, const BatchNormGradsNeeded& needed) {
  return run_backward("batch_norm_backward", grad_output, input, weight, mean, invstd, needed, Tensor());
}

BatchNormGrads batch_norm_backward_(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                    const Tensor& mean, const Tensor& invstd, const BatchNormGradsNeeded& needed) {
  DISTGRAD_CHECK(grad_output.defined() && grad_output.is_contiguous(),
                 "batch_norm_backward_: expected a contiguous grad_output to write the input's gradient into");
  return run_backward("batch_norm_backward_", grad_output, input, weight, mean, invstd, needed, grad_output);
}

BatchNormDoubleGrads batch_norm_double_backward(const Tensor& gg_input, const Tensor& gg_weight, const Tensor& gg_bias,
                                                const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                                const Tensor& mean, const Tensor& invstd,
                                                const BatchNormDoubleGradsNeeded& needed) {
  const char* op = "batch_norm_double_backward";
  check_backward_arguments(op, grad_output, input, weight, mean, invstd);
  check_input_shaped(op, "gg_input", gg_input, input, /*optional=*/true);
  check_per_channel(op, "gg_weight", gg_weight, input, /*optional=*/true);
  check_per_channel(op, "gg_bias", gg_bias, input, /*optional=*/true);
  if (is_half(input.dtype())) {
    using detail::widened;
    BatchNormDoubleGrads grads =
        batch_norm_double_backward(widened(gg_input), widened(gg_weight), widened(gg_bias), widened(grad_output),
                                   widened(input), widened(weight), widened(mean), widened(invstd), needed);
    detail::round_back(input.dtype(), {&grads.grad_output, &grads.input, &grads.weight});
    return grads;
  }
  const kernels::DeviceKernels& device = fused_kernels(op, input);
  const Tensor x = contiguous(input);
  const TensorOptions like_x{.dtype = x.dtype(), .device = x.device()};
  BatchNormDoubleGrads grads;
  if (needed.grad_output) grads.grad_output = empty(x.sizes(), like_x);
  if (needed.input) grads.input = empty(x.sizes(), like_x);
  if (needed.weight && weight.defined()) grads.weight = empty({x.size(1)}, like_x);
  if (!grads.grad_output.defined() && !grads.input.defined() && !grads.weight.defined()) return grads;
  device.batch_norm_double_backward({.layout = layout_of(x),
                                     .grad_output = contiguous(grad_output),
                                     .input = x,
                                     .weight = contiguous_or_undefined(weight),
                                     .mean = contiguous(mean),
                                     .invstd = contiguous(invstd),
                                     .gg_input = contiguous_or_undefined(gg_input),
                                     .gg_weight = contiguous_or_undefined(gg_weight),
                                     .gg_bias = contiguous_or_undefined(gg_bias),
                                     .d_grad_output = grads.grad_output,
                                     .d_input = grads.input,
                                     .d_weight = grads.weight});
  return grads;
}

}  // namespace distgrad::untracked
