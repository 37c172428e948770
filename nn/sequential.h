// Sequential: a chain of single-input modules (torch.nn.Sequential).
#pragma once

#include <initializer_list>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"

namespace distgrad::nn {

// Holds its modules as children named "0", "1", ... in order; forward feeds the input through
// each one's forward in turn. Parameters are therefore named "0.weight", "3.bias", ... as in
// PyTorch, so state dicts of the same architecture match.
//
//   dg::nn::Sequential net{std::make_shared<dg::nn::Linear>(1, 40), std::make_shared<dg::nn::ReLU>(),
//                          std::make_shared<dg::nn::Linear>(40, 1)};
//   net.push_back(std::make_shared<dg::nn::Tanh>());
//   dg::Tensor y = net.forward(x);   // x: [N, 1]
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);

  // Appends `module` as the next child, named after its position.
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return named_children().size(); }
  // The module at `index`; throws when out of range.
  const std::shared_ptr<Module>& operator[](size_t index) const;

  Tensor forward(const Tensor& input) override;
  std::string name() const override;
};

}  // namespace distgrad::nn
