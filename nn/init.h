// Parameter initialisation for the layers (torch.nn.init), drawn from distgrad's default
// generator so that `manual_seed(s)` before building a model makes it reproducible.
//
//   manual_seed(0);
//   Tensor w = nn::init::fan_in_uniform({40, 1}, /*fan_in=*/1);   // U(-1, 1)
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace distgrad::nn::init {

// Values drawn uniformly from [low, high), of options.dtype (floating) on options.device.
Tensor uniform(const Shape& sizes, double low, double high, TensorOptions options = {});

// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for the weights of Linear and Conv2d
// (kaiming_uniform with a = sqrt(5) works out to this bound) and for their biases. A fan_in of
// 0 gives zeros, as in PyTorch.
Tensor fan_in_uniform(const Shape& sizes, int64_t fan_in, TensorOptions options = {});

}  // namespace distgrad::nn::init
