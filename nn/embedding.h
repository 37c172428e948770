// Embedding: a lookup table of vectors indexed by integers (torch.nn.functional.embedding,
// torch.nn.Embedding).
//
//   dg::nn::Embedding tokens(1000, 64, {.padding_idx = 0});
//   dg::Tensor vectors = tokens.forward(ids);        // ids: int64 [batch, length] -> [batch, length, 64]
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"

namespace distgrad::nn {

// The rows of weight [num_embeddings, dim] at int64 `indices` (any shape, each in [0,
// num_embeddings)): indices.sizes() + [dim]. The gradient accumulates into the rows used, except
// the row `padding_idx` (negative counts from the end), which gets none, as in PyTorch.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);

struct EmbeddingOptions {
  std::optional<int64_t> padding_idx{};  // that row starts at zeros and is never trained
};

// weight starts as N(0, 1) from the default generator, as in PyTorch.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {},
            TensorOptions tensor_options = {});

  Tensor forward(const Tensor& indices) override;
  std::string name() const override;

  Tensor weight;  // [num_embeddings, embedding_dim]

 private:
  int64_t num_embeddings_;
  int64_t embedding_dim_;
  std::optional<int64_t> padding_idx_;  // wrapped to [0, num_embeddings)
};

}  // namespace distgrad::nn
