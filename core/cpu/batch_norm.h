// The CPU's fused batch normalisation (Note [Fused batch normalisation] in core/nn_ops.cc): the
// DeviceKernels entries batch_norm, batch_norm_backward and batch_norm_double_backward.
#pragma once

#include "core/kernels.h"

namespace distgrad::kernels::cpu_batch_norm {

void forward(const BatchNormLayout& layout, const Tensor& out, const Tensor& mean, const Tensor& var,
             const Tensor& invstd, const Tensor& input, const Tensor& weight, const Tensor& bias, double eps);
void backward(const BatchNormLayout& layout, const Tensor& grad_input, const Tensor& grad_weight,
              const Tensor& grad_bias, const Tensor& grad_output, const Tensor& input, const Tensor& weight,
              const Tensor& mean, const Tensor& invstd);
void double_backward(const BatchNormDoubleBackwardArgs& args);

}  // namespace distgrad::kernels::cpu_batch_norm
