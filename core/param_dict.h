// ParamDict: an ordered map from names to tensors (PyTorch's OrderedDict of parameters).
//
// It holds a module's named parameters and buffers ("fc1.weight", "bn.running_mean"), the
// state dicts that checkpoints save, and the fast weights that functional_call and the
// meta-optimizers pass around. Iteration is in insertion order; copying is shallow (the
// tensors are handles).
//
// It lives in core, under nn's name, so that every layer can hold one: nn's modules, optim's
// state dicts and rpc's codecs (which send it by value) all use this one type.
//
//   ParamDict params = net.named_parameters();
//   for (const auto& [name, tensor] : params) std::cout << name << " " << tensor.sizes().size() << "\n";
//   Tensor w = params.at("fc1.weight");
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace distgrad::nn {

class ParamDict {
 public:
  using Entry = std::pair<std::string, Tensor>;

  ParamDict() = default;
  ParamDict(std::initializer_list<Entry> entries);
  explicit ParamDict(std::vector<Entry> entries);

  // Adds `name`, or replaces its tensor when present (keeping its position).
  void insert(std::string name, Tensor tensor);
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  // The tensor of `name`; throws naming the key and the keys present when it is missing.
  const Tensor& at(std::string_view name) const;
  // The tensor of `name`, or null.
  const Tensor* find(std::string_view name) const;

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }
  const std::vector<Entry>& entries() const { return entries_; }

  std::vector<std::string> keys() const;
  std::vector<Tensor> values() const;

 private:
  std::vector<Entry> entries_;
};

}  // namespace distgrad::nn
