// ModuleList and ModuleDict: containers that register their modules as children
// (torch.nn.ModuleList / ModuleDict), so that parameters(), to(), state_dict() and
// functional_call see them. Neither has a forward: the owning module calls its members.
//
//   dg::nn::ModuleList blocks;
//   for (int i = 0; i < 4; ++i) blocks.push_back(std::make_shared<dg::nn::TransformerEncoderLayer>(64, 4));
//   for (size_t i = 0; i < blocks.size(); ++i) x = blocks[i]->forward(x);     // "0.self_attn.in_proj_weight", ...
//
//   dg::nn::ModuleDict heads;
//   heads.insert("regression", std::make_shared<dg::nn::Linear>(64, 1));
//   dg::Tensor y = heads["regression"]->forward(features);                   // "regression.weight", ...
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace distgrad::nn {

// Children named "0", "1", ... in order, as in PyTorch.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return named_children().size(); }
  // The module at `index`; throws when out of range.
  const std::shared_ptr<Module>& operator[](size_t index) const;
  std::string name() const override;
};

// Children under the given names, in insertion order; a name may be inserted once.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);

  void insert(std::string key, std::shared_ptr<Module> module);
  size_t size() const { return named_children().size(); }
  bool contains(const std::string& key) const;
  // The module under `key`; throws naming the keys there are when absent.
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  std::vector<std::string> keys() const;
  std::string name() const override;
};

}  // namespace distgrad::nn
