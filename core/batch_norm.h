// Batch normalisation with the batch's own statistics, fused: the statistics and output, the
// gradients, and theirs, each in two or three passes over the input (Note [Fused batch
// normalisation] in batch_norm.cc).
// Both backends have the kernels (core/cpu/batch_norm.cc, core/cuda/batch_norm.cu);
// distgrad::batch_norm (autograd/ops.h) is the differentiable op over them.
//
//   auto [y, mean, var, invstd] = untracked::batch_norm(x, weight, bias, 1e-5);   // x: [N, C, ...]
//   auto grads = untracked::batch_norm_backward(grad_y, x, weight, mean, invstd);
//   auto second = untracked::batch_norm_double_backward(gg_x, {}, {}, grad_y, x, weight, mean, invstd);
#pragma once

#include "core/device.h"
#include "core/tensor.h"

namespace distgrad {

struct BatchNormOutputs {
  Tensor output;
  Tensor mean, var, invstd;  // [C]: the batch's mean, biased variance and 1 / sqrt(var + eps)
};
struct BatchNormGradsNeeded {
  bool input = true, weight = true, bias = true;
};
struct BatchNormGrads {
  Tensor input, weight, bias;  // undefined where not needed (weight also without a weight)
};
struct BatchNormDoubleGradsNeeded {
  bool grad_output = true, input = true, weight = true;
};
struct BatchNormDoubleGrads {
  Tensor grad_output, input, weight;  // undefined where not needed (weight also without a weight)
};

namespace untracked {

// (input - mean) / sqrt(var + eps) * weight + bias for float32 or float64 `input` [N, C, ...],
// mean and var taken per channel (dim 1) over every other dim (torch.nn.functional.batch_norm
// with training=True); weight and bias are [C] or undefined (ones and zeros).
BatchNormOutputs batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps);

// batch_norm's gradients from the output's `grad_output`, with the mean and invstd it returned.
BatchNormGrads batch_norm_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                   const Tensor& mean, const Tensor& invstd, const BatchNormGradsNeeded& needed = {});
// The same with the input's gradient written into grad_output (contiguous), which it returns as
// grads.input when needed.input: autograd's backward when nothing else holds the output's gradient
// (Note [Reused gradients] in autograd/function.h).
BatchNormGrads batch_norm_backward_(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                    const Tensor& mean, const Tensor& invstd, const BatchNormGradsNeeded& needed = {});

// batch_norm_backward's backward: the gradients w.r.t. its grad_output, input and weight of
// <gg_input, grads.input> + <gg_weight, grads.weight> + <gg_bias, grads.bias>, `grads` being
// batch_norm_backward(grad_output, input, weight, mean, invstd) as a function of all three (the
// statistics are the input's). An undefined gg_* counts as zeros.
BatchNormDoubleGrads batch_norm_double_backward(const Tensor& gg_input, const Tensor& gg_weight, const Tensor& gg_bias,
                                                const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                                const Tensor& mean, const Tensor& invstd,
                                                const BatchNormDoubleGradsNeeded& needed = {});

}  // namespace untracked
}  // namespace distgrad
