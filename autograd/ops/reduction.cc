// Differentiable reductions and the softmax family (autograd/ops.h).
#include <algorithm>
#include <cmath>
#include <optional>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad {

using autograd::BackwardContext;
using autograd::record;
using autograd::TensorList;

namespace {

// The reduced dims in increasing order (all dims when `dims` is empty).
Shape reduced_dims(const Shape& dims, int64_t ndim) {
  Shape result;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) result.push_back(d);
    return result;
  }
  for (int64_t dim : dims) result.push_back(ndim == 0 ? 0 : wrap_dim(dim, ndim, "reduce"));
  std::sort(result.begin(), result.end());
  return result;
}

// A reduction's result (or gradient) with the reduced dims put back as size 1, so that it
// broadcasts against the input.
Tensor with_kept_dims(const Tensor& reduced, const Shape& dims, bool keepdim, int64_t input_dim) {
  if (keepdim || input_dim == 0) return reduced;
  Tensor result = reduced;
  for (int64_t d : dims) result = unsqueeze(result, d);
  return result;
}

int64_t count_of(const Shape& sizes, const Shape& dims) {
  int64_t count = 1;
  for (int64_t d : dims) count *= sizes[d];
  return count;
}

}  // namespace

Tensor sum(const Tensor& t, const Shape& dims, bool keepdim) {
  if (autograd::casts_to_float32({&t})) return sum(autograd::autocast_to_float32(t), dims, keepdim);
  Tensor result = untracked::sum(t, dims, keepdim);
  t.check_defined("sum");
  record("SumBackward", {&t}, {&result},
         [in = t.sizes(), reduced = reduced_dims(dims, t.dim()), keepdim](const BackwardContext& ctx) {
           return TensorList{expand(with_kept_dims(ctx.grads[0], reduced, keepdim, in.size()), in)};
         });
  return result;
}

Tensor mean(const Tensor& t, const Shape& dims, bool keepdim) {
  Tensor result = untracked::mean(t, dims, keepdim);
  record("MeanBackward", {&t}, {&result},
         [in = t.sizes(), reduced = reduced_dims(dims, t.dim()), keepdim](const BackwardContext& ctx) {
           const double count = static_cast<double>(count_of(in, reduced));
           return TensorList{expand(div(with_kept_dims(ctx.grads[0], reduced, keepdim, in.size()), count), in)};
         });
  return result;
}

Tensor var(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  if (!autograd::should_record({&t})) return untracked::var(t, dims, correction, keepdim);
  const Shape reduced = reduced_dims(dims, t.dim());
  const double degrees = static_cast<double>(count_of(t.sizes(), reduced) - correction);
  const Tensor centered = sub(t, mean(t, dims, /*keepdim=*/true));
  return div(sum(mul(centered, centered), dims, keepdim), degrees);
}

Tensor std(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  if (!autograd::should_record({&t})) return untracked::std(t, dims, correction, keepdim);
  return sqrt(var(t, dims, correction, keepdim));
}

namespace {

// max or min of every element: the gradient is split equally among the elements equal to it.
Tensor whole_extremum(const char* name, Tensor result, const Tensor& t) {
  if (auto node = record(name, {&t}, {&result}, [](const BackwardContext& ctx) {
        const Tensor &t = ctx.saved[0], &result = ctx.saved[1];
        const Tensor hits = untracked::to(untracked::eq(t, result), t.dtype());
        return TensorList{mul(div(hits, untracked::sum(hits)), ctx.grads[0])};
      })) {
    node->save(t);
    node->save_output(result);
  }
  return result;
}

// max or min along `dim`: the gradient goes to the position in `indices`.
ValuesIndices dim_extremum(const char* name, ValuesIndices result, const Tensor& t, int64_t dim, bool keepdim) {
  const int64_t d = t.dim() == 0 ? 0 : wrap_dim(dim, t.dim(), name);
  if (auto node = record(name, {&t}, {&result.values}, [in = t.sizes(), d, keepdim](const BackwardContext& ctx) {
        if (in.empty()) return TensorList{ctx.grads[0]};
        const Tensor indices = with_kept_dims(ctx.saved[0], {d}, keepdim, in.size());
        const Tensor grad = with_kept_dims(ctx.grads[0], {d}, keepdim, in.size());
        return TensorList{scatter_add(zeros(in, {.dtype = grad.dtype(), .device = grad.device()}), d, indices, grad)};
      })) {
    node->save(result.indices);
  }
  return result;
}

}  // namespace

