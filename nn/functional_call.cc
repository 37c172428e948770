#include "nn/functional_call.h"

#include <set>

#include "autograd/ops.h"

namespace distgrad::nn {

ParameterSwap::ParameterSwap(const Module& module, const ParamDict& params) : lock_(module) {
  const std::vector<Module::Slot> slots = module.slots();
  std::set<std::string> used;
  std::vector<Tensor> replacements;
  for (const Module::Slot& slot : slots) {
    const Tensor* replacement = params.find(slot.name);
    if (replacement == nullptr) continue;
    used.insert(slot.name);
    DISTGRAD_CHECK(!slot.tensor->defined() || replacement->sizes() == slot.tensor->sizes(), "functional_call: '",
                   slot.name, "' of ", module.name(), " has shape ", shape_str(slot.tensor->sizes()),
                   ", the given tensor has ", shape_str(replacement->sizes()));
    saved_.emplace_back(slot.tensor, *slot.tensor);
    replacements.push_back(*replacement);
  }
  for (const auto& [name, tensor] : params) {
    if (used.count(name)) continue;
    std::string known;
    for (const Module::Slot& slot : slots) known += (known.empty() ? "" : ", ") + slot.name;
    DISTGRAD_FAIL("functional_call: ", module.name(), " has no parameter or buffer named '", name,
                  "' (it has: ", known.empty() ? "none" : known, ")");
  }
  for (size_t i = 0; i < saved_.size(); ++i) *saved_[i].first = replacements[i];
}

ParameterSwap::~ParameterSwap() {
  for (auto& [slot, own] : saved_) *slot = std::move(own);
}

ParamDict module_clone(const Module& module, CloneBy by, bool detach_buffers) {
  const Module::SlotLock lock(module);
  ParamDict result;
  for (const Module::Slot& slot : module.slots()) {
    const Tensor& tensor = *slot.tensor;
    if (!tensor.defined()) continue;
    Tensor copy;
    switch (by) {
      case CloneBy::kReference: copy = tensor; break;
      case CloneBy::kClone: copy = clone(tensor); break;
      case CloneBy::kDeepcopy:
        copy = clone(tensor.detach());
        if (tensor.requires_grad()) copy.requires_grad_();
        break;
    }
    if (!slot.is_parameter && detach_buffers) copy = copy.detach();
    result.insert(slot.name, copy);
  }
  return result;
}

}  // namespace distgrad::nn
