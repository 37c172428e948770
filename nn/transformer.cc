#include "nn/transformer.h"

#include "absl/strings/str_cat.h"
#include "autograd/ops.h"
#include "core/error.h"

namespace distgrad::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options,
                                                 TensorOptions tensor_options)
    : d_model_(d_model), options_(options) {
  DISTGRAD_CHECK(options.dim_feedforward > 0, "TransformerEncoderLayer: expected a positive dim_feedforward, found ",
                 options.dim_feedforward);
  self_attn = register_module(
      "self_attn", std::make_shared<MultiheadAttention>(
                       d_model, nhead,
                       MultiheadAttentionOptions{
                           .dropout = options.dropout, .bias = options.bias, .batch_first = options.batch_first},
                       tensor_options));
  linear1 = register_module("linear1",
                            std::make_shared<Linear>(d_model, options.dim_feedforward, options.bias, tensor_options));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2",
                            std::make_shared<Linear>(options.dim_feedforward, d_model, options.bias, tensor_options));
  const LayerNormOptions norm_options{.eps = options.layer_norm_eps, .bias = options.bias};
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{d_model}, norm_options, tensor_options));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{d_model}, norm_options, tensor_options));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

std::string TransformerEncoderLayer::name() const {
  return absl::StrCat("TransformerEncoderLayer(d_model=", d_model_, ", nhead=", self_attn->num_heads(),
                      ", dim_feedforward=", options_.dim_feedforward, ", dropout=", options_.dropout,
                      ", norm_first=", options_.norm_first ? "true" : "false", ")");
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const EncoderLayerCall& call) {
  const AttentionOutput attended = self_attn->forward(x, x, x,
                                                      {.key_padding_mask = call.src_key_padding_mask,
                                                       .attn_mask = call.src_mask,
                                                       .need_weights = false,
                                                       .is_causal = call.is_causal});
  return dropout1->forward(attended.output);
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  const Tensor hidden = linear1->forward(x);
  const Tensor activated = options_.activation == Activation::kRelu ? relu(hidden) : gelu(hidden);
  return dropout2->forward(linear2->forward(dropout->forward(activated)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) { return forward(src, EncoderLayerCall{}); }

Tensor TransformerEncoderLayer::forward(const Tensor& src, const EncoderLayerCall& call) {
  src.check_defined("TransformerEncoderLayer");
  DISTGRAD_CHECK(src.dim() == 3 && src.size(2) == d_model_, name(), ": expected src of shape ",
                 options_.batch_first ? "[batch, sequence, " : "[sequence, batch, ", d_model_, "], found ",
                 shape_str(src.sizes()));
  if (options_.norm_first) {
    const Tensor x = src + self_attention_block(norm1->forward(src), call);
    return x + feed_forward_block(norm2->forward(x));
  }
  const Tensor x = norm1->forward(src + self_attention_block(src, call));
  return norm2->forward(x + feed_forward_block(x));
}

}  // namespace distgrad::nn
