#include "core/copy.h"

#include "core/creation.h"
#include "core/cuda/backend.h"
#include "core/kernels.h"
#include "core/op_checks.h"

namespace distgrad::untracked {

Tensor clone(const Tensor& t) {
  t.check_defined("clone");
  Tensor out = empty(t.sizes(), {.dtype = t.dtype(), .device = t.device()});
  kernels::kernels_for(t.device()).copy(out, t);
  return out;
}

Tensor contiguous(const Tensor& t) {
  t.check_defined("contiguous");
  return t.is_contiguous() ? t : clone(t);
}

Tensor to(const Tensor& t, Device device) {
  t.check_defined("to");
  if (t.device() == device) return t;
  Tensor source = contiguous(t);
  Tensor out = empty(t.sizes(), {.dtype = t.dtype(), .device = device});
  cuda::detail::copy_bytes(out.data_ptr(), device, source.data_ptr(), source.device(), source.nbytes());
  return out;
}

Tensor to(const Tensor& t, DType dtype) {
  t.check_defined("to");
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.sizes(), {.dtype = dtype, .device = t.device()});
  kernels::kernels_for(t.device()).copy(out, t);
  return out;
}

const Tensor& copy_(const Tensor& self, const Tensor& src) {
  detail::check_writable("copy_", self);
  src.check_defined("copy_");
  Tensor source = detail::unaliased_source(self, to(src, self.device()));
  kernels::kernels_for(self.device()).copy(self, detail::expand_to(source, self.sizes()));
  self.storage().bump_version();
  return self;
}

const Tensor& fill_(const Tensor& self, double value) {
  detail::check_writable("fill_", self);
  kernels::kernels_for(self.device()).fill(self, value);
  self.storage().bump_version();
  return self;
}

const Tensor& zero_(const Tensor& self) { return fill_(self, 0); }

}  // namespace distgrad::untracked
