#include "nn/sequential.h"

#include "absl/strings/str_cat.h"
#include "core/error.h"

namespace distgrad::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const std::shared_ptr<Module>& module : modules) push_back(module);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
}

const std::shared_ptr<Module>& Sequential::operator[](size_t index) const {
  DISTGRAD_CHECK(index < size(), "Sequential: index ", index, " is out of range for ", size(), " modules");
  return named_children()[index].second;
}

std::string Sequential::name() const { return absl::StrCat("Sequential(", size(), " modules)"); }

Tensor Sequential::forward(const Tensor& input) {
  Tensor output = input;
  for (const auto& [name, module] : named_children()) output = module->forward(output);
  return output;
}

}  // namespace distgrad::nn
