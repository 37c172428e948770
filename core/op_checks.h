// Argument checks shared by the op implementations (internal to core).
#pragma once

#include "core/tensor.h"

namespace distgrad::untracked::detail {

// Both defined, on one device and of one dtype; the message names `op` and both tensors.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_same_dtype_and_device(const char* op, const Tensor& a, const Tensor& b);
// A floating dtype (float32 or float64).
void check_floating(const char* op, const Tensor& t);
// `self` can be written in place: defined and not expanded (no two elements share memory).
void check_writable(const char* op, const Tensor& self);
// `t` itself when its sizes already equal `sizes`, else an expanded view.
Tensor expand_to(const Tensor& t, const Shape& sizes);
// `src` itself, or a copy when it shares memory with `self` through a different view, so an
// in-place kernel writing `self` never reads elements it already overwrote.
Tensor unaliased_source(const Tensor& self, const Tensor& src);

}  // namespace distgrad::untracked::detail