Tensor max(const Tensor& t) { return whole_extremum("MaxBackward", untracked::max(t), t); }
Tensor min(const Tensor& t) { return whole_extremum("MinBackward", untracked::min(t), t); }
ValuesIndices max(const Tensor& t, int64_t dim, bool keepdim) {
  return dim_extremum("MaxBackward", untracked::max(t, dim, keepdim), t, dim, keepdim);
}
ValuesIndices min(const Tensor& t, int64_t dim, bool keepdim) {
  return dim_extremum("MinBackward", untracked::min(t, dim, keepdim), t, dim, keepdim);
}
namespace {

// amax or amin over dims: the gradient is split equally among the elements equal to the result.
Tensor dims_extremum(const char* name, Tensor result, const Tensor& t, const Shape& dims, bool keepdim) {
  if (auto node =
          record(name, {&t}, {&result}, [reduced = reduced_dims(dims, t.dim()), keepdim](const BackwardContext& ctx) {
            const Tensor &t = ctx.saved[0], &result = ctx.saved[1];
            const int64_t ndim = t.dim();
            const Tensor hits =
                untracked::to(untracked::eq(t, with_kept_dims(result, reduced, keepdim, ndim)), t.dtype());
            const Tensor share = untracked::div(hits, untracked::sum(hits, reduced, /*keepdim=*/true));
            return TensorList{mul(with_kept_dims(ctx.grads[0], reduced, keepdim, ndim), share)};
          })) {
    node->save(t);
    node->save_output(result);
  }
  return result;
}

// The product of the other elements along the last dim of `t`, for each element: the gradient of
// a product where some factors are zero, composed of differentiable ops ([..., n] -> [..., n]:
// row i of an [..., n, n] matrix holds t with element i replaced by 1).
Tensor products_of_others(const Tensor& t) {
  const int64_t n = t.size(-1);
  Shape matrix_sizes = t.sizes();
  matrix_sizes.insert(matrix_sizes.end() - 1, n);
  const Tensor diagonal = untracked::eq(untracked::unsqueeze(arange(n, {.dtype = kInt64, .device = t.device()}), 1),
                                        untracked::unsqueeze(arange(n, {.dtype = kInt64, .device = t.device()}), 0));
  const Tensor one = ones({}, {.dtype = t.dtype(), .device = t.device()});
  const Tensor others = where(diagonal, one, expand(unsqueeze(t, -2), matrix_sizes));
  return prod(others, -1);
}

// prod's gradient for `t` with `result` (the product along `dim`, or of everything when `dim` is
// absent), g having result's shape: g * result / t when no factor is zero (PyTorch's formula),
// else g times the product of the other factors.
Tensor prod_grad(const Tensor& g, const Tensor& t, const Tensor& result, std::optional<int64_t> dim, bool keepdim) {
  if (t.dim() == 0) return g;
  const Shape reduced = dim ? Shape{*dim} : reduced_dims({}, t.dim());
  const Tensor grad = with_kept_dims(g, reduced, keepdim, t.dim());
  if (!untracked::any(untracked::eq(t, 0.0))) {
    return mul(grad, div(with_kept_dims(result, reduced, keepdim, t.dim()), t));
  }
  if (!dim) return mul(grad, reshape(products_of_others(reshape(t, {-1})), t.sizes()));
  return mul(grad, transpose(products_of_others(transpose(t, *dim, -1)), *dim, -1));
}

}  // namespace

Tensor amax(const Tensor& t, const Shape& dims, bool keepdim) {
  return dims_extremum("AmaxBackward", untracked::amax(t, dims, keepdim), t, dims, keepdim);
}
Tensor amin(const Tensor& t, const Shape& dims, bool keepdim) {
  return dims_extremum("AminBackward", untracked::amin(t, dims, keepdim), t, dims, keepdim);
}

Tensor prod(const Tensor& t) {
  if (autograd::casts_to_float32({&t})) return prod(autograd::autocast_to_float32(t));
  Tensor result = untracked::prod(t);
  if (auto node = record("ProdBackward", {&t}, {&result}, [](const BackwardContext& ctx) {
        return TensorList{prod_grad(ctx.grads[0], ctx.saved[0], ctx.saved[1], std::nullopt, false)};
      })) {
    node->save(t);
    node->save_output(result);
  }
  return result;
}

Tensor prod(const Tensor& t, int64_t dim, bool keepdim) {
  if (autograd::casts_to_float32({&t})) return prod(autograd::autocast_to_float32(t), dim, keepdim);
  Tensor result = untracked::prod(t, dim, keepdim);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(t.dim(), 1), "prod");
  if (auto node = record("ProdBackward", {&t}, {&result}, [d, keepdim](const BackwardContext& ctx) {
        return TensorList{prod_grad(ctx.grads[0], ctx.saved[0], ctx.saved[1], d, keepdim)};
      })) {
    node->save(t);
    node->save_output(result);
  }
  return result;
}

namespace {

// cumsum, or its adjoint (sums from the end) with `reverse`: each is the other's gradient.
Tensor running_sum(const Tensor& t, int64_t dim, bool reverse) {
  Tensor result = untracked::cumsum(t, dim, reverse);
  record(reverse ? "CumsumBackwardBackward" : "CumsumBackward", {&t}, {&result},
         [dim, reverse](const BackwardContext& ctx) { return TensorList{running_sum(ctx.grads[0], dim, !reverse)}; });
  return result;
}

}  // namespace

