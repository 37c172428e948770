// Differentiable elementwise ops (autograd/ops.h): core kernel, then the recorded formula.
#include <cmath>
#include <numbers>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad {

using autograd::BackwardContext;
using autograd::record;
using autograd::TensorList;

namespace {

// The mask as a tensor of `like`'s dtype: a constant factor in formulas.
Tensor as_factor(const Tensor& mask, const Tensor& like) { return untracked::to(mask, like.dtype()); }

// Records a unary op whose formula needs only the input: grad_input = formula(grad, input).
template <typename Formula>
Tensor unary_of_input(const char* name, Tensor result, const Tensor& t, Formula formula) {
  if (auto node = record(name, {&t}, {&result}, [formula](const BackwardContext& ctx) {
        return TensorList{formula(ctx.grads[0], ctx.saved[0])};
      })) {
    node->save(t);
  }
  return result;
}

// Records a unary op whose formula needs only the output: grad_input = formula(grad, result).
template <typename Formula>
Tensor unary_of_result(const char* name, Tensor result, const Tensor& t, Formula formula) {
  if (auto node = record(name, {&t}, {&result}, [formula](const BackwardContext& ctx) {
        return TensorList{formula(ctx.grads[0], ctx.saved[0])};
      })) {
    node->save_output(result);
  }
  return result;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor result = untracked::add(a, b);
  record("AddBackward", {&a, &b}, {&result}, [a_sizes = a.sizes(), b_sizes = b.sizes()](const BackwardContext& ctx) {
    const Tensor& g = ctx.grads[0];
    return TensorList{ctx.needs(0) ? sum_to(g, a_sizes) : Tensor(), ctx.needs(1) ? sum_to(g, b_sizes) : Tensor()};
  });
  return result;
}

Tensor add(const Tensor& a, double b) {
  Tensor result = untracked::add(a, b);
  record("AddBackward", {&a}, {&result}, [](const BackwardContext& ctx) { return TensorList{ctx.grads[0]}; });
  return result;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor result = untracked::sub(a, b);
  record("SubBackward", {&a, &b}, {&result}, [a_sizes = a.sizes(), b_sizes = b.sizes()](const BackwardContext& ctx) {
    const Tensor& g = ctx.grads[0];
    // A broadcast b's gradient is negated after the sum, on the small tensor (the same values).
    return TensorList{ctx.needs(0) ? sum_to(g, a_sizes) : Tensor(), ctx.needs(1) ? neg(sum_to(g, b_sizes)) : Tensor()};
  });
  return result;
}

Tensor sub(const Tensor& a, double b) { return add(a, -b); }

Tensor sub(double a, const Tensor& b) {
  Tensor result = untracked::sub(a, b);
  record("RsubBackward", {&b}, {&result}, [](const BackwardContext& ctx) { return TensorList{neg(ctx.grads[0])}; });
  return result;
}

namespace {

// The gradient of a product's input of `sizes` whose other factor is `factor`: sum_to(g * factor),
// written into g when this is the formula's last use of it and it may be (Note [Reused gradients]),
// and summed without the product's tensor when nothing is recorded.
Tensor product_grad(const BackwardContext& ctx, const Tensor& factor, const Shape& sizes, bool last_use) {
  const Tensor& g = ctx.grads[0];
  if (sizes == g.sizes()) {
    if (Tensor reusable = last_use ? ctx.take_reusable_grad(0) : Tensor(); reusable.defined()) {
      return untracked::mul_(reusable, factor);
    }
  } else if (factor.sizes() == g.sizes() && !autograd::GradMode::is_enabled()) {
    return untracked::reshape(
        untracked::sum_of_product(g, factor, untracked::sum_to_dims(g.sizes(), sizes, "sum_to"), true), sizes);
  }
  return sum_to(mul(g, factor), sizes);
}

}  // namespace

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor result = untracked::mul(a, b);
  if (auto node = record("MulBackward", {&a, &b}, {&result},
                         [a_sizes = a.sizes(), b_sizes = b.sizes()](const BackwardContext& ctx) {
                           const Tensor &a = ctx.saved[0], &b = ctx.saved[1];
                           Tensor grad_a, grad_b;
                           // The input of the output's shape comes last: its gradient may reuse g.
                           if (a_sizes == ctx.grads[0].sizes() && b_sizes != a_sizes) {
                             if (ctx.needs(1)) grad_b = product_grad(ctx, a, b_sizes, false);
                             if (ctx.needs(0)) grad_a = product_grad(ctx, b, a_sizes, true);
                           } else {
                             if (ctx.needs(0)) grad_a = product_grad(ctx, b, a_sizes, !ctx.needs(1));
                             if (ctx.needs(1)) grad_b = product_grad(ctx, a, b_sizes, true);
                           }
                           return TensorList{grad_a, grad_b};
                         })) {
    node->save(a);
    node->save(b);
  }
  return result;
}

