// TransformerEncoderLayer: self-attention and a feed-forward block, each with a residual
// connection, dropout and layer normalisation (torch.nn.TransformerEncoderLayer: the same
// submodules under the same names, so state dicts match).
//
//   dg::nn::TransformerEncoderLayer layer(64, 4, {.dim_feedforward = 128, .batch_first = true});
//   dg::Tensor y = layer.forward(tokens);                                  // [batch, length, 64]
//   dg::Tensor z = layer.forward(tokens, {.is_causal = true});
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/normalization.h"

namespace distgrad::nn {

enum class Activation { kRelu, kGelu };

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = Activation::kRelu;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;  // [batch, sequence, d_model] rather than [sequence, batch, d_model]
  bool norm_first = false;   // pre-norm: x + block(norm(x)) rather than norm(x + block(x))
  bool bias = true;          // in the linear layers, the attention and the layer norms
};

// The masks of one call (torch's forward arguments src_mask, src_key_padding_mask, is_causal),
// with MultiheadAttention's conventions (bool true: not allowed / padding).
struct EncoderLayerCall {
  Tensor src_mask{};
  Tensor src_key_padding_mask{};
  bool is_causal = false;
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {},
                          TensorOptions tensor_options = {});

  Tensor forward(const Tensor& src) override;
  Tensor forward(const Tensor& src, const EncoderLayerCall& call);
  std::string name() const override;

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1;
  std::shared_ptr<LayerNorm> norm2;
  std::shared_ptr<Dropout> dropout1;
  std::shared_ptr<Dropout> dropout2;

 private:
  Tensor self_attention_block(const Tensor& x, const EncoderLayerCall& call);
  Tensor feed_forward_block(const Tensor& x);

  int64_t d_model_;
  TransformerEncoderLayerOptions options_;
};

}  // namespace distgrad::nn
