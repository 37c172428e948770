// CUDA's fused batch normalisation: the DeviceKernels entries batch_norm, batch_norm_backward
// and batch_norm_double_backward (core/kernels.h), twins of core/cpu/batch_norm.h.
#pragma once

#include "core/kernels.h"

namespace distgrad::cuda::detail {

void batch_norm(const kernels::BatchNormLayout& layout, const Tensor& out, const Tensor& mean, const Tensor& var,
                const Tensor& invstd, const Tensor& input, const Tensor& weight, const Tensor& bias, double eps);
void batch_norm_backward(const kernels::BatchNormLayout& layout, const Tensor& grad_input, const Tensor& grad_weight,
                         const Tensor& grad_bias, const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                         const Tensor& mean, const Tensor& invstd);
void batch_norm_double_backward(const kernels::BatchNormDoubleBackwardArgs& args);

}  // namespace distgrad::cuda::detail
