#include "core/param_dict.h"

#include "core/error.h"

namespace distgrad::nn {

ParamDict::ParamDict(std::initializer_list<Entry> entries) {
  for (const Entry& entry : entries) insert(entry.first, entry.second);
}

ParamDict::ParamDict(std::vector<Entry> entries) {
  for (Entry& entry : entries) insert(std::move(entry.first), std::move(entry.second));
}

void ParamDict::insert(std::string name, Tensor tensor) {
  for (Entry& entry : entries_) {
    if (entry.first == name) {
      entry.second = std::move(tensor);
      return;
    }
  }
  entries_.emplace_back(std::move(name), std::move(tensor));
}

const Tensor* ParamDict::find(std::string_view name) const {
  for (const Entry& entry : entries_) {
    if (entry.first == name) return &entry.second;
  }
  return nullptr;
}

const Tensor& ParamDict::at(std::string_view name) const {
  const Tensor* tensor = find(name);
  if (tensor == nullptr) {
    std::string present;
    for (const Entry& entry : entries_) present += (present.empty() ? "" : ", ") + entry.first;
    DISTGRAD_FAIL("ParamDict: no entry named '", name, "' (present: ", present.empty() ? "none" : present, ")");
  }
  return *tensor;
}

std::vector<std::string> ParamDict::keys() const {
  std::vector<std::string> keys;
  for (const Entry& entry : entries_) keys.push_back(entry.first);
  return keys;
}

std::vector<Tensor> ParamDict::values() const {
  std::vector<Tensor> values;
  for (const Entry& entry : entries_) values.push_back(entry.second);
  return values;
}

}  // namespace distgrad::nn
