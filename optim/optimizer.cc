#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <utility>

#include "autograd/grad_mode.h"
#include "core/ops.h"
#include "core/safetensors.h"

namespace distgrad::optim {
namespace detail {

void check_hyperparameter(bool ok, const std::string& optimizer, const char* what, double value) {
  DISTGRAD_CHECK(ok, optimizer, ": expected ", what, ", found ", value);
}

}  // namespace detail

namespace {

constexpr std::string_view kParameterCount = "parameter_count";
constexpr std::string_view kStatePrefix = "state.";
constexpr std::string_view kStep = "step";

// Splits "state.<index>.<name>"; false when `key` does not have that form.
bool parse_state_key(const std::string& key, size_t& index, std::string& name) {
  if (!key.starts_with(kStatePrefix)) return false;
  const size_t dot = key.find('.', kStatePrefix.size());
  if (dot == std::string::npos || dot + 1 == key.size()) return false;
  const char* first = key.data() + kStatePrefix.size();
  const char* last = key.data() + dot;
  const auto [end, error] = std::from_chars(first, last, index);
  if (error != std::errc() || end != last || first == last) return false;
  name = key.substr(dot + 1);
  return true;
}

std::string state_key(size_t index, const std::string& name) {
  return std::string(kStatePrefix) + std::to_string(index) + "." + name;
}

std::string join(const std::vector<std::string>& names) {
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return joined.empty() ? "none" : joined;
}

// `t` converted to `dtype` on `device`, in memory of its own (never sharing t's).
Tensor owned_copy(const Tensor& t, DType dtype, Device device) {
  const Tensor converted = untracked::to(untracked::to(t, device), dtype);
  return converted.data_ptr() == t.data_ptr() ? untracked::clone(converted) : converted;
}

}  // namespace

Optimizer::Optimizer(std::string name, const std::vector<std::vector<Tensor>>& groups)
    : name_(std::move(name)), num_groups_(groups.size()) {
  for (size_t group = 0; group < groups.size(); ++group) {
    parameters_.insert(parameters_.end(), groups[group].begin(), groups[group].end());
    group_of_.insert(group_of_.end(), groups[group].size(), group);
  }
  state_.resize(parameters_.size());
  DISTGRAD_CHECK(!parameters_.empty(), name_, ": got an empty parameter list");
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& parameter = parameters_[i];
    DISTGRAD_CHECK(parameter.defined(), name_, ": ", describe_parameter(i), " is an undefined tensor");
    DISTGRAD_CHECK(parameter.requires_grad(), name_, ": ", describe_parameter(i), " (a ", parameter.describe(),
                   ") does not require grad; only leaves that require grad can be optimized");
    DISTGRAD_CHECK(parameter.is_leaf(), name_, ": ", describe_parameter(i), " (a ", parameter.describe(),
                   ") is not a leaf (it was computed by a recorded op); optimize the leaves it was computed from");
    for (size_t j = 0; j < i; ++j) {
      DISTGRAD_CHECK(!parameters_[j].is_same(parameter), name_, ": ", describe_parameter(i), " is the same tensor as ",
                     describe_parameter(j));
    }
  }
}

std::string Optimizer::describe_parameter(size_t index) const {
  std::string description = "parameter " + std::to_string(index);
  if (num_groups_ > 1) description += " (param group " + std::to_string(group_of_[index]) + ")";
  return description;
}

std::string Optimizer::group_context(size_t group) const {
  return num_groups_ > 1 ? name_ + " (param group " + std::to_string(group) + ")" : name_;
}

void Optimizer::check_group(size_t group, const char* function) const {
  DISTGRAD_CHECK(group < num_groups_, name_, ".", function, ": expected a param group index below ", num_groups_,
                 ", found ", group);
}

void Optimizer::step() {
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor grad = parameters_[i].grad();
    if (grad.defined()) update(group_of_[i], parameters_[i], grad.detach(), state_[i]);
  }
}

void Optimizer::zero_grad() {
  for (const Tensor& parameter : parameters_) parameter.set_grad(Tensor());
}

