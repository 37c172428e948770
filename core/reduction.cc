#include "core/reduction.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/copy.h"
#include "core/creation.h"
#include "core/elementwise.h"
#include "core/indexing.h"
#include "core/kernels.h"
#include "core/op_checks.h"
#include "core/views.h"

namespace distgrad::untracked {
namespace {

using kernels::ReduceOp;

// How a reduction is handed to the `reduce` kernel: `input` is contiguous and read as
// [outer, reduced, inner]. Reduced dims that form one block of a contiguous tensor are
// reduced in place; otherwise `input` is left undefined, to be the tensor copied with the kept
// dims first (permuted_input), unless run_reduction splits the reduction instead.
struct ReducePlan {
  Tensor input;
  int64_t outer = 1, reduced = 1, inner = 1;
  Shape kept_sizes;     // result sizes without the reduced dims
  Shape keepdim_sizes;  // result sizes with each reduced dim as 1
  Shape reduced_dims;   // ascending, wrapped
};

ReducePlan plan_reduction(const Tensor& t, const Shape& dims, const char* op) {
  t.check_defined(op);
  const int64_t ndim = t.dim();
  std::vector<bool> is_reduced(ndim, dims.empty());
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, ndim, op);
    if (ndim == 0) continue;
    DISTGRAD_CHECK(!is_reduced[d], op, ": dimension ", d, " appears twice in dims ", shape_str(dims));
    is_reduced[d] = true;
  }
  ReducePlan plan;
  int64_t first = ndim, last = -1;
  for (int64_t d = 0; d < ndim; ++d) {
    plan.keepdim_sizes.push_back(is_reduced[d] ? 1 : t.size(d));
    if (is_reduced[d]) {
      first = std::min(first, d);
      last = d;
      plan.reduced *= t.size(d);
      plan.reduced_dims.push_back(d);
    } else {
      plan.kept_sizes.push_back(t.size(d));
    }
  }
  bool one_block = true;
  for (int64_t d = first; d <= last; ++d) one_block = one_block && is_reduced[d];
  if (one_block) {
    plan.input = contiguous(t);
    for (int64_t d = 0; d < first && d < ndim; ++d) plan.outer *= t.size(d);
    for (int64_t d = last + 1; d < ndim; ++d) plan.inner *= t.size(d);
    if (last < 0) plan.outer = t.numel();  // nothing reduced (a 0-dim tensor)
    return plan;
  }
  plan.outer = shape_numel(plan.kept_sizes);
  return plan;
}

// The input of a plan whose reduced dims are not one block: the kept dims first, then the
// reduced ones, copied contiguous.
Tensor permuted_input(const Tensor& t, const ReducePlan& plan) {
  Shape order;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (std::find(plan.reduced_dims.begin(), plan.reduced_dims.end(), d) == plan.reduced_dims.end()) {
      order.push_back(d);
    }
  }
  order.insert(order.end(), plan.reduced_dims.begin(), plan.reduced_dims.end());
  return contiguous(permute(t, order));
}

// The reduced dims of a plan whose reduced dims are not one block, as the last block of adjacent
// ones and the others before it: reducing the block in place, then the others of that smaller
// result, avoids copying the input permuted (a sum over {0, 2, 3} of NCHW: {2, 3}, then {0}).
std::pair<Shape, Shape> last_block_and_others(const ReducePlan& plan) {
  auto block_start = plan.reduced_dims.end() - 1;
  while (block_start != plan.reduced_dims.begin() && *(block_start - 1) == *block_start - 1) --block_start;
  return {Shape(block_start, plan.reduced_dims.end()), Shape(plan.reduced_dims.begin(), block_start)};
}

