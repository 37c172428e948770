// The CPU's Winograd F(2 x 2, 3 x 3) tile transforms (Note [Winograd convolution] in
// core/nn_ops.cc): the DeviceKernels entries winograd_input_tiles, winograd_input_tiles_adjoint,
// winograd_output_tiles, winograd_output_grad_tiles, winograd_filters and
// winograd_filters_adjoint.
#pragma once

#include "core/kernels.h"

namespace distgrad::kernels::cpu_winograd {

void input_tiles(const Tensor& tiles, const Tensor& in, const Window2d& window);
void input_tiles_adjoint(const Tensor& grad_in, const Tensor& tiles, const Window2d& window);
void output_tiles(const Tensor& out, const Tensor& products, const Tensor& bias, const Window2d& window);
void output_grad_tiles(const Tensor& tiles, const Tensor& grad_out, const Window2d& window);
void filters(const Tensor& filters, const Tensor& weight);
void filters_adjoint(const Tensor& grad_weight, const Tensor& transformed_grad);

}  // namespace distgrad::kernels::cpu_winograd
