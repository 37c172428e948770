#include "nn/clip_grad.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/creation.h"
#include "core/error.h"

namespace distgrad::nn {
namespace {

// The defined gradients of `parameters`.
std::vector<Tensor> gradients_of(const std::vector<Tensor>& parameters, const char* op) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < parameters.size(); ++i) {
    parameters[i].check_defined(op);
    Tensor grad = parameters[i].grad();
    if (!grad.defined()) continue;
    DISTGRAD_CHECK(is_floating(grad.dtype()), op, ": parameter ", i, "'s gradient is a ", grad.describe(),
                   ", expected a floating-point tensor");
    grads.push_back(grad);
  }
  return grads;
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  DISTGRAD_CHECK(norm_type > 0, "clip_grad_norm_: expected norm_type > 0 (or infinity), found ", norm_type);
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = gradients_of(parameters, "clip_grad_norm_");
  if (grads.empty()) return scalar_tensor(0);
  bool one_dtype = true;
  for (const Tensor& grad : grads) one_dtype = one_dtype && grad.dtype() == grads[0].dtype();
  const DType dtype = one_dtype ? grads[0].dtype() : kFloat64;
  const Device device = grads[0].device();
  std::vector<Tensor> norms;
  for (const Tensor& grad : grads) norms.push_back(to(to(norm(grad, norm_type), dtype), device));
  const Tensor total = norm(stack(norms), norm_type);
  if (error_if_nonfinite) {  // reading the total waits for the device: only when asked, as PyTorch
    const double total_value = total.item<double>();
    DISTGRAD_CHECK(std::isfinite(total_value), "clip_grad_norm_: the total norm of order ", norm_type,
                   " of the gradients is ", total_value,
                   ", which cannot be clipped; with error_if_nonfinite = false the gradients are scaled by it anyway");
  }
  const Tensor coefficient = clamp(div(max_norm, add(total, 1e-6)), std::nullopt, 1.0);
  for (const Tensor& grad : grads) mul_(grad, to(to(coefficient, grad.dtype()), grad.device()));
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  DISTGRAD_CHECK(clip_value >= 0, "clip_grad_value_: expected clip_value >= 0, found ", clip_value);
  autograd::NoGradGuard no_grad;
  for (const Tensor& grad : gradients_of(parameters, "clip_grad_value_")) clamp_(grad, -clip_value, clip_value);
}

}  // namespace distgrad::nn