// Runs the reduce kernel; `indices` is filled too when requested (kMax/kMin only).
ValuesIndices run_reduction(ReduceOp op, const Tensor& t, const Shape& dims, bool keepdim, bool with_indices,
                            const char* name) {
  if (is_half(t.dtype())) {
    ValuesIndices result = run_reduction(op, detail::widened(t), dims, keepdim, with_indices, name);
    result.values = to(result.values, t.dtype());
    return result;
  }
  ReducePlan plan = plan_reduction(t, dims, name);
  const bool scattered = !plan.input.defined();
  if (scattered && !with_indices && plan.reduced > 0) {
    const auto [last_block, others] = last_block_and_others(plan);
    const Tensor partial = run_reduction(op, t, last_block, /*keepdim=*/true, false, name).values;
    const Tensor result = run_reduction(op, partial, others, /*keepdim=*/true, false, name).values;
    return {keepdim ? result : reshape(result, plan.kept_sizes), {}};
  }
  if (scattered) plan.input = permuted_input(t, plan);
  const Shape& sizes = keepdim ? plan.keepdim_sizes : plan.kept_sizes;
  const TensorOptions options{.dtype = plan.input.dtype(), .device = t.device()};
  ValuesIndices result{empty(sizes, options), {}};
  if (with_indices) result.indices = empty(sizes, {.dtype = kInt64, .device = t.device()});
  if (plan.outer * plan.inner == 0) return result;
  if (plan.reduced == 0) {
    DISTGRAD_CHECK(op == ReduceOp::kSum || op == ReduceOp::kProd, name,
                   ": cannot reduce over an empty dimension of a tensor of shape ", shape_str(t.sizes()));
    fill_(result.values, op == ReduceOp::kSum ? 0 : 1);
    return result;
  }
  kernels::kernels_for(t.device())
      .reduce(op, result.values, result.indices, plan.input, plan.outer, plan.reduced, plan.inner);
  return result;
}

// sum and prod of bool count in int64, as in PyTorch.
Tensor numeric(const Tensor& t, const char* op) {
  t.check_defined(op);
  return t.dtype() == kBool ? to(t, kInt64) : t;
}

void check_orderable(const Tensor& t, const char* op) {
  t.check_defined(op);
  DISTGRAD_CHECK(t.dtype() != kBool, op, ": expected a numeric tensor, found a ", t.describe());
}

int64_t reduced_count(const Tensor& t, const Shape& dims) {
  if (dims.empty()) return t.numel();
  int64_t count = 1;
  for (int64_t dim : dims) count *= t.dim() == 0 ? 1 : t.size(dim);
  return count;
}

}  // namespace

Tensor sum(const Tensor& t, const Shape& dims, bool keepdim) {
  return run_reduction(ReduceOp::kSum, numeric(t, "sum"), dims, keepdim, false, "sum").values;
}

Tensor sum_of_product(const Tensor& a, const Tensor& b, const Shape& dims, bool keepdim) {
  detail::check_same_dtype_and_device("sum_of_product", a, b);
  DISTGRAD_CHECK(a.sizes() == b.sizes(), "sum_of_product: expected tensors of one shape, found ", shape_str(a.sizes()),
                 " and ", shape_str(b.sizes()));
  if (is_half(a.dtype())) {
    return to(sum_of_product(detail::widened(a), detail::widened(b), dims, keepdim), a.dtype());
  }
  const auto kernel = kernels::kernels_for(a.device()).reduce_products;
  if (kernel == nullptr || (a.dtype() != kFloat32 && a.dtype() != kFloat64)) return sum(mul(a, b), dims, keepdim);
  ReducePlan plan = plan_reduction(a, dims, "sum_of_product");
  if (!plan.input.defined()) {  // the last block of reduced dims with the product, then the others
    const auto [last_block, others] = last_block_and_others(plan);
    const Tensor result = sum(sum_of_product(a, b, last_block, /*keepdim=*/true), others, /*keepdim=*/true);
    return keepdim ? result : reshape(result, plan.kept_sizes);
  }
  Tensor result = empty(keepdim ? plan.keepdim_sizes : plan.kept_sizes, {.dtype = a.dtype(), .device = a.device()});
  if (plan.outer * plan.inner == 0) return result;
  if (plan.reduced == 0) return fill_(result, 0);
  kernel(result, plan.input, contiguous(b), plan.outer, plan.reduced, plan.inner);
  return result;
}

