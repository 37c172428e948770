// Argument checks shared by the op implementations (internal to core).
//
// Note [Half precision compute]
// float16 and bfloat16 tensors are computed in float32 and each op's result is rounded back once,
// as CUDA's half kernels load halves, compute in float and store rounded, and as cuBLAS's
// mixed-precision GEMM accumulates in float32: an op given half tensors runs itself on their
// float32 copies (`widened`) and converts its result back. Composite ops (softmax, var, norm,
// conv2d, ...) do so at their entry, so their intermediate results are not rounded. gemm alone
// takes half operands itself (cuBLAS's GemmEx on CUDA; on the CPU, float32 copies and sgemm).
#pragma once

#include <initializer_list>

#include "core/copy.h"
#include "core/tensor.h"

namespace distgrad::untracked::detail {

// Both defined, on one device and of one dtype; the message names `op` and both tensors.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_same_dtype_and_device(const char* op, const Tensor& a, const Tensor& b);
// The dtype `op` computes `a` and `b` in: theirs, or promote_floating's for two floating dtypes;
// other mixes are an error naming `op` and both tensors (both defined and on one device).
DType common_dtype(const char* op, const Tensor& a, const Tensor& b);
// A float32 copy of a float16 or bfloat16 tensor, else `t` itself (undefined stays undefined).
Tensor widened(const Tensor& t);
// How an op computes a half `t`: `op` on its float32 copy, the result converted back to t's dtype.
template <typename Op>
Tensor via_float32(const Tensor& t, Op&& op) {
  return to(op(widened(t)), t.dtype());
}
// Converts the defined tensors among `results` (an op's results, computed in float32) back to
// the half `dtype` of its inputs.
void round_back(DType dtype, std::initializer_list<Tensor*> results);
// A floating dtype (float32, float64, float16 or bfloat16).
void check_floating(const char* op, const Tensor& t);
// `self` can be written in place: defined and not expanded (no two elements share memory).
void check_writable(const char* op, const Tensor& self);
// `t` itself when its sizes already equal `sizes`, else an expanded view.
Tensor expand_to(const Tensor& t, const Shape& sizes);
// `src` itself, or a copy when it shares memory with `self` through a different view, so an
// in-place kernel writing `self` never reads elements it already overwrote.
Tensor unaliased_source(const Tensor& self, const Tensor& src);

}  // namespace distgrad::untracked::detail
