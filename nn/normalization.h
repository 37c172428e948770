// Layer and group normalisation (torch.nn.functional.layer_norm / group_norm, torch.nn.LayerNorm /
// GroupNorm): each sample normalised with its own statistics, the same in training and
// evaluation, differentiable to any order.
//
//   dg::nn::LayerNorm norm(64);                       // over the last dim
//   dg::Tensor y = norm.forward(x);                   // x: [batch, tokens, 64]
//   dg::Tensor z = dg::nn::group_norm(images, 8);     // images: [N, 32, H, W], 8 groups of 4 channels
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"

namespace distgrad::nn {

// (x - mean) / sqrt(var + eps) * weight + bias, with the mean and biased variance of the last
// normalized_shape.size() dims of x (which must equal normalized_shape); weight and bias have
// normalized_shape, or are undefined.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// The channels of input [N, C, *] in num_groups groups of C / num_groups consecutive channels,
// each group of each sample normalised over its channels and spatial positions, then scaled
// and shifted per channel by weight and bias ([C], or undefined).
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // learnable weight (ones) and bias (zeros) of normalized_shape
  bool bias = true;                // with elementwise_affine: the bias too
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions options = {}, TensorOptions tensor_options = {});

  Tensor forward(const Tensor& input) override;
  std::string name() const override;

  Tensor weight;  // normalized_shape, with elementwise_affine
  Tensor bias;    // normalized_shape, with elementwise_affine and bias

 private:
  Shape normalized_shape_;
  LayerNormOptions options_;
};

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  // learnable per-channel weight (ones) and bias (zeros)
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options = {}, TensorOptions tensor_options = {});

  Tensor forward(const Tensor& input) override;
  std::string name() const override;

  Tensor weight;  // [num_channels], with affine
  Tensor bias;    // [num_channels], with affine

 private:
  int64_t num_groups_;
  int64_t num_channels_;
  GroupNormOptions options_;
};

}  // namespace distgrad::nn