Tensor mul(const Tensor& a, double b) {
  Tensor result = untracked::mul(a, b);
  record("MulBackward", {&a}, {&result}, [b](const BackwardContext& ctx) {
    if (Tensor g = ctx.take_reusable_grad(0); g.defined()) return TensorList{untracked::mul_(g, b)};
    return TensorList{mul(ctx.grads[0], b)};
  });
  return result;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor result = untracked::div(a, b);
  if (auto node = record("DivBackward", {&a, &b}, {&result},
                         [a_sizes = a.sizes(), b_sizes = b.sizes()](const BackwardContext& ctx) {
                           const Tensor& g = ctx.grads[0];
                           const Tensor &a = ctx.saved[0], &b = ctx.saved[1];
                           return TensorList{ctx.needs(0) ? sum_to(div(g, b), a_sizes) : Tensor(),
                                             ctx.needs(1) ? sum_to(neg(div(mul(g, a), mul(b, b))), b_sizes) : Tensor()};
                         })) {
    node->save(a);
    node->save(b);
  }
  return result;
}

Tensor div(const Tensor& a, double b) {
  Tensor result = untracked::div(a, b);
  record("DivBackward", {&a}, {&result}, [b](const BackwardContext& ctx) { return TensorList{div(ctx.grads[0], b)}; });
  return result;
}

Tensor div(double a, const Tensor& b) {
  Tensor result = untracked::div(a, b);
  if (auto node = record("RdivBackward", {&b}, {&result}, [a](const BackwardContext& ctx) {
        const Tensor& b = ctx.saved[0];
        return TensorList{mul(div(ctx.grads[0], mul(b, b)), -a)};
      })) {
    node->save(b);
  }
  return result;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  if (autograd::casts_to_float32({&a, &b}))
    return pow(autograd::autocast_to_float32(a), autograd::autocast_to_float32(b));
  Tensor result = untracked::pow(a, b);
  if (auto node = record(
          "PowBackward", {&a, &b}, {&result}, [a_sizes = a.sizes(), b_sizes = b.sizes()](const BackwardContext& ctx) {
            const Tensor& g = ctx.grads[0];
            const Tensor &a = ctx.saved[0], &b = ctx.saved[1], &result = ctx.saved[2];
            Tensor grad_a, grad_b;
            if (ctx.needs(0)) grad_a = sum_to(mul(g, mul(b, pow(a, sub(b, 1.0)))), a_sizes);
            if (ctx.needs(1)) {
              // d/db a^b = a^b log(a), taken as 0 where a == 0 and b >= 0 (as PyTorch does).
              const Tensor zero_base = untracked::logical_and(untracked::eq(a, 0.0), untracked::ge(b, 0.0));
              grad_b = sum_to(where(zero_base, zeros_like(result), mul(g, mul(result, log(a)))), b_sizes);
            }
            return TensorList{grad_a, grad_b};
          })) {
    node->save(a);
    node->save(b);
    node->save_output(result);
  }
  return result;
}

Tensor pow(const Tensor& a, double exponent) {
  if (autograd::casts_to_float32({&a})) return pow(autograd::autocast_to_float32(a), exponent);
  Tensor result = untracked::pow(a, exponent);
  if (auto node = record("PowBackward", {&a}, {&result}, [exponent](const BackwardContext& ctx) {
        const Tensor& a = ctx.saved[0];
        if (exponent == 0) return TensorList{zeros_like(a)};
        return TensorList{mul(ctx.grads[0], mul(pow(a, exponent - 1), exponent))};
      })) {
    node->save(a);
  }
  return result;
}

