#include "core/elementwise.h"

#include "core/copy.h"
#include "core/creation.h"
#include "core/kernels.h"
#include "core/op_checks.h"

namespace distgrad::untracked {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

// Which dtypes an op accepts; kDivision is kFloating with a hint about integer division.
enum class Accepts { kNumeric, kFloating, kDivision, kBool, kAny };

Accepts accepted_dtypes(BinaryOp op) {
  switch (op) {
    case BinaryOp::kDiv: return Accepts::kDivision;
    case BinaryOp::kEq:
    case BinaryOp::kNe: return Accepts::kAny;
    case BinaryOp::kLogicalAnd:
    case BinaryOp::kLogicalOr: return Accepts::kBool;
    default: return Accepts::kNumeric;
  }
}

void check_accepts(Accepts accepts, const char* op, const Tensor& t) {
  switch (accepts) {
    case Accepts::kNumeric:
      DISTGRAD_CHECK(t.dtype() != kBool, op, ": expected a numeric tensor, found a ", t.describe(),
                     " (convert with distgrad::to(t, dtype))");
      break;
    case Accepts::kFloating:
    case Accepts::kDivision:
      DISTGRAD_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, found a ", t.describe(),
                     accepts == Accepts::kDivision && t.dtype() == kInt64
                         ? " (integer division is not supported; convert with distgrad::to)"
                         : "");
      break;
    case Accepts::kBool:
      DISTGRAD_CHECK(t.dtype() == kBool, op, ": expected a bool tensor, found a ", t.describe());
      break;
    case Accepts::kAny: break;
  }
}

DType result_dtype(BinaryOp op, DType input) {
  const bool logical = op == BinaryOp::kLogicalAnd || op == BinaryOp::kLogicalOr;
  return kernels::is_comparison(op) || logical ? kBool : input;
}

Tensor binary_op(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  const DType dtype = detail::common_dtype(name, a, b);
  if (a.dtype() != dtype || b.dtype() != dtype) return binary_op(op, name, to(a, dtype), to(b, dtype));
  check_accepts(accepted_dtypes(op), name, a);
  if (is_half(dtype)) {
    return to(binary_op(op, name, detail::widened(a), detail::widened(b)), result_dtype(op, dtype));
  }
  const Shape sizes = a.sizes() == b.sizes() ? a.sizes() : broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = empty(sizes, {.dtype = result_dtype(op, a.dtype()), .device = a.device()});
  kernels::kernels_for(a.device()).binary(op, out, detail::expand_to(a, sizes), detail::expand_to(b, sizes));
  return out;
}

Tensor scalar_op(BinaryOp op, const char* name, const Tensor& a, double scalar, bool scalar_first = false) {
  a.check_defined(name);
  check_accepts(accepted_dtypes(op), name, a);
  if (is_half(a.dtype())) {
    return to(scalar_op(op, name, detail::widened(a), scalar, scalar_first), result_dtype(op, a.dtype()));
  }
  Tensor out = empty(a.sizes(), {.dtype = result_dtype(op, a.dtype()), .device = a.device()});
  kernels::kernels_for(a.device()).binary_scalar(op, out, a, scalar, scalar_first);
  return out;
}

// Writes `result` (computed out of place, in float32 for a half `self`) into `self`.
const Tensor& assign(const Tensor& self, const Tensor& result) {
  copy_(self, result);
  return self;
}

const Tensor& inplace_op(BinaryOp op, const char* name, const Tensor& self, const Tensor& other) {
  detail::check_writable(name, self);
  const DType dtype = detail::common_dtype(name, self, other);
  check_accepts(accepted_dtypes(op), name, self);
  const Shape sizes = broadcast_shapes(self.sizes(), other.sizes(), name);
  DISTGRAD_CHECK(sizes == self.sizes(), name, ": the result of shape ", shape_str(sizes),
                 " does not fit the in-place target of shape ", shape_str(self.sizes()));
  if (dtype != self.dtype() || is_half(dtype)) return assign(self, binary_op(op, name, self, other));
  const Tensor source = detail::unaliased_source(self, other);
  kernels::kernels_for(self.device()).binary(op, self, self, detail::expand_to(source, sizes));
  self.storage().bump_version();
  return self;
}

