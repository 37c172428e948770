// functional_call and module_clone: running a module on tensors other than its own.
//
// functional_call(module, params, args...) runs module.forward(args...) with each parameter or
// buffer named in `params` replaced by that tensor (torch.func.functional_call), then puts
// the module's own tensors back, also when forward throws. Entries may be any subset of the
// module's names; each must match the shape of the tensor it stands in for. This is how MAML
// evaluates the adapted ("fast") weights, which are not leaves but outputs of the inner loop.
//
// module_clone(module, by) returns the module's parameters and buffers as a ParamDict
// (torchopt.module_clone):
//   - CloneBy::kReference: the module's own tensors;
//   - CloneBy::kClone: copies that keep a gradient link to the originals (differentiable
//     clones), so gradients of a loss on them flow back into the module's parameters;
//   - CloneBy::kDeepcopy: detached copies, new leaves that require grad as the originals did.
// Buffers are cloned alike, or detached when `detach_buffers`.
//
//   dg::nn::ParamDict fast = dg::nn::module_clone(net, dg::nn::CloneBy::kClone);
//   dg::Tensor y = dg::nn::functional_call(net, fast, x);
//
// Many threads may run functional_call on one module at once: each holds the module's slot
// locks while its tensors stand in the slots (Note [Slot locking] in nn/module.h), so their
// forwards run one at a time and each sees its own tensors; module_clone takes the same locks.
#pragma once

#include <utility>
#include <vector>

#include "core/param_dict.h"
#include "nn/module.h"

namespace distgrad::nn {

// Puts `params` into the module's slots for its lifetime, holding their locks (the RAII part of
// functional_call).
class ParameterSwap {
 public:
  ParameterSwap(const Module& module, const ParamDict& params);
  ~ParameterSwap();
  ParameterSwap(const ParameterSwap&) = delete;
  ParameterSwap& operator=(const ParameterSwap&) = delete;

 private:
  Module::SlotLock lock_;                          // taken before the swap, released after the restore
  std::vector<std::pair<Tensor*, Tensor>> saved_;  // slot -> the module's own tensor
};

template <typename M, typename... Args>
auto functional_call(M& module, const ParamDict& params, Args&&... args) {
  ParameterSwap swap(module, params);
  return module.forward(std::forward<Args>(args)...);
}

enum class CloneBy { kReference, kClone, kDeepcopy };

ParamDict module_clone(const Module& module, CloneBy by = CloneBy::kReference, bool detach_buffers = false);

}  // namespace distgrad::nn
