#include "nn/dropout.h"

#include "absl/strings/str_cat.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/ops.h"

namespace distgrad::nn {
namespace {

void check_probability(const char* op, double p) {
  DISTGRAD_CHECK(p >= 0 && p <= 1, op, ": expected a dropout probability in [0, 1], found ", p);
}

}  // namespace

Tensor dropout(const Tensor& input, double p, bool training, Generator& generator) {
  input.check_defined("dropout");
  DISTGRAD_CHECK(is_floating(input.dtype()), "dropout: expected a floating input, found a ", input.describe());
  check_probability("dropout", p);
  if (!training || p == 0) return input;
  if (p == 1) return input * 0.0;
  // PyTorch's arithmetic: the kept mask divided by 1 - p, then one product.
  const Tensor uniform = rand(input.sizes(), {.dtype = input.dtype(), .device = input.device()}, generator);
  const Tensor scaled_mask = untracked::div(untracked::to(untracked::lt(uniform, 1.0 - p), input.dtype()), 1.0 - p);
  return input * scaled_mask;
}

Dropout::Dropout(double p) : p_(p) { check_probability("Dropout", p); }

std::string Dropout::name() const { return absl::StrCat("Dropout(p=", p_, ")"); }

Tensor Dropout::forward(const Tensor& input) { return dropout(input, p_, is_training()); }

}  // namespace distgrad::nn