const Tensor& inplace_scalar_op(BinaryOp op, const char* name, const Tensor& self, double scalar) {
  detail::check_writable(name, self);
  check_accepts(accepted_dtypes(op), name, self);
  if (is_half(self.dtype())) return assign(self, scalar_op(op, name, self, scalar));
  kernels::kernels_for(self.device()).binary_scalar(op, self, self, scalar, false);
  self.storage().bump_version();
  return self;
}

Accepts accepted_dtypes(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg:
    case UnaryOp::kAbs:
    case UnaryOp::kSign:
    case UnaryOp::kRelu:
    case UnaryOp::kClamp: return Accepts::kNumeric;
    case UnaryOp::kLogicalNot: return Accepts::kBool;
    default: return Accepts::kFloating;
  }
}

Tensor unary_op(UnaryOp op, const char* name, const Tensor& t, const kernels::ClampBounds& bounds = {}) {
  t.check_defined(name);
  check_accepts(accepted_dtypes(op), name, t);
  if (is_half(t.dtype())) return to(unary_op(op, name, detail::widened(t), bounds), t.dtype());
  Tensor out = empty_like(t);
  kernels::kernels_for(t.device()).unary(op, out, t, bounds);
  return out;
}

kernels::ClampBounds clamp_bounds(std::optional<double> min, std::optional<double> max) {
  DISTGRAD_CHECK(min || max, "clamp: expected at least one of min and max");
  return {.min = min.value_or(0), .max = max.value_or(0), .has_min = min.has_value(), .has_max = max.has_value()};
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kAdd, "add", a, b); }
Tensor add(const Tensor& a, double b) { return scalar_op(BinaryOp::kAdd, "add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kSub, "sub", a, b); }
Tensor sub(const Tensor& a, double b) { return scalar_op(BinaryOp::kSub, "sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kMul, "mul", a, b); }
Tensor mul(const Tensor& a, double b) { return scalar_op(BinaryOp::kMul, "mul", a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kDiv, "div", a, b); }
Tensor div(const Tensor& a, double b) { return scalar_op(BinaryOp::kDiv, "div", a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kPow, "pow", a, b); }
Tensor pow(const Tensor& a, double exponent) { return scalar_op(BinaryOp::kPow, "pow", a, exponent); }
Tensor pow(double base, const Tensor& exponent) { return scalar_op(BinaryOp::kPow, "pow", exponent, base, true); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kMaximum, "maximum", a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kMinimum, "minimum", a, b); }

Tensor neg(const Tensor& t) { return unary_op(UnaryOp::kNeg, "neg", t); }
Tensor abs(const Tensor& t) { return unary_op(UnaryOp::kAbs, "abs", t); }
Tensor sign(const Tensor& t) { return unary_op(UnaryOp::kSign, "sign", t); }
Tensor exp(const Tensor& t) { return unary_op(UnaryOp::kExp, "exp", t); }
Tensor expm1(const Tensor& t) { return unary_op(UnaryOp::kExpm1, "expm1", t); }
Tensor log(const Tensor& t) { return unary_op(UnaryOp::kLog, "log", t); }
Tensor log1p(const Tensor& t) { return unary_op(UnaryOp::kLog1p, "log1p", t); }
Tensor sqrt(const Tensor& t) { return unary_op(UnaryOp::kSqrt, "sqrt", t); }
Tensor rsqrt(const Tensor& t) { return unary_op(UnaryOp::kRsqrt, "rsqrt", t); }
Tensor sin(const Tensor& t) { return unary_op(UnaryOp::kSin, "sin", t); }
Tensor cos(const Tensor& t) { return unary_op(UnaryOp::kCos, "cos", t); }
Tensor tanh(const Tensor& t) { return unary_op(UnaryOp::kTanh, "tanh", t); }
Tensor sigmoid(const Tensor& t) { return unary_op(UnaryOp::kSigmoid, "sigmoid", t); }
Tensor relu(const Tensor& t) { return unary_op(UnaryOp::kRelu, "relu", t); }
Tensor relu_backward(const Tensor& grad, const Tensor& result) {
  return binary_op(BinaryOp::kReluBackward, "relu_backward", grad, result);
}
Tensor gelu(const Tensor& t) { return unary_op(UnaryOp::kGelu, "gelu", t); }
Tensor erf(const Tensor& t) { return unary_op(UnaryOp::kErf, "erf", t); }
Tensor clamp(const Tensor& t, std::optional<double> min, std::optional<double> max) {
  return unary_op(UnaryOp::kClamp, "clamp", t, clamp_bounds(min, max));
}

Tensor eq(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kEq, "eq", a, b); }
Tensor eq(const Tensor& a, double b) { return scalar_op(BinaryOp::kEq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kNe, "ne", a, b); }
Tensor ne(const Tensor& a, double b) { return scalar_op(BinaryOp::kNe, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kLt, "lt", a, b); }
Tensor lt(const Tensor& a, double b) { return scalar_op(BinaryOp::kLt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kLe, "le", a, b); }
Tensor le(const Tensor& a, double b) { return scalar_op(BinaryOp::kLe, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kGt, "gt", a, b); }
Tensor gt(const Tensor& a, double b) { return scalar_op(BinaryOp::kGt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kGe, "ge", a, b); }
Tensor ge(const Tensor& a, double b) { return scalar_op(BinaryOp::kGe, "ge", a, b); }
Tensor logical_not(const Tensor& t) { return unary_op(UnaryOp::kLogicalNot, "logical_not", t); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kLogicalAnd, "logical_and", a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kLogicalOr, "logical_or", a, b); }

const Tensor& add_(const Tensor& self, const Tensor& other) { return inplace_op(BinaryOp::kAdd, "add_", self, other); }
const Tensor& add_(const Tensor& self, double other) { return inplace_scalar_op(BinaryOp::kAdd, "add_", self, other); }
const Tensor& sub_(const Tensor& self, const Tensor& other) { return inplace_op(BinaryOp::kSub, "sub_", self, other); }
const Tensor& sub_(const Tensor& self, double other) { return inplace_scalar_op(BinaryOp::kSub, "sub_", self, other); }
const Tensor& mul_(const Tensor& self, const Tensor& other) { return inplace_op(BinaryOp::kMul, "mul_", self, other); }
const Tensor& mul_(const Tensor& self, double other) { return inplace_scalar_op(BinaryOp::kMul, "mul_", self, other); }
const Tensor& div_(const Tensor& self, const Tensor& other) { return inplace_op(BinaryOp::kDiv, "div_", self, other); }
const Tensor& div_(const Tensor& self, double other) { return inplace_scalar_op(BinaryOp::kDiv, "div_", self, other); }
const Tensor& neg_(const Tensor& self) { return inplace_scalar_op(BinaryOp::kMul, "neg_", self, -1); }
const Tensor& relu_backward_(const Tensor& grad, const Tensor& result) {
  return inplace_op(BinaryOp::kReluBackward, "relu_backward_", grad, result);
}
const Tensor& clamp_(const Tensor& self, std::optional<double> min, std::optional<double> max) {
  detail::check_writable("clamp_", self);
  check_accepts(Accepts::kNumeric, "clamp_", self);
  if (is_half(self.dtype())) return assign(self, clamp(self, min, max));
  kernels::kernels_for(self.device()).unary(UnaryOp::kClamp, self, self, clamp_bounds(min, max));
  self.storage().bump_version();
  return self;
}

Tensor sub(double a, const Tensor& b) { return scalar_op(BinaryOp::kSub, "sub", b, a, true); }
Tensor div(double a, const Tensor& b) { return scalar_op(BinaryOp::kDiv, "div", b, a, true); }

}  // namespace distgrad::untracked