nn::ParamDict Optimizer::state_dict() const {
  nn::ParamDict dict;
  for (size_t i = 0; i < state_.size(); ++i) {
    for (const auto& [name, tensor] : state_[i]) dict.insert(state_key(i, name), untracked::clone(tensor));
  }
  dict.insert(std::string(kParameterCount), scalar_tensor(static_cast<double>(parameters_.size()), {.dtype = kInt64}));
  return dict;
}

void Optimizer::load_state_dict(const nn::ParamDict& state) { load_state(state, name_ + ".load_state_dict"); }

void Optimizer::save(const std::string& path) const { save_safetensors(path, state_dict().entries()); }

void Optimizer::load(const std::string& path) {
  load_state(nn::ParamDict(load_safetensors(path).tensors), name_ + ".load('" + path + "')");
}

void Optimizer::load_state(const nn::ParamDict& state, const std::string& context) {
  const size_t count = parameters_.size();
  const Tensor* stored_count = state.find(kParameterCount);
  DISTGRAD_CHECK(stored_count != nullptr, context, ": the state has no '", kParameterCount,
                 "' entry, so it is not an optimizer state dict");
  DISTGRAD_CHECK(stored_count->dim() == 0 && stored_count->dtype() == kInt64, context, ": '", kParameterCount,
                 "' is a ", stored_count->describe(), ", expected an int64 0-dim tensor");
  const int64_t stored = stored_count->item<int64_t>();
  DISTGRAD_CHECK(stored == static_cast<int64_t>(count), context, ": the state is for ", stored, " parameters ('",
                 kParameterCount, "'), this optimizer has ", count);

  std::vector<std::vector<std::string>> names_by_group;
  for (size_t group = 0; group < num_groups_; ++group) names_by_group.push_back(state_names(group));
  std::vector<nn::ParamDict> loaded(count);
  for (const auto& [key, tensor] : state) {
    if (key == kParameterCount) continue;
    size_t index = 0;
    std::string name;
    DISTGRAD_CHECK(parse_state_key(key, index, name), context, ": unexpected key '", key,
                   "' (expected 'state.<index>.<name>' or '", kParameterCount, "')");
    DISTGRAD_CHECK(index < count, context, ": '", key, "' is for parameter ", index, ", this optimizer has ", count,
                   " parameters");
    const std::vector<std::string>& names = names_by_group[group_of_[index]];
    const std::string options = num_groups_ > 1 ? "param group " + std::to_string(group_of_[index]) + "'s options"
                                                : std::string("these options");
    DISTGRAD_CHECK(std::find(names.begin(), names.end(), name) != names.end(), context, ": '", key, "' is not ", name_,
                   " state (with ", options, " each parameter's state holds: ", join(names), ")");
    const Tensor& parameter = parameters_[index];
    if (name == kStep) {
      DISTGRAD_CHECK(tensor.dim() == 0, context, ": '", key, "' is a ", tensor.describe(),
                     ", expected a 0-dim step count");
      loaded[index].insert(name, owned_copy(tensor, kInt64, Device::cpu()));
    } else {
      DISTGRAD_CHECK(tensor.sizes() == parameter.sizes(), context, ": '", key, "' has shape ",
                     shape_str(tensor.sizes()), ", expected ", shape_str(parameter.sizes()),
                     " (the shape of parameter ", index, ")");
      loaded[index].insert(name, owned_copy(tensor, parameter.dtype(), parameter.device()));
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (loaded[i].empty()) continue;
    nn::ParamDict ordered;
    for (const std::string& name : names_by_group[group_of_[i]]) {
      const Tensor* tensor = loaded[i].find(name);
      DISTGRAD_CHECK(tensor != nullptr, context, ": parameter ", i, " has state but no '", state_key(i, name),
                     "' entry");
      ordered.insert(name, *tensor);
    }
    loaded[i] = std::move(ordered);
  }
  state_ = std::move(loaded);
}

}  // namespace distgrad::optim
