// Shapes and strides, and the index arithmetic shared by every op.
//
// Strides are counted in elements, not bytes, as in PyTorch.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"

namespace distgrad {

// Sizes or strides of a tensor; up to six dimensions live inline (no allocation).
using Shape = absl::InlinedVector<int64_t, 6>;

// "[2, 3, 4]".
std::string shape_str(const Shape& shape);

// Product of the sizes (1 for a 0-dim shape).
int64_t shape_numel(const Shape& shape);

// Row-major strides, in elements, for a tensor of `sizes`.
Shape contiguous_strides(const Shape& sizes);

// Maps a possibly negative `dim` into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

// NumPy broadcasting of two shapes; throws naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace distgrad
