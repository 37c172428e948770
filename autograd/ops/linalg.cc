// Differentiable matrix products (autograd/ops.h).
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad {

using autograd::BackwardContext;
using autograd::record;
using autograd::TensorList;

namespace {

// Whether `m` is the transpose of a contiguous matrix, as t(weight) in nn::Linear.
bool is_transposed_contiguous(const Tensor& m) {
  return m.dim() == 2 && m.size(0) > 1 && m.size(1) > 1 && m.stride(0) == 1 && m.stride(1) == m.size(0);
}

// The gradients of the matrices a and b in a @ b, given g: g @ t(b) and t(a) @ g, each computed
// in the layout of its operand. When the operand is a transposed contiguous matrix (t(weight)),
// the product is computed transposed, so the gradient that reaches the contiguous matrix through
// the transpose is contiguous and AccumulateGrad keeps it without a copy (as PyTorch's
// mm_mat2_backward does).
Tensor grad_of_left(const Tensor& g, const Tensor& a, const Tensor& b) {
  return is_transposed_contiguous(a) ? t(matmul(b, t(g))) : matmul(g, t(b));
}
Tensor grad_of_right(const Tensor& g, const Tensor& a, const Tensor& b) {
  return is_transposed_contiguous(b) ? t(matmul(t(g), a)) : matmul(t(a), g);
}

// x * factor, or x itself when factor is 1.
Tensor scaled(const Tensor& x, double factor) { return factor == 1 ? x : mul(x, factor); }

// The product of two operands of 2 or 3 dims (a 2-D one broadcast over the other's batch),
// recorded with the gradients of each, summed over the batch where an operand was broadcast.
Tensor batched_matmul(const Tensor& a, const Tensor& b) {
  Tensor result = untracked::matmul(a, b);
  if (auto node = record("MatmulBackward", {&a, &b}, {&result},
                         [a_sizes = a.sizes(), b_sizes = b.sizes()](const BackwardContext& ctx) {
                           const Tensor& g = ctx.grads[0];
                           const Tensor &a = ctx.saved[0], &b = ctx.saved[1];
                           if (a.dim() == 2 && b.dim() == 2) {
                             return TensorList{ctx.needs(0) ? grad_of_left(g, a, b) : Tensor(),
                                               ctx.needs(1) ? grad_of_right(g, a, b) : Tensor()};
                           }
                           return TensorList{
                               ctx.needs(0) ? sum_to(matmul(g, transpose(b, -1, -2)), a_sizes) : Tensor(),
                               ctx.needs(1) ? sum_to(matmul(transpose(a, -1, -2), g), b_sizes) : Tensor()};
                         })) {
    node->save(a);
    node->save(b);
  }
  return result;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autograd::casts_to_lower_precision({&a, &b}))
    return matmul(autograd::autocast_to_lower_precision(a), autograd::autocast_to_lower_precision(b));
  if (!autograd::should_record({&a, &b})) return untracked::matmul(a, b);
  a.check_defined("matmul");
  b.check_defined("matmul");
  if (a.dim() == 1 && b.dim() == 1) {  // dot product: a 0-dim result
    Tensor result = untracked::matmul(a, b);
    if (auto node = record("DotBackward", {&a, &b}, {&result}, [](const BackwardContext& ctx) {
          const Tensor& g = ctx.grads[0];
          return TensorList{ctx.needs(0) ? mul(g, ctx.saved[1]) : Tensor(),
                            ctx.needs(1) ? mul(g, ctx.saved[0]) : Tensor()};
        })) {
      node->save(a);
      node->save(b);
    }
    return result;
  }
  // A vector operand becomes a one-row (or one-column) matrix, and that dim is dropped again.
  const Tensor lhs = a.dim() == 1 ? unsqueeze(a, 0) : a;
  const Tensor rhs = b.dim() == 1 ? unsqueeze(b, 1) : b;
  Tensor result = batched_matmul(lhs, rhs);
  if (a.dim() == 1) result = squeeze(result, -2);
  if (b.dim() == 1) result = squeeze(result, -1);
  return result;
}

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha) {
  if (autograd::casts_to_lower_precision({&bias, &a, &b}))
    return addmm(autograd::autocast_to_lower_precision(bias), autograd::autocast_to_lower_precision(a),
                 autograd::autocast_to_lower_precision(b), beta, alpha);
  Tensor result = untracked::addmm(bias, a, b, beta, alpha);
  if (auto node = record("AddmmBackward", {&bias, &a, &b}, {&result},
                         [bias_sizes = bias.sizes(), beta, alpha](const BackwardContext& ctx) {
                           const Tensor& g = ctx.grads[0];
                           const Tensor &a = ctx.saved[0], &b = ctx.saved[1];
                           return TensorList{ctx.needs(0) ? sum_to(scaled(g, beta), bias_sizes) : Tensor(),
                                             ctx.needs(1) ? scaled(grad_of_left(g, a, b), alpha) : Tensor(),
                                             ctx.needs(2) ? scaled(grad_of_right(g, a, b), alpha) : Tensor()};
                         })) {
    node->save(a);
    node->save(b);
  }
  return result;
}

Tensor outer(const Tensor& a, const Tensor& b) {
  Tensor result = untracked::outer(a, b);
  if (auto node = record("OuterBackward", {&a, &b}, {&result}, [](const BackwardContext& ctx) {
        const Tensor& g = ctx.grads[0];
        return TensorList{ctx.needs(0) ? matmul(g, ctx.saved[1]) : Tensor(),
                          ctx.needs(1) ? matmul(t(g), ctx.saved[0]) : Tensor()};
      })) {
    node->save(a);
    node->save(b);
  }
  return result;
}

}  // namespace distgrad
