// Reductions over all dims or the given ones, with keepdim, and the softmax family.
//
// `dims` empty means every dim. Sums of float32 accumulate in float64. sum, prod and cumsum of bool
// or int64 give int64; mean, var, std, logsumexp, softmax and norm need a floating dtype.
//
//   Tensor total = untracked::sum(x);                          // 0-dim
//   Tensor rows  = untracked::mean(x, {1}, /*keepdim=*/true);  // [m, 1]
//   auto [values, indices] = untracked::max(x, 1);
#pragma once

#include "core/tensor.h"

namespace distgrad {

struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};

namespace untracked {

Tensor sum(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
// sum(a * b, dims, keepdim) for a and b of one shape, dtype and device; on devices with the
// kernel (the CPU), in float32 and float64, without the product's tensor, to the same bits.
Tensor sum_of_product(const Tensor& a, const Tensor& b, const Shape& dims = {}, bool keepdim = false);
// The dims a sum of a tensor of shape `from` reduces to get shape `to` (sum_to, a broadcast's
// adjoint): the leading dims `to` lacks and those where `to` has 1; errors name `op`.
Shape sum_to_dims(const Shape& from, const Shape& to, const char* op);
Tensor mean(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1), as torch.var.
Tensor var(const Tensor& t, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& t, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// Largest / smallest element (0-dim), or along one dim with the index of the first extreme.
Tensor max(const Tensor& t);
ValuesIndices max(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor min(const Tensor& t);
ValuesIndices min(const Tensor& t, int64_t dim, bool keepdim = false);
// The largest / smallest value over `dims` (every dim when empty), without indices (torch.amax).
Tensor amax(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
// The product of every element (0-dim), or along one dim; of bool or int64, in int64.
Tensor prod(const Tensor& t);
Tensor prod(const Tensor& t, int64_t dim, bool keepdim = false);
// Running sums along `dim` (torch.cumsum), of bool or int64 in int64; with `reverse`, from the
// end: out[i] = t[i] + ... + t[n - 1] (the adjoint of cumsum).
Tensor cumsum(const Tensor& t, int64_t dim, bool reverse = false);
// Index into the flattened tensor (0-dim int64), or along one dim.
Tensor argmax(const Tensor& t);
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& t);
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim = false);
// log(sum(exp(t))) computed stably.
Tensor logsumexp(const Tensor& t, const Shape& dims, bool keepdim = false);
Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);
// The p-norm (p > 0, or infinity for the largest absolute value) over dims.
Tensor norm(const Tensor& t, double p = 2, const Shape& dims = {}, bool keepdim = false);

// True when every element is true (bool tensors).
bool all(const Tensor& t);
bool any(const Tensor& t);
// Same shape and |a - b| <= atol + rtol * |b| everywhere. NaNs are close only to NaNs, and
// only with `equal_nan` (as in PyTorch).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Same shape, dtype and values.
bool equal(const Tensor& a, const Tensor& b);

}  // namespace untracked
}  // namespace distgrad
