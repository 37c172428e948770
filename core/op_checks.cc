#include "core/op_checks.h"

#include "core/copy.h"
#include "core/views.h"

namespace distgrad::untracked::detail {

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  a.check_defined(op);
  b.check_defined(op);
  DISTGRAD_CHECK(a.device() == b.device(), op, ": expected both tensors on one device, found a ", a.describe(),
                 " and a ", b.describe());
}

void check_same_dtype_and_device(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, a, b);
  DISTGRAD_CHECK(a.dtype() == b.dtype(), op, ": expected tensors of one dtype, found a ", a.describe(), " and a ",
                 b.describe(), " (convert one with distgrad::to(t, dtype))");
}

DType common_dtype(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, a, b);
  if (a.dtype() == b.dtype()) return a.dtype();
  DISTGRAD_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), op, ": expected tensors of one dtype (or two ",
                 "floating ones), found a ", a.describe(), " and a ", b.describe(),
                 " (convert one with distgrad::to(t, dtype))");
  return promote_floating(a.dtype(), b.dtype());
}

Tensor widened(const Tensor& t) { return t.defined() && is_half(t.dtype()) ? to(t, kFloat32) : t; }

void round_back(DType dtype, std::initializer_list<Tensor*> results) {
  for (Tensor* result : results) {
    if (result->defined()) *result = to(*result, dtype);
  }
}

void check_floating(const char* op, const Tensor& t) {
  t.check_defined(op);
  DISTGRAD_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, found a ", t.describe());
}

void check_writable(const char* op, const Tensor& self) {
  self.check_defined(op);
  for (int64_t d = 0; d < self.dim(); ++d) {
    DISTGRAD_CHECK(self.stride(d) != 0 || self.size(d) <= 1, op,
                   ": cannot write in place into an expanded tensor (shape ", shape_str(self.sizes()), ", strides ",
                   shape_str(self.strides()), "); clone it first");
  }
}

Tensor expand_to(const Tensor& t, const Shape& sizes) { return t.sizes() == sizes ? t : expand(t, sizes); }

Tensor unaliased_source(const Tensor& self, const Tensor& src) {
  const bool same_memory = self.storage().data() == src.storage().data();
  const bool same_view = self.offset() == src.offset() && self.sizes() == src.sizes() &&
                         self.strides() == src.strides() && self.dtype() == src.dtype();
  return same_memory && !same_view ? clone(src) : src;
}

}  // namespace distgrad::untracked::detail
