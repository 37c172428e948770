// Activation layers: ReLU, Tanh and Sigmoid as modules, for use in a Sequential.
#pragma once

#include <string>

#include "core/tensor.h"
#include "nn/module.h"

namespace distgrad::nn {

// max(x, 0) elementwise (torch.nn.ReLU).
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "ReLU()"; }
};

// tanh(x) elementwise (torch.nn.Tanh).
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Tanh()"; }
};

// 1 / (1 + exp(-x)) elementwise (torch.nn.Sigmoid).
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Sigmoid()"; }
};

}  // namespace distgrad::nn