Shape sum_to_dims(const Shape& from, const Shape& to, const char* op) {
  const int64_t ndim = static_cast<int64_t>(from.size()), leading = ndim - static_cast<int64_t>(to.size());
  DISTGRAD_CHECK(leading >= 0, op, ": cannot sum a tensor of shape ", shape_str(from), " to the larger shape ",
                 shape_str(to));
  Shape dims;
  for (int64_t d = 0; d < ndim; ++d) {
    if (d < leading) {
      dims.push_back(d);
      continue;
    }
    const int64_t target = to[d - leading];
    DISTGRAD_CHECK(target == from[d] || target == 1, op, ": cannot sum a tensor of shape ", shape_str(from),
                   " to shape ", shape_str(to), " (dimension ", d, ": ", from[d], " vs ", target, ")");
    if (target == 1 && from[d] != 1) dims.push_back(d);
  }
  return dims;
}

Tensor mean(const Tensor& t, const Shape& dims, bool keepdim) {
  detail::check_floating("mean", t);
  if (is_half(t.dtype())) return detail::via_float32(t, [&](const Tensor& f) { return mean(f, dims, keepdim); });
  return div(sum(t, dims, keepdim), static_cast<double>(reduced_count(t, dims)));
}

Tensor var(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  detail::check_floating("var", t);
  if (is_half(t.dtype())) {
    return detail::via_float32(t, [&](const Tensor& f) { return var(f, dims, correction, keepdim); });
  }
  const Tensor centered = sub(t, mean(t, dims, true));
  const int64_t degrees = std::max<int64_t>(0, reduced_count(t, dims) - correction);
  return div(sum(mul(centered, centered), dims, keepdim), static_cast<double>(degrees));
}

Tensor std(const Tensor& t, const Shape& dims, int64_t correction, bool keepdim) {
  detail::check_floating("std", t);
  if (is_half(t.dtype())) {
    return detail::via_float32(t, [&](const Tensor& f) { return std(f, dims, correction, keepdim); });
  }
  return sqrt(var(t, dims, correction, keepdim));
}

Tensor max(const Tensor& t) {
  check_orderable(t, "max");
  return run_reduction(ReduceOp::kMax, t, {}, false, false, "max").values;
}

ValuesIndices max(const Tensor& t, int64_t dim, bool keepdim) {
  check_orderable(t, "max");
  return run_reduction(ReduceOp::kMax, t, {dim}, keepdim, true, "max");
}

Tensor min(const Tensor& t) {
  check_orderable(t, "min");
  return run_reduction(ReduceOp::kMin, t, {}, false, false, "min").values;
}

ValuesIndices min(const Tensor& t, int64_t dim, bool keepdim) {
  check_orderable(t, "min");
  return run_reduction(ReduceOp::kMin, t, {dim}, keepdim, true, "min");
}

Tensor amax(const Tensor& t, const Shape& dims, bool keepdim) {
  check_orderable(t, "amax");
  return run_reduction(ReduceOp::kMax, t, dims, keepdim, false, "amax").values;
}

Tensor amin(const Tensor& t, const Shape& dims, bool keepdim) {
  check_orderable(t, "amin");
  return run_reduction(ReduceOp::kMin, t, dims, keepdim, false, "amin").values;
}

Tensor prod(const Tensor& t) {
  return run_reduction(ReduceOp::kProd, numeric(t, "prod"), {}, false, false, "prod").values;
}

Tensor prod(const Tensor& t, int64_t dim, bool keepdim) {
  return run_reduction(ReduceOp::kProd, numeric(t, "prod"), {dim}, keepdim, false, "prod").values;
}

Tensor cumsum(const Tensor& t, int64_t dim, bool reverse) {
  if (t.defined() && is_half(t.dtype())) {
    return detail::via_float32(t, [&](const Tensor& f) { return cumsum(f, dim, reverse); });
  }
  const Tensor input = contiguous(numeric(t, "cumsum"));
  const int64_t ndim = input.dim();
  const int64_t d = wrap_dim(dim, std::max<int64_t>(ndim, 1), "cumsum");  // 0 or -1 for a 0-dim tensor
  Tensor result = empty(input.sizes(), {.dtype = input.dtype(), .device = input.device()});
  if (input.numel() == 0) return result;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= input.size(i);
  for (int64_t i = d + 1; i < ndim; ++i) inner *= input.size(i);
  const int64_t length = ndim == 0 ? 1 : input.size(d);
  kernels::kernels_for(input.device()).cumsum(result, input, outer, length, inner, reverse);
  return result;
}

