// Differentiable matrix products (autograd/ops.h).
#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad {

using autograd::BackwardContext;
using autograd::record;
using autograd::TensorList;

namespace {

// The product of two operands of 2 or 3 dims (a 2-D one broadcast over the other's batch),
// recorded with the gradients of each, summed over the batch where an operand was broadcast.
Tensor batched_matmul(const Tensor& a, const Tensor& b) {
  Tensor result = ops::matmul(a, b);
  if (auto node = record("MatmulBackward", {&a, &b}, {&result},
                         [a_sizes = a.sizes(), b_sizes = b.sizes()](const BackwardContext& ctx) {
                           const Tensor& g = ctx.grads[0];
                           const Tensor &a = ctx.saved[0], &b = ctx.saved[1];
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
  if (!autograd::should_record({&a, &b})) return ops::matmul(a, b);
  a.check_defined("matmul");
  b.check_defined("matmul");
  if (a.dim() == 1 && b.dim() == 1) {  // dot product: a 0-dim result
    Tensor result = ops::matmul(a, b);
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
  Tensor result = ops::addmm(bias, a, b, beta, alpha);
  if (auto node = record("AddmmBackward", {&bias, &a, &b}, {&result},
                         [bias_sizes = bias.sizes(), beta, alpha](const BackwardContext& ctx) {
                           const Tensor& g = ctx.grads[0];
                           const Tensor &a = ctx.saved[0], &b = ctx.saved[1];
                           return TensorList{ctx.needs(0) ? sum_to(mul(g, beta), bias_sizes) : Tensor(),
                                             ctx.needs(1) ? mul(matmul(g, t(b)), alpha) : Tensor(),
                                             ctx.needs(2) ? mul(matmul(t(a), g), alpha) : Tensor()};
                         })) {
    node->save(a);
    node->save(b);
  }
  return result;
}

Tensor outer(const Tensor& a, const Tensor& b) {
  Tensor result = ops::outer(a, b);
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
