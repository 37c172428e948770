#include "rpc/registry.h"

namespace distgrad::rpc {

FunctionRegistry& FunctionRegistry::instance() {
  static auto* registry = new FunctionRegistry;  // never destroyed: used until exit
  return *registry;
}

void FunctionRegistry::add(std::string name, FunctionAddress function, Handler handler, ValueMaker make_value) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.count(name)) {
    duplicates_.push_back(name);
    return;
  }
  names_.emplace(function, name);
  entries_.emplace(std::move(name), Entry{std::move(handler), std::move(make_value)});
}

const Handler* FunctionRegistry::find(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second.handler;
}

const ValueMaker* FunctionRegistry::find_value_maker(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  return it == entries_.end() || !it->second.make_value ? nullptr : &it->second.make_value;
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
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

ClassRegistry& ClassRegistry::instance() {
  static auto* registry = new ClassRegistry;  // never destroyed: used until exit
  return *registry;
}

void ClassRegistry::add_class(std::string name, ValueMaker construct) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!constructors_.emplace(name, std::move(construct)).second) duplicates_.push_back(std::move(name));
}

void ClassRegistry::add_method(std::string name, std::string class_name, std::string key, MethodHandler handler,
                               MethodValueMaker make_value) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (methods_.count(name)) {
    duplicates_.push_back(std::move(name));
    return;
  }
  method_names_.emplace(std::move(key), name);
  methods_.emplace(std::move(name), Method{std::move(class_name), std::move(handler), std::move(make_value)});
}

const ValueMaker* ClassRegistry::find_constructor(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = constructors_.find(name);
  return it == constructors_.end() ? nullptr : &it->second;
}

const ClassRegistry::Method* ClassRegistry::find_method(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = methods_.find(name);
  return it == methods_.end() ? nullptr : &it->second;
}

const std::string* ClassRegistry::method_name(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = method_names_.find(key);
  return it == method_names_.end() ? nullptr : &it->second;
}

std::vector<std::string> ClassRegistry::duplicate_names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return duplicates_;
}

}  // namespace distgrad::rpc
