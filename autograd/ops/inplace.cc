// Differentiable in-place ops (autograd/ops.h).
//
// Note [Recorded in-place ops]
// Without grad mode, or when neither self nor the other operands require grad, an in-place op
// is the core kernel and nothing else. Otherwise it is recorded as its out-of-place twin applied
// to a clone of self (so that formulas which need the old value of self still find it), the
// result is written into self, and self takes over the result's history: self is now the
// output of that op. This is refused, with an error, for a leaf that requires grad (its grad
// would refer to values that no longer exist; PyTorch refuses too) and for a tensor whose
// storage other tensors share (a view or the base of a view: their histories would not see
// the write).
#include "autograd/autograd_meta.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad {
namespace {

using autograd::meta_of;

// Runs `kernel` (the core in-place op), or records `out_of_place(clone of self, operands...)`
// into self when the op must be recorded (Note [Recorded in-place ops]).
template <typename Kernel, typename OutOfPlace>
const Tensor& in_place(const char* op, const Tensor& self, std::initializer_list<const Tensor*> others, Kernel kernel,
                       OutOfPlace out_of_place) {
  self.check_defined(op);
  std::vector<const Tensor*> operands{&self};
  operands.insert(operands.end(), others.begin(), others.end());
  bool record = autograd::GradMode::is_enabled();
  if (record) {
    record = false;
    for (const Tensor* operand : operands) record = record || (operand->defined() && autograd::requires_grad(*operand));
  }
  if (const autograd::AutogradMeta* meta = meta_of(self); meta != nullptr && autograd::GradMode::is_enabled()) {
    DISTGRAD_CHECK(!(meta->requires_grad && !meta->grad_fn), op, ": a leaf ", self.describe(),
                   " that requires grad cannot be modified in place while grad mode is on (wrap the update in "
                   "autograd::NoGradGuard, or use the out-of-place op)");
  }
  if (!record) {
    kernel();
    return self;
  }
  DISTGRAD_CHECK(self.storage().use_count() == 1, op, ": cannot record an in-place op on a ", self.describe(),
                 " whose storage other tensors share (a view, the base of a view, or a tensor saved for backward); "
                 "use the out-of-place op");
  const Tensor result = out_of_place(clone(self));
  DISTGRAD_CHECK(result.sizes() == self.sizes(), op, ": the result of shape ", shape_str(result.sizes()),
                 " cannot be written into self of shape ", shape_str(self.sizes()));
  untracked::copy_(self, result);
  autograd::AutogradMeta& self_meta = autograd::materialize_meta(self);
  const autograd::AutogradMeta* result_meta = meta_of(result);
  self_meta.grad_fn = result_meta->grad_fn;
  self_meta.output_nr = result_meta->output_nr;
  return self;
}

// The operand as the recorded op sees it: a clone when it shares self's memory, whose old
// value the write would destroy.
Tensor unaliased(const Tensor& self, const Tensor& other) {
  return other.storage().data() == self.storage().data() ? clone(other) : other;
}

}  // namespace

const Tensor& add_(const Tensor& self, const Tensor& other) {
  return in_place(
      "add_", self, {&other}, [&] { untracked::add_(self, other); },
      [&](const Tensor& old) { return add(old, unaliased(self, other)); });
}
const Tensor& add_(const Tensor& self, double other) {
  return in_place(
      "add_", self, {}, [&] { untracked::add_(self, other); }, [&](const Tensor& old) { return add(old, other); });
}
const Tensor& sub_(const Tensor& self, const Tensor& other) {
  return in_place(
      "sub_", self, {&other}, [&] { untracked::sub_(self, other); },
      [&](const Tensor& old) { return sub(old, unaliased(self, other)); });
}
const Tensor& sub_(const Tensor& self, double other) {
  return in_place(
      "sub_", self, {}, [&] { untracked::sub_(self, other); }, [&](const Tensor& old) { return sub(old, other); });
}
const Tensor& mul_(const Tensor& self, const Tensor& other) {
  return in_place(
      "mul_", self, {&other}, [&] { untracked::mul_(self, other); },
      [&](const Tensor& old) { return mul(old, unaliased(self, other)); });
}
const Tensor& mul_(const Tensor& self, double other) {
  return in_place(
      "mul_", self, {}, [&] { untracked::mul_(self, other); }, [&](const Tensor& old) { return mul(old, other); });
}
const Tensor& div_(const Tensor& self, const Tensor& other) {
  return in_place(
      "div_", self, {&other}, [&] { untracked::div_(self, other); },
      [&](const Tensor& old) { return div(old, unaliased(self, other)); });
}
const Tensor& div_(const Tensor& self, double other) {
  return in_place(
      "div_", self, {}, [&] { untracked::div_(self, other); }, [&](const Tensor& old) { return div(old, other); });
}
const Tensor& neg_(const Tensor& self) {
  return in_place(
      "neg_", self, {}, [&] { untracked::neg_(self); }, [&](const Tensor& old) { return neg(old); });
}
const Tensor& clamp_(const Tensor& self, std::optional<double> min, std::optional<double> max) {
  return in_place(
      "clamp_", self, {}, [&] { untracked::clamp_(self, min, max); },
      [&](const Tensor& old) { return clamp(old, min, max); });
}
const Tensor& copy_(const Tensor& self, const Tensor& src) {
  // The old values of self are overwritten: no gradient flows to them (mul by 0 keeps the
  // recorded op an output of self's history, so self stays a non-leaf).
  return in_place(
      "copy_", self, {&src}, [&] { untracked::copy_(self, src); },
      [&](const Tensor& old) {
        return add(mul(old, 0.0), expand(to(to(unaliased(self, src), self.device()), self.dtype()), self.sizes()));
      });
}
const Tensor& fill_(const Tensor& self, double value) {
  return in_place(
      "fill_", self, {}, [&] { untracked::fill_(self, value); },
      [&](const Tensor& old) { return add(mul(old, 0.0), value); });
}
const Tensor& zero_(const Tensor& self) { return fill_(self, 0); }

const Tensor& operator+=(const Tensor& self, const Tensor& other) { return add_(self, other); }
const Tensor& operator+=(const Tensor& self, double other) { return add_(self, other); }
const Tensor& operator-=(const Tensor& self, const Tensor& other) { return sub_(self, other); }
const Tensor& operator-=(const Tensor& self, double other) { return sub_(self, other); }
const Tensor& operator*=(const Tensor& self, const Tensor& other) { return mul_(self, other); }
const Tensor& operator*=(const Tensor& self, double other) { return mul_(self, other); }
const Tensor& operator/=(const Tensor& self, const Tensor& other) { return div_(self, other); }
const Tensor& operator/=(const Tensor& self, double other) { return div_(self, other); }

}  // namespace distgrad