Tensor cumsum(const Tensor& t, int64_t dim) {
  if (autograd::casts_to_float32({&t})) return cumsum(autograd::autocast_to_float32(t), dim);
  return running_sum(t, dim, false);
}

Tensor argmax(const Tensor& t) { return untracked::argmax(t); }
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) { return untracked::argmax(t, dim, keepdim); }
Tensor argmin(const Tensor& t) { return untracked::argmin(t); }
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim) { return untracked::argmin(t, dim, keepdim); }

Tensor logsumexp(const Tensor& t, const Shape& dims, bool keepdim) {
  if (autograd::casts_to_float32({&t})) return logsumexp(autograd::autocast_to_float32(t), dims, keepdim);
  Tensor result = untracked::logsumexp(t, dims, keepdim);
  if (auto node = record("LogsumexpBackward", {&t}, {&result},
                         [reduced = reduced_dims(dims, t.dim()), keepdim](const BackwardContext& ctx) {
                           const Tensor &t = ctx.saved[0], &result = ctx.saved[1];
                           const int64_t ndim = t.dim();
                           const Tensor softmax = exp(sub(t, with_kept_dims(result, reduced, keepdim, ndim)));
                           return TensorList{mul(with_kept_dims(ctx.grads[0], reduced, keepdim, ndim), softmax)};
                         })) {
    node->save(t);
    node->save_output(result);
  }
  return result;
}

Tensor softmax(const Tensor& t, int64_t dim) {
  if (autograd::casts_to_float32({&t})) return softmax(autograd::autocast_to_float32(t), dim);
  Tensor result = untracked::softmax(t, dim);
  if (auto node = record("SoftmaxBackward", {&t}, {&result}, [dim](const BackwardContext& ctx) {
        const Tensor &g = ctx.grads[0], &y = ctx.saved[0];
        const int64_t d = y.dim() == 0 ? 0 : dim;
        return TensorList{mul(y, sub(g, sum(mul(g, y), {d}, /*keepdim=*/true)))};
      })) {
    node->save_output(result);
  }
  return result;
}

Tensor log_softmax(const Tensor& t, int64_t dim) {
  if (autograd::casts_to_float32({&t})) return log_softmax(autograd::autocast_to_float32(t), dim);
  Tensor result = untracked::log_softmax(t, dim);
  if (auto node = record("LogSoftmaxBackward", {&t}, {&result}, [dim](const BackwardContext& ctx) {
        const Tensor &g = ctx.grads[0], &y = ctx.saved[0];
        const int64_t d = y.dim() == 0 ? 0 : dim;
        return TensorList{sub(g, mul(exp(y), sum(g, {d}, /*keepdim=*/true)))};
      })) {
    node->save_output(result);
  }
  return result;
}

Tensor norm(const Tensor& t, double p, const Shape& dims, bool keepdim) {
  if (autograd::casts_to_float32({&t})) return norm(autograd::autocast_to_float32(t), p, dims, keepdim);
  Tensor result = untracked::norm(t, p, dims, keepdim);
  if (auto node = record("NormBackward", {&t}, {&result},
                         [p, reduced = reduced_dims(dims, t.dim()), keepdim](const BackwardContext& ctx) {
                           const Tensor &t = ctx.saved[0], &result = ctx.saved[1];
                           const int64_t ndim = t.dim();
                           const Tensor g = with_kept_dims(ctx.grads[0], reduced, keepdim, ndim);
                           const Tensor n = with_kept_dims(result, reduced, keepdim, ndim);
                           if (p == 1) return TensorList{mul(g, sign(t))};
                           if (std::isinf(p)) {  // split among the elements of largest magnitude
                             const Tensor hits = untracked::to(untracked::eq(untracked::abs(t), n), t.dtype());
                             const Tensor share = untracked::div(hits, untracked::sum(hits, reduced, /*keepdim=*/true));
                             return TensorList{mul(g, mul(sign(t), share))};
                           }
                           // d|t|_p / dt = sign(t) |t|^(p-1) / |t|_p^(p-1), taken as 0 where the norm is 0.
                           const Tensor zero_norm = untracked::eq(n, 0.0);
                           const Tensor safe_norm = where(zero_norm, ones_like(n), n);
                           const Tensor direction = p == 2
                                                        ? div(t, safe_norm)
                                                        : div(mul(sign(t), pow(abs(t), p - 1)), pow(safe_norm, p - 1));
                           return TensorList{mul(g, where(zero_norm, zeros_like(direction), direction))};
                         })) {
    node->save(t);
    node->save_output(result);
  }
  return result;
}

}  // namespace distgrad