Tensor argmax(const Tensor& t) {
  check_orderable(t, "argmax");
  return run_reduction(ReduceOp::kMax, reshape(t, {-1}), {0}, false, true, "argmax").indices;
}

Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) { return max(t, dim, keepdim).indices; }

Tensor argmin(const Tensor& t) {
  check_orderable(t, "argmin");
  return run_reduction(ReduceOp::kMin, reshape(t, {-1}), {0}, false, true, "argmin").indices;
}

Tensor argmin(const Tensor& t, int64_t dim, bool keepdim) { return min(t, dim, keepdim).indices; }

Tensor logsumexp(const Tensor& t, const Shape& dims, bool keepdim) {
  detail::check_floating("logsumexp", t);
  if (is_half(t.dtype())) return detail::via_float32(t, [&](const Tensor& f) { return logsumexp(f, dims, keepdim); });
  Tensor shift = run_reduction(ReduceOp::kMax, t, dims, true, false, "logsumexp").values;
  // An infinite maximum would turn exp(t - shift) into NaN; shift by 0 there instead.
  masked_fill_(shift, eq(abs(shift), std::numeric_limits<double>::infinity()), 0);
  Tensor result = add(log(sum(exp(sub(t, shift)), dims, true)), shift);
  return keepdim ? result : reshape(result, plan_reduction(t, dims, "logsumexp").kept_sizes);
}

Tensor softmax(const Tensor& t, int64_t dim) {
  detail::check_floating("softmax", t);
  if (is_half(t.dtype())) return detail::via_float32(t, [&](const Tensor& f) { return softmax(f, dim); });
  const Tensor shifted = exp(sub(t, max(t, dim, true).values));
  return div(shifted, sum(shifted, {dim}, true));
}

Tensor log_softmax(const Tensor& t, int64_t dim) {
  detail::check_floating("log_softmax", t);
  if (is_half(t.dtype())) return detail::via_float32(t, [&](const Tensor& f) { return log_softmax(f, dim); });
  return sub(t, logsumexp(t, {dim}, true));
}

Tensor norm(const Tensor& t, double p, const Shape& dims, bool keepdim) {
  detail::check_floating("norm", t);
  DISTGRAD_CHECK(p > 0, "norm: expected p > 0 (or infinity), found ", p);
  if (is_half(t.dtype())) return detail::via_float32(t, [&](const Tensor& f) { return norm(f, p, dims, keepdim); });
  const Tensor magnitude = abs(t);
  if (std::isinf(p)) return run_reduction(ReduceOp::kMax, magnitude, dims, keepdim, false, "norm").values;
  if (p == 1) return sum(magnitude, dims, keepdim);
  if (p == 2) return sqrt(sum(mul(t, t), dims, keepdim));
  return pow(sum(pow(magnitude, p), dims, keepdim), 1.0 / p);
}

bool any(const Tensor& t) {
  t.check_defined("any");
  DISTGRAD_CHECK(t.dtype() == kBool, "any: expected a bool tensor, found a ", t.describe());
  return sum(t).item<int64_t>() > 0;
}

bool all(const Tensor& t) {
  t.check_defined("all");
  DISTGRAD_CHECK(t.dtype() == kBool, "all: expected a bool tensor, found a ", t.describe());
  return sum(t).item<int64_t>() == t.numel();
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  detail::check_same_dtype_and_device("allclose", a, b);
  if (a.sizes() != b.sizes()) return false;
  if (is_half(a.dtype())) return allclose(detail::widened(a), detail::widened(b), rtol, atol, equal_nan);
  if (!is_floating(a.dtype())) return equal(a, b);
  const Tensor error = abs(sub(a, b));
  // An infinite error is never close, even within the infinite tolerance rtol * |inf|.
  const Tensor close =
      logical_and(le(error, add(mul(abs(b), rtol), atol)), lt(error, std::numeric_limits<double>::infinity()));
  const Tensor same = eq(a, b);  // covers equal infinities
  if (equal_nan) return all(logical_or(logical_or(close, same), logical_and(ne(a, a), ne(b, b))));
  return all(logical_or(close, same));
}

bool equal(const Tensor& a, const Tensor& b) {
  detail::check_same_device("equal", a, b);
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() && all(eq(a, b));
}

}  // namespace distgrad::untracked
