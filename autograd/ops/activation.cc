// Differentiable activations (autograd/ops.h), with the formulas of PyTorch's kernels and of its
// derivatives: composed of other ops where their derivatives are PyTorch's at every point, recorded
// with a backward formula of differentiable ops where a kink (elu at 0) or an |x| (logsigmoid)
// would make the composition's second derivative differ from PyTorch's. Branches not taken are fed
// values that keep their gradients finite.
#include <cmath>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/ops.h"

namespace distgrad {

using autograd::BackwardContext;
using autograd::record;
using autograd::TensorList;

namespace {

void check_floating_input(const char* op, const Tensor& t) {
  t.check_defined(op);
  DISTGRAD_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, found a ", t.describe());
}

}  // namespace

Tensor silu(const Tensor& t) {
  check_floating_input("silu", t);
  return mul(t, sigmoid(t));
}

Tensor leaky_relu(const Tensor& t, double negative_slope) {
  check_floating_input("leaky_relu", t);
  return where(gt(t, 0.0), t, mul(t, negative_slope));
}

Tensor elu(const Tensor& t, double alpha) {
  check_floating_input("elu", t);
  Tensor result = untracked::where(untracked::gt(t, 0.0), t, untracked::mul(untracked::expm1(t), alpha));
  if (auto node = record("EluBackward", {&t}, {&result}, [alpha](const BackwardContext& ctx) {
        const Tensor& x = ctx.saved[0];
        // The slope is 1 where x > 0 and alpha exp(x) elsewhere (x = 0 included); its exponential
        // sees x only where x < 0 (a constant 0 elsewhere), so that the second derivative is
        // alpha exp(x) where x < 0 and 0 from x = 0 on, as PyTorch's elu_double_backward.
        const Tensor slope = where(gt(x, 0.0), ones_like(x), mul(exp(masked_fill(x, ge(x, 0.0), 0.0)), alpha));
        return TensorList{mul(ctx.grads[0], slope)};
      })) {
    node->save(t);
  }
  return result;
}

Tensor softplus(const Tensor& t, double beta, double threshold) {
  if (autograd::casts_to_float32({&t})) return softplus(autograd::autocast_to_float32(t), beta, threshold);
  check_floating_input("softplus", t);
  DISTGRAD_CHECK(beta != 0 && !std::isnan(beta), "softplus: expected a non-zero beta, found ", beta);
  const Tensor linear = gt(mul(t, beta), threshold);
  return where(linear, t, div(log1p(exp(mul(masked_fill(t, linear, 0.0), beta))), beta));
}

Tensor logsigmoid(const Tensor& t) {
  check_floating_input("logsigmoid", t);
  Tensor result = untracked::sub(untracked::minimum(t, zeros_like(t)),
                                 untracked::log1p(untracked::exp(untracked::neg(untracked::abs(t)))));
  // d/dx log sigmoid(x) = sigmoid(-x): smooth to any order, 0 included (PyTorch's double backward).
  if (auto node = record("LogSigmoidBackward", {&t}, {&result}, [](const BackwardContext& ctx) {
        return TensorList{mul(ctx.grads[0], sigmoid(neg(ctx.saved[0])))};
      })) {
    node->save(t);
  }
  return result;
}

Tensor hardtanh(const Tensor& t, double min_val, double max_val) {
  check_floating_input("hardtanh", t);
  DISTGRAD_CHECK(min_val < max_val, "hardtanh: expected min_val < max_val, found ", min_val, " and ", max_val);
  return clamp(t, min_val, max_val);
}

}  // namespace distgrad
