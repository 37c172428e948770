// gradcheck and gradgradcheck: autograd's formulas against central finite differences.
//
// Both take a function of tensors and float64 inputs (on any device, any strides, but with no
// element stored twice: no expanded inputs). gradcheck compares, for every input that
// requires grad, the Jacobian that backward computes with the one obtained by perturbing each
// element by +-eps. gradgradcheck does the same for the function that returns the gradient of
// `fn` (taken with create_graph) for random output gradients, so it checks second order.
// A mismatch throws an Error naming the input, the output, the element and both values.
//
//   auto fn = [](const TensorList& x) { return TensorList{dg::tanh(dg::matmul(x[0], x[1]))}; };
//   dg::autograd::gradcheck(fn, {a, b});     // a, b: float64, requires_grad
#pragma once

#include <functional>

#include "autograd/node.h"

namespace distgrad::autograd {

using DifferentiableFunction = std::function<TensorList(const TensorList&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

// Throws on the first mismatch; returns true otherwise.
bool gradcheck(const DifferentiableFunction& fn, const TensorList& inputs, const GradcheckOptions& options = {});
bool gradgradcheck(const DifferentiableFunction& fn, const TensorList& inputs, const GradcheckOptions& options = {});

}  // namespace distgrad::autograd
