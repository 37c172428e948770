// Ops that combine tensors or pick elements by index; each returns new memory.
//
// Index tensors are int64 and every index is bounds-checked (an out-of-range index is an
// Error naming the op, the index and the valid range).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace distgrad::untracked {

// Joins tensors of one dtype and device along an existing dim (all other sizes equal).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Joins same-shaped tensors along a new dim.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Entries of `index` (1-D) along dim.
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);
// out[i][j] = t[index[i][j]][j] for dim 0 (and likewise for any dim); index has t's rank and,
// outside dim, sizes no larger than t's.
Tensor gather(const Tensor& t, int64_t dim, const Tensor& index);
// A copy of self with src[p] added at self[..., index[p], ...] along dim (duplicates accumulate).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
const Tensor& scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// Elements of t where mask (bool, broadcast to t) is false, `value` where it is true.
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
const Tensor& masked_fill_(const Tensor& self, const Tensor& mask, double value);
// condition ? a : b, broadcasting all three.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// indices (int64, any shape) -> tensor of shape [..., num_classes] with a single 1 in each row
// (int64 as in PyTorch); num_classes = -1 uses max(indices) + 1.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1, DType dtype = kInt64);

}  // namespace distgrad::untracked
