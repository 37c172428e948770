// Attention (torch.nn.functional.scaled_dot_product_attention, torch.nn.MultiheadAttention).
//
//   dg::Tensor out = dg::nn::scaled_dot_product_attention(q, k, v, {.is_causal = true});
//   dg::nn::MultiheadAttention attention(64, 4, {.batch_first = true});
//   auto [y, weights] = attention.forward(x, x, x);      // x: [batch, tokens, 64]
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/random.h"
#include "core/tensor.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace distgrad::nn {

struct ScaledDotProductAttentionOptions {
  // Broadcast to [..., L, S]: a bool mask says which keys each query may attend to (true: it
  // may); a floating one is added to the scores.
  Tensor attn_mask{};
  double dropout_p = 0;           // dropout on the attention weights (applied whenever > 0, as in PyTorch)
  bool is_causal = false;         // query i attends to keys 0..i (top-left aligned); excludes attn_mask
  std::optional<double> scale{};  // 1 / sqrt(E) when absent
};

// softmax(q k^T * scale + mask) v for query [..., L, E], key [..., S, E] and value [..., S, Ev]
// with the same leading dims: [..., L, Ev]. Composed of matmul, softmax and the masks, as
// PyTorch's reference ("math") implementation, so differentiable to any order. A query whose
// keys are all masked gets NaN, as there.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const ScaledDotProductAttentionOptions& options = {},
                                    Generator& generator = default_generator());

struct MultiheadAttentionOptions {
  double dropout = 0;        // on the attention weights, in training mode
  bool bias = true;          // in_proj_bias and out_proj.bias
  bool batch_first = false;  // [batch, sequence, embed] rather than PyTorch's default [sequence, batch, embed]
};

// The masks and choices of one MultiheadAttention call (torch's forward arguments).
struct MultiheadAttentionCall {
  // bool [batch, S]: true marks a key to ignore (padding), as in PyTorch; or floating, added.
  Tensor key_padding_mask{};
  // [L, S] or [batch * num_heads, L, S]; bool: true marks a pair NOT allowed to attend (PyTorch's
  // convention for this module, the opposite of scaled_dot_product_attention's); or floating, added.
  Tensor attn_mask{};
  bool need_weights = true;          // also return the attention weights
  bool average_attn_weights = true;  // weights averaged over heads [batch, L, S], else [batch, heads, L, S]
  bool is_causal = false;            // a causal mask, when attn_mask is not given
};

struct AttentionOutput {
  Tensor output{};   // like query
  Tensor weights{};  // undefined unless need_weights
};

// Multi-head attention with torch's parameters and names: in_proj_weight [3E, E] (xavier
// uniform), in_proj_bias [3E] (zeros), out_proj (Linear E -> E, bias zeros). kdim and vdim equal
// embed_dim.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {},
                     TensorOptions tensor_options = {});

  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const MultiheadAttentionCall& call = {});
  // Self-attention: forward(x, x, x).output, without weights.
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  bool batch_first() const { return options_.batch_first; }

  Tensor in_proj_weight;  // [3 embed_dim, embed_dim]
  Tensor in_proj_bias;    // [3 embed_dim], with bias
  std::shared_ptr<Linear> out_proj;

 private:
  int64_t embed_dim_;
  int64_t num_heads_;
  MultiheadAttentionOptions options_;
};

}  // namespace distgrad::nn
