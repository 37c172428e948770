// Gradient clipping: clip_grad_norm_ and clip_grad_value_ (torch.nn.utils's).
//
// Both change the parameters' grad() in place, outside any graph, and skip parameters whose
// grad() is undefined. Call them between backward() and the optimizer's step():
//
//   loss.backward();
//   dg::Tensor total = dg::nn::clip_grad_norm_(net.parameters(), 1.0);   // the norm before clipping
//   optimizer.step();
#pragma once

#include <vector>

#include "core/tensor.h"

namespace distgrad::nn {

// Scales every gradient by min(1, max_norm / (total_norm + 1e-6)), where total_norm is the
// `norm_type`-norm (> 0, or infinity) of all the gradients together, as if concatenated; returns
// total_norm (a 0-dim tensor of the gradients' dtype on the first one's device; float64 when
// their dtypes differ; 0 without gradients). A NaN or infinite total is an error with
// `error_if_nonfinite`; otherwise the gradients are scaled by it, as in PyTorch.
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient element to [-clip_value, clip_value] (clip_value >= 0).
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace distgrad::nn
