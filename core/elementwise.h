// Elementwise ops with NumPy broadcasting and their in-place forms (untracked: see core/ops.h).
//
// Both tensor operands must share dtype and device (no silent casts); a scalar operand is
// converted to the tensor's dtype. Arithmetic is defined for float32, float64 and int64
// (div and the transcendental functions need a floating dtype); comparisons return bool.
// In-place forms write into `self`, whose shape must be the broadcast shape, and bump its
// version counter.
//
// The operators (+, *, <, +=, ...) are the differentiable ones of autograd/ops.h only.
//
//   Tensor y = untracked::relu(untracked::add(untracked::mul(x, 2.0), b));   // b [n], x [m, n]
#pragma once

#include <optional>

#include "core/tensor.h"

namespace distgrad::untracked {

Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, double b);
Tensor sub(double a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor pow(double base, const Tensor& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

Tensor neg(const Tensor& t);
Tensor abs(const Tensor& t);
Tensor sign(const Tensor& t);
Tensor exp(const Tensor& t);
// exp(t) - 1, accurate near 0.
Tensor expm1(const Tensor& t);
Tensor log(const Tensor& t);
Tensor log1p(const Tensor& t);
Tensor sqrt(const Tensor& t);
Tensor rsqrt(const Tensor& t);
Tensor sin(const Tensor& t);
Tensor cos(const Tensor& t);
Tensor tanh(const Tensor& t);
Tensor sigmoid(const Tensor& t);
Tensor relu(const Tensor& t);
// ReLU's backward from its output: grad where result > 0 (or NaN), else 0 (PyTorch's
// threshold_backward at 0).
Tensor relu_backward(const Tensor& grad, const Tensor& result);
// The exact GELU, x * Phi(x).
Tensor gelu(const Tensor& t);
Tensor erf(const Tensor& t);
// Clamps to [min, max]; an absent bound is not applied; at least one must be given.
Tensor clamp(const Tensor& t, std::optional<double> min, std::optional<double> max);

// Comparisons, returning bool tensors.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, double b);
// Logical ops on bool tensors.
Tensor logical_not(const Tensor& t);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);

// In-place forms; each returns self.
const Tensor& add_(const Tensor& self, const Tensor& other);
const Tensor& add_(const Tensor& self, double other);
const Tensor& sub_(const Tensor& self, const Tensor& other);
const Tensor& sub_(const Tensor& self, double other);
const Tensor& mul_(const Tensor& self, const Tensor& other);
const Tensor& mul_(const Tensor& self, double other);
const Tensor& div_(const Tensor& self, const Tensor& other);
const Tensor& div_(const Tensor& self, double other);
const Tensor& neg_(const Tensor& self);
// grad = relu_backward(grad, result), in place.
const Tensor& relu_backward_(const Tensor& grad, const Tensor& result);
const Tensor& clamp_(const Tensor& self, std::optional<double> min, std::optional<double> max);

}  // namespace distgrad::untracked
