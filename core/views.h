// Views: new shapes, strides and offsets over the same storage (no data is copied, except by
// reshape/flatten when the strides do not allow a view). Negative dims count from the end.
//
//   Tensor x = distgrad::arange(6).to(...);
//   Tensor m = untracked::view(x, {2, 3});          // shares x's storage
//   Tensor c = untracked::select(m, 1, 0);          // column 0, shape [2]
#pragma once

#include <vector>

#include "core/tensor.h"

namespace distgrad::untracked {

// Any strides and offset over t's storage (checked to fit inside it).
Tensor as_strided(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset);
// Same elements in a new shape; one size may be -1. view throws when t's strides do not allow
// a view; reshape copies then.
Tensor view(const Tensor& t, const Shape& sizes);
Tensor reshape(const Tensor& t, const Shape& sizes);
// Merges dims start..end into one.
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
// Removes all size-1 dims, or the given one (a no-op when its size is not 1, as in PyTorch).
Tensor squeeze(const Tensor& t);
Tensor squeeze(const Tensor& t, int64_t dim);
// Inserts a size-1 dim at `dim` (in [-dim()-1, dim()]).
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
// dims is a permutation of 0..dim()-1.
Tensor permute(const Tensor& t, const Shape& dims);
// Transpose of a matrix (a 0-D or 1-D tensor is returned as is).
Tensor t(const Tensor& t);
// Broadcasts size-1 dims to `sizes` with stride 0; -1 keeps a size; new dims may be prepended.
Tensor expand(const Tensor& t, const Shape& sizes);
// Elements start, start+step, ... before end along dim (bounds clamped as in Python slicing).
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
// `length` elements from `start` along dim (must fit).
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
// Index `index` of dim, removing that dim.
Tensor select(const Tensor& t, int64_t dim, int64_t index);
// select(t, dim, i) for every i.
std::vector<Tensor> unbind(const Tensor& t, int64_t dim = 0);
// Pieces of `split_size` along dim (the last may be smaller).
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim = 0);
// Pieces of the given sizes along dim; they must add up to t.size(dim).
std::vector<Tensor> split_with_sizes(const Tensor& t, const Shape& split_sizes, int64_t dim = 0);
// At most `chunks` pieces of equal size along dim (the last may be smaller).
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim = 0);

}  // namespace distgrad::untracked
