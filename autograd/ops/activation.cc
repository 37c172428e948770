// Differentiable activations composed of other ops (autograd/ops.h): each is written with the
// formula PyTorch's kernel uses, so that values and gradients (of any order, by composition)
// match it; branches not taken are fed values that keep their gradients finite.
#include <cmath>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/ops.h"

namespace distgrad {
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
  const Tensor positive = gt(t, 0.0);
  // expm1 sees 0 where x > 0, so that a large x does not turn its unused gradient into inf * 0.
  return where(positive, t, mul(expm1(masked_fill(t, positive, 0.0)), alpha));
}

Tensor softplus(const Tensor& t, double beta, double threshold) {
  check_floating_input("softplus", t);
  DISTGRAD_CHECK(beta != 0 && !std::isnan(beta), "softplus: expected a non-zero beta, found ", beta);
  const Tensor linear = gt(mul(t, beta), threshold);
  return where(linear, t, div(log1p(exp(mul(masked_fill(t, linear, 0.0), beta))), beta));
}

Tensor logsigmoid(const Tensor& t) {
  check_floating_input("logsigmoid", t);
  return sub(minimum(t, zeros_like(t)), log1p(exp(neg(abs(t)))));
}

Tensor hardtanh(const Tensor& t, double min_val, double max_val) {
  check_floating_input("hardtanh", t);
  DISTGRAD_CHECK(min_val < max_val, "hardtanh: expected min_val < max_val, found ", min_val, " and ", max_val);
  return clamp(t, min_val, max_val);
}

}  // namespace distgrad
