#include "nn/module.h"

#include <set>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "core/safetensors.h"

namespace distgrad::nn {

Tensor Module::forward(const Tensor&) {
  DISTGRAD_FAIL(name(), ": this module has no single-input forward(); call its own forward with its arguments");
}

void Module::check_new_name(const std::string& name) const {
  DISTGRAD_CHECK(!name.empty() && name.find('.') == std::string::npos, this->name(),
                 ": expected a non-empty name without dots, found '", name, "'");
  for (const Slot& slot : own_slots_) {
    DISTGRAD_CHECK(slot.name != name, this->name(), ": '", name, "' is already registered");
  }
  for (const auto& [child_name, child] : children_) {
    DISTGRAD_CHECK(child_name != name, this->name(), ": '", name, "' is already registered");
  }
}

void Module::register_parameter(std::string name, Tensor& slot, bool requires_grad) {
  check_new_name(name);
  slot.check_defined("register_parameter");
  if (!slot.is_leaf()) slot = slot.detach();
  slot.requires_grad_(requires_grad);
  own_slots_.push_back({std::move(name), &slot, true});
}

void Module::register_buffer(std::string name, Tensor& slot) {
  check_new_name(name);
  own_slots_.push_back({std::move(name), &slot, false});
}

void Module::add_child(std::string name, std::shared_ptr<Module> child) {
  check_new_name(name);
  DISTGRAD_CHECK(child != nullptr, this->name(), ": register_module('", name, "') got a null module");
  children_.emplace_back(std::move(name), std::move(child));
}

void Module::collect_slots(const std::string& prefix, std::vector<Slot>& slots) const {
  for (const Slot& slot : own_slots_) slots.push_back({prefix + slot.name, slot.tensor, slot.is_parameter});
  for (const auto& [name, child] : children_) child->collect_slots(prefix + name + ".", slots);
}

std::vector<Module::Slot> Module::slots() const {
  std::vector<Slot> slots;
  collect_slots("", slots);
  return slots;
}

Module::SlotLock::SlotLock(const Module& module) { lock_subtree(module); }

void Module::SlotLock::lock_subtree(const Module& module) {
  locks_.emplace_back(module.slots_mutex_);
  for (const auto& [name, child] : module.children_) lock_subtree(*child);
}

ParamDict Module::named_parameters(bool recurse) const {
  const SlotLock lock(*this);
  ParamDict result;
  for (const Slot& slot : recurse ? slots() : own_slots_) {
    if (slot.is_parameter) result.insert(slot.name, *slot.tensor);
  }
  return result;
}

std::vector<Tensor> Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }

ParamDict Module::named_buffers(bool recurse) const {
  const SlotLock lock(*this);
  ParamDict result;
  for (const Slot& slot : recurse ? slots() : own_slots_) {
    if (!slot.is_parameter && slot.tensor->defined()) result.insert(slot.name, *slot.tensor);
  }
  return result;
}

void Module::train(bool on) {
  training_ = on;
  for (const auto& [name, child] : children_) child->train(on);
}

namespace {

// Replaces each slot's tensor by convert(tensor); parameters stay leaves that require grad.
template <typename Convert>
void convert_slots(const std::vector<Module::Slot>& slots, Convert convert) {
  autograd::NoGradGuard no_grad;
  for (const Module::Slot& slot : slots) {
    if (!slot.tensor->defined()) continue;
    const bool requires_grad = slot.tensor->requires_grad();
    Tensor converted = convert(slot.tensor->detach());
    if (converted.is_same(*slot.tensor) || converted.data_ptr() == slot.tensor->data_ptr()) continue;
    if (slot.is_parameter) converted.requires_grad_(requires_grad);
    *slot.tensor = converted;
  }
}

}  // namespace

void Module::to(Device device) {
  const SlotLock lock(*this);
  convert_slots(slots(), [device](const Tensor& t) { return untracked::to(t, device); });
}

void Module::to(DType dtype) {
  const SlotLock lock(*this);
  convert_slots(slots(), [dtype](const Tensor& t) { return is_floating(t.dtype()) ? untracked::to(t, dtype) : t; });
}

ParamDict Module::state_dict() const {
  const SlotLock lock(*this);
  ParamDict state;
  for (const Slot& slot : slots()) {
    if (slot.tensor->defined()) state.insert(slot.name, slot.tensor->detach());
  }
  return state;
}

void Module::load_state_dict(const ParamDict& state, bool strict) {
  const SlotLock lock(*this);
  // Everything is checked before anything is copied, so that a failed load changes nothing.
  std::set<std::string> known;
  std::vector<std::string> missing;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;  // slot <- value
  for (const Slot& slot : slots()) {
    if (!slot.tensor->defined()) continue;
    known.insert(slot.name);
    const Tensor* value = state.find(slot.name);
    if (value == nullptr) {
      missing.push_back(slot.name);
      continue;
    }
    DISTGRAD_CHECK(value->sizes() == slot.tensor->sizes(), "load_state_dict: '", slot.name, "' expects shape ",
                   shape_str(slot.tensor->sizes()), ", the state has ", shape_str(value->sizes()));
    copies.emplace_back(slot.tensor, value);
  }
  if (strict) {
    std::string unexpected;
    for (const auto& [name, tensor] : state) {
      if (!known.count(name)) unexpected += (unexpected.empty() ? "" : ", ") + name;
    }
    std::string absent;
    for (const std::string& name : missing) absent += (absent.empty() ? "" : ", ") + name;
    DISTGRAD_CHECK(absent.empty() && unexpected.empty(), "load_state_dict: the state does not match ", name(),
                   absent.empty() ? "" : "; missing keys: " + absent,
                   unexpected.empty() ? "" : "; unexpected keys: " + unexpected);
  }
  autograd::NoGradGuard no_grad;
  for (const auto& [slot, value] : copies) untracked::copy_(*slot, *value);
}

void Module::zero_grad() {
  const SlotLock lock(*this);
  for (const Slot& slot : slots()) {
    if (slot.is_parameter && slot.tensor->defined()) slot.tensor->set_grad(Tensor());
  }
}

void save(const Module& module, const std::string& path) { save_safetensors(path, module.state_dict().entries()); }

void load(Module& module, const std::string& path, bool strict) {
  const ParamDict state = module.state_dict();
  const Device device = state.empty() ? Device::cpu() : state.entries()[0].second.device();
  module.load_state_dict(ParamDict(load_safetensors(path, device).tensors), strict);
}

}  // namespace distgrad::nn
