#include "nn/containers.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/error.h"

namespace distgrad::nn {

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const std::shared_ptr<Module>& module : modules) push_back(module);
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  DISTGRAD_CHECK(module != nullptr, "ModuleList: expected a module, found a null pointer at position ", size());
  register_module(std::to_string(size()), std::move(module));
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t index) const {
  DISTGRAD_CHECK(index < size(), "ModuleList: index ", index, " is out of range for ", size(), " modules");
  return named_children()[index].second;
}

std::string ModuleList::name() const { return absl::StrCat("ModuleList(", size(), " modules)"); }

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (const auto& [key, module] : modules) insert(key, module);
}

void ModuleDict::insert(std::string key, std::shared_ptr<Module> module) {
  DISTGRAD_CHECK(module != nullptr, "ModuleDict: expected a module under \"", key, "\", found a null pointer");
  register_module(std::move(key), std::move(module));  // refuses a name given twice
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [name, module] : named_children()) {
    if (name == key) return true;
  }
  return false;
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [name, module] : named_children()) {
    if (name == key) return module;
  }
  DISTGRAD_FAIL("ModuleDict: no module under \"", key, "\"; the keys are [", absl::StrJoin(keys(), ", "), "]");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> result;
  for (const auto& [name, module] : named_children()) result.push_back(name);
  return result;
}

std::string ModuleDict::name() const { return absl::StrCat("ModuleDict(", absl::StrJoin(keys(), ", "), ")"); }

}  // namespace distgrad::nn
