#include "nn/activation.h"

#include "autograd/ops.h"

namespace distgrad::nn {

Tensor ReLU::forward(const Tensor& input) { return relu(input); }
Tensor Tanh::forward(const Tensor& input) { return tanh(input); }
Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }

}  // namespace distgrad::nn
