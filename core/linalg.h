// Matrix products: OpenBLAS gemm on the CPU, cuBLAS on CUDA (float32 and float64).
#pragma once

#include "core/tensor.h"

namespace distgrad::untracked {

// torch.matmul for operands of 1, 2 or 3 dims: dot (1-D x 1-D, 0-dim result), matrix-vector,
// vector-matrix (the vector is treated as a row), matrix product, and batched products where
// a 2-D operand is broadcast over the other's batch and two batches must be equal.
Tensor matmul(const Tensor& a, const Tensor& b);
// beta * bias + alpha * (a @ b) for 2-D a, b; bias broadcasts to the result.
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta = 1, double alpha = 1);
// a[i] * b[j] for 1-D a, b.
Tensor outer(const Tensor& a, const Tensor& b);

}  // namespace distgrad::untracked