Tensor pow(double base, const Tensor& exponent) {
  if (autograd::casts_to_float32({&exponent})) return pow(base, autograd::autocast_to_float32(exponent));
  Tensor result = untracked::pow(base, exponent);
  if (auto node = record("PowBackward", {&exponent}, {&result}, [base](const BackwardContext& ctx) {
        const Tensor &exponent = ctx.saved[0], &result = ctx.saved[1];
        if (base == 0) {  // 0^b: constant 0 for b > 0 (gradient 0 there, as PyTorch)
          return TensorList{
              where(untracked::ge(exponent, 0.0), zeros_like(result), mul(ctx.grads[0], mul(result, -INFINITY)))};
        }
        return TensorList{mul(ctx.grads[0], mul(result, std::log(base)))};
      })) {
    node->save(exponent);
    node->save_output(result);
  }
  return result;
}

namespace {

// maximum/minimum: the gradient goes to the chosen operand, split equally on ties.
Tensor extremum(const char* name, bool is_max, const Tensor& a, const Tensor& b) {
  Tensor result = is_max ? untracked::maximum(a, b) : untracked::minimum(a, b);
  if (auto node = record(name, {&a, &b}, {&result},
                         [is_max, a_sizes = a.sizes(), b_sizes = b.sizes()](const BackwardContext& ctx) {
                           const Tensor& g = ctx.grads[0];
                           const Tensor &a = ctx.saved[0], &b = ctx.saved[1];
                           const Tensor a_wins = as_factor(is_max ? untracked::gt(a, b) : untracked::lt(a, b), g);
                           const Tensor tie = untracked::mul(as_factor(untracked::eq(a, b), g), 0.5);
                           const Tensor share_a = untracked::add(a_wins, tie);
                           const Tensor share_b = untracked::sub(ones_like(share_a), share_a);
                           return TensorList{ctx.needs(0) ? sum_to(mul(g, share_a), a_sizes) : Tensor(),
                                             ctx.needs(1) ? sum_to(mul(g, share_b), b_sizes) : Tensor()};
                         })) {
    node->save(a);
    node->save(b);
  }
  return result;
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum("MaximumBackward", true, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum("MinimumBackward", false, a, b); }

Tensor neg(const Tensor& t) {
  Tensor result = untracked::neg(t);
  record("NegBackward", {&t}, {&result}, [](const BackwardContext& ctx) {
    if (Tensor g = ctx.take_reusable_grad(0); g.defined()) return TensorList{untracked::neg_(g)};
    return TensorList{neg(ctx.grads[0])};
  });
  return result;
}

Tensor abs(const Tensor& t) {
  return unary_of_input("AbsBackward", untracked::abs(t), t,
                        [](const Tensor& g, const Tensor& t) { return mul(g, untracked::sign(t)); });
}

Tensor sign(const Tensor& t) {
  return unary_of_input("SignBackward", untracked::sign(t), t,
                        [](const Tensor& g, const Tensor& t) { return zeros_like(t); });
}

Tensor exp(const Tensor& t) {
  if (autograd::casts_to_float32({&t})) return exp(autograd::autocast_to_float32(t));
  return unary_of_result("ExpBackward", untracked::exp(t), t,
                         [](const Tensor& g, const Tensor& r) { return mul(g, r); });
}

Tensor expm1(const Tensor& t) {
  if (autograd::casts_to_float32({&t})) return expm1(autograd::autocast_to_float32(t));
  return unary_of_result("Expm1Backward", untracked::expm1(t), t,
                         [](const Tensor& g, const Tensor& r) { return mul(g, add(r, 1.0)); });
}

Tensor log(const Tensor& t) {
  if (autograd::casts_to_float32({&t})) return log(autograd::autocast_to_float32(t));
  return unary_of_input("LogBackward", untracked::log(t), t,
                        [](const Tensor& g, const Tensor& t) { return div(g, t); });
}

Tensor log1p(const Tensor& t) {
  if (autograd::casts_to_float32({&t})) return log1p(autograd::autocast_to_float32(t));
  return unary_of_input("Log1pBackward", untracked::log1p(t), t,
                        [](const Tensor& g, const Tensor& t) { return div(g, add(t, 1.0)); });
}

Tensor sqrt(const Tensor& t) {
  return unary_of_result("SqrtBackward", untracked::sqrt(t), t,
                         [](const Tensor& g, const Tensor& r) { return div(g, mul(r, 2.0)); });
}

Tensor rsqrt(const Tensor& t) {
  if (autograd::casts_to_float32({&t})) return rsqrt(autograd::autocast_to_float32(t));
  return unary_of_result("RsqrtBackward", untracked::rsqrt(t), t,
                         [](const Tensor& g, const Tensor& r) { return mul(g, mul(pow(r, 3.0), -0.5)); });
}

Tensor sin(const Tensor& t) {
  return unary_of_input("SinBackward", untracked::sin(t), t,
                        [](const Tensor& g, const Tensor& t) { return mul(g, cos(t)); });
}

Tensor cos(const Tensor& t) {
  return unary_of_input("CosBackward", untracked::cos(t), t,
                        [](const Tensor& g, const Tensor& t) { return neg(mul(g, sin(t))); });
}

Tensor tanh(const Tensor& t) {
  return unary_of_result("TanhBackward", untracked::tanh(t), t,
                         [](const Tensor& g, const Tensor& r) { return mul(g, sub(1.0, mul(r, r))); });
}

Tensor sigmoid(const Tensor& t) {
  return unary_of_result("SigmoidBackward", untracked::sigmoid(t), t,
                         [](const Tensor& g, const Tensor& r) { return mul(g, mul(r, sub(1.0, r))); });
}

namespace {

// relu_backward(grads[0], result) for ReLU's formula and its own, into grads[0] when it may be
// (Note [Reused gradients]).
TensorList masked_by_relu(const BackwardContext& ctx, const Tensor& result) {
  if (Tensor g = ctx.take_reusable_grad(0); g.defined()) return TensorList{untracked::relu_backward_(g, result)};
  return TensorList{relu_backward(ctx.grads[0], result)};
}

}  // namespace

Tensor relu(const Tensor& t) {
  Tensor result = untracked::relu(t);
  if (auto node = record("ReluBackward", {&t}, {&result},
                         [](const BackwardContext& ctx) { return masked_by_relu(ctx, ctx.saved[0]); })) {
    node->save_output(result);
  }
  return result;
}

Tensor relu_backward(const Tensor& grad, const Tensor& result) {
  Tensor out = untracked::relu_backward(grad, result);
  // Linear in grad, with the output's mask of positives as a constant.
  if (auto node = record("ReluBackwardBackward", {&grad}, {&out},
                         [](const BackwardContext& ctx) { return masked_by_relu(ctx, ctx.saved[0]); })) {
    node->save(result);
  }
  return out;
}

Tensor gelu(const Tensor& t) {
  // d/dx x * Phi(x) = Phi(x) + x * phi(x).
  return unary_of_input("GeluBackward", untracked::gelu(t), t, [](const Tensor& g, const Tensor& x) {
    const Tensor cdf = mul(add(erf(mul(x, std::numbers::sqrt2 / 2)), 1.0), 0.5);
    const Tensor pdf = mul(exp(mul(mul(x, x), -0.5)), 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    return mul(g, add(cdf, mul(x, pdf)));
  });
}

Tensor erf(const Tensor& t) {
  return unary_of_input("ErfBackward", untracked::erf(t), t, [](const Tensor& g, const Tensor& x) {
    return mul(g, mul(exp(neg(mul(x, x))), 2 * std::numbers::inv_sqrtpi));
  });
}

Tensor clamp(const Tensor& t, std::optional<double> min, std::optional<double> max) {
  // The gradient passes strictly inside the bounds: 0 at min and max themselves (and for NaN), as
  // PyTorch 2.x's clamp with scalar bounds.
  return unary_of_input("ClampBackward", untracked::clamp(t, min, max), t,
                        [min, max](const Tensor& g, const Tensor& t) {
                          Tensor inside = ones_like(t);
                          if (min) inside = untracked::mul(inside, as_factor(untracked::gt(t, *min), t));
                          if (max) inside = untracked::mul(inside, as_factor(untracked::lt(t, *max), t));
                          return mul(g, inside);
                        });
}

Tensor eq(const Tensor& a, const Tensor& b) { return untracked::eq(a, b); }
Tensor eq(const Tensor& a, double b) { return untracked::eq(a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return untracked::ne(a, b); }
Tensor ne(const Tensor& a, double b) { return untracked::ne(a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return untracked::lt(a, b); }
Tensor lt(const Tensor& a, double b) { return untracked::lt(a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return untracked::le(a, b); }
Tensor le(const Tensor& a, double b) { return untracked::le(a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return untracked::gt(a, b); }
Tensor gt(const Tensor& a, double b) { return untracked::gt(a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return untracked::ge(a, b); }
Tensor ge(const Tensor& a, double b) { return untracked::ge(a, b); }
Tensor logical_not(const Tensor& t) { return untracked::logical_not(t); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return untracked::logical_and(a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return untracked::logical_or(a, b); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator-(double a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator/(double a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& t) { return neg(t); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }

}  // namespace distgrad
