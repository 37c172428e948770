// Linear: the fully connected layer y = x W^T + b (torch.nn.Linear).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"

namespace distgrad::nn {

// input W^T + bias (torch.nn.functional.linear): input [..., in], weight [out, in], bias [out] or
// undefined -> [..., out]; every rank runs as one gemm on the input viewed as a matrix.
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = {});

// y = x W^T + b over the last dimension of x.
//
// The weight is [out_features, in_features] and the bias [out_features]; both start as
// U(-1/sqrt(in_features), 1/sqrt(in_features)) from the default generator, as in PyTorch.
// The input is [..., in_features] with any number of leading dims (none for a single sample);
// forward() is linear(x, weight, bias). `options` gives the parameters' dtype and device.
//
//   dg::nn::Linear fc(1, 40);
//   dg::Tensor y = fc.forward(dg::randn({8, 1}));   // [8, 40]
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool with_bias = true, TensorOptions options = {});

  Tensor forward(const Tensor& input) override;
  std::string name() const override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  Tensor weight;  // [out_features, in_features]
  Tensor bias;    // [out_features], undefined without bias

 private:
  int64_t in_features_;
  int64_t out_features_;
};

}  // namespace distgrad::nn
