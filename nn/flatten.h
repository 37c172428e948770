// Flatten: merges a range of dims into one (torch.nn.Flatten).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"

namespace distgrad::nn {

// Merges dims start_dim..end_dim (negative ones count from the end) into one; by default every
// dim but the batch dim, turning [N, C, H, W] into [N, C*H*W] before a Linear layer.
//
//   dg::nn::Flatten flatten;
//   dg::Tensor y = flatten.forward(dg::randn({8, 64, 1, 1}));   // [8, 64]
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}

  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};

}  // namespace distgrad::nn
