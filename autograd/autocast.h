// Autocast: mixed precision for the ops of a scope (torch.autocast).
//
// Inside an AutocastGuard for a device type, the differentiable ops on that device's tensors
// follow PyTorch's autocast policy (Note [Autocast policy]): matrix products and convolutions
// cast their float32 operands to the scope's half dtype (float16 or bfloat16) and compute with
// float32 accumulation; reductions, softmax, normalisation and losses cast half operands to
// float32; the other ops run in their inputs' dtype, two floating dtypes meeting in the wider one.
// The casts are differentiable, so float32 parameters get float32 gradients. Run the backward
// pass after the scope (the engine turns autocast off while it runs, so each backward op runs
// in its forward op's dtype), and scale a float16 loss with optim::GradScaler.
//
//   {
//     autograd::AutocastGuard autocast(DeviceType::kCPU);  // bfloat16, the CPU's default
//     loss = nn::cross_entropy(model.forward(images), labels);  // linear in bfloat16, the loss in float32
//   }
//   loss.backward();
//
// The state is per thread, like grad mode: a remote call's function runs without the caller's
// autocast (as in PyTorch); enter a scope inside the function to use it there.
#pragma once

#include <initializer_list>
#include <optional>

#include "core/device.h"
#include "core/tensor.h"

namespace distgrad::autograd {

// Whether autocast is on for `device_type`'s tensors in this thread, and its dtype there.
bool is_autocast_enabled(DeviceType device_type);
DType autocast_dtype(DeviceType device_type);

// Turns autocast on (or, with enabled = false, off) for `device_type` until the scope ends, then
// restores the previous state. `dtype` is float16 or bfloat16; by default float16 on CUDA and
// bfloat16 on the CPU, as PyTorch's.
class AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType device_type, std::optional<DType> dtype = std::nullopt, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_type_;
  bool previous_enabled_;
  DType previous_dtype_;
};

// Autocast off for every device type in a scope: how the engine runs backward formulas.
class AutocastDisabledGuard {
 public:
  AutocastDisabledGuard() = default;

 private:
  AutocastGuard cpu_{DeviceType::kCPU, std::nullopt, false};
  AutocastGuard cuda_{DeviceType::kCUDA, std::nullopt, false};
};

// The casts op implementations (autograd's ops, nn's layers and losses) apply to their tensor
// operands (Note [Autocast policy]): `t` itself unless autocast is on for its device and it is
// float32 or the other half dtype (to_lower_precision), or half (to_float32); float64 and
// non-floating tensors are never cast.
// The `casts_*` tests say whether any of `operands` would change, so an op reads
//   if (casts_to_float32({&t})) return softmax(autocast_to_float32(t), dim);
Tensor autocast_to_lower_precision(const Tensor& t);
Tensor autocast_to_float32(const Tensor& t);
bool casts_to_lower_precision(std::initializer_list<const Tensor*> operands);
bool casts_to_float32(std::initializer_list<const Tensor*> operands);

}  // namespace distgrad::autograd
