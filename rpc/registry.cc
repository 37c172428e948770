#include "rpc/registry.h"

namespace distgrad::rpc {

FunctionRegistry& FunctionRegistry::instance() {
  static auto* registry = new FunctionRegistry;  // never destroyed: used until exit
  return *registry;
}

void FunctionRegistry::add(std::string name, FunctionAddress function, Handler handler) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (handlers_.count(name)) {
    duplicates_.push_back(name);
    return;
  }
  names_.emplace(function, name);
  handlers_.emplace(std::move(name), std::move(handler));
}

const Handler* FunctionRegistry::find(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = handlers_.find(name);
  return it == handlers_.end() ? nullptr : &it->second;
}

const std::string* FunctionRegistry::name_of(FunctionAddress function) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = names_.find(function);
  return it == names_.end() ? nullptr : &it->second;
}

std::vector<std::string> FunctionRegistry::duplicate_names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return duplicates_;
}

std::vector<std::string> FunctionRegistry::names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  for (const auto& [name, handler] : handlers_) names.push_back(name);
  return names;
}

}  // namespace distgrad::rpc
