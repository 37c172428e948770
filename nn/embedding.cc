#include "nn/embedding.h"

#include "absl/strings/str_cat.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/ops.h"

namespace distgrad::nn {
namespace {

// padding_idx in [-num_embeddings, num_embeddings), wrapped to [0, num_embeddings).
int64_t wrapped_padding_idx(const char* op, int64_t padding_idx, int64_t num_embeddings) {
  DISTGRAD_CHECK(padding_idx >= -num_embeddings && padding_idx < num_embeddings, op, ": expected padding_idx in [",
                 -num_embeddings, ", ", num_embeddings, "), found ", padding_idx);
  return padding_idx < 0 ? padding_idx + num_embeddings : padding_idx;
}

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  indices.check_defined("embedding");
  weight.check_defined("embedding");
  DISTGRAD_CHECK(weight.dim() == 2, "embedding: expected a weight of shape [num_embeddings, embedding_dim], found ",
                 shape_str(weight.sizes()));
  DISTGRAD_CHECK(indices.dtype() == kInt64, "embedding: expected int64 indices, found a ", indices.describe());
  DISTGRAD_CHECK(indices.device() == weight.device(), "embedding: expected indices on the weight's device ",
                 weight.device().str(), ", found a ", indices.describe());
  const int64_t rows = weight.size(0);
  if (indices.numel() > 0) {
    const int64_t lowest = untracked::min(indices).item<int64_t>();
    const int64_t highest = untracked::max(indices).item<int64_t>();
    DISTGRAD_CHECK(lowest >= 0 && highest < rows, "embedding: index ", lowest < 0 ? lowest : highest,
                   " is out of range for a table of ", rows, " rows [0, ", rows, ")");
  }
  Shape out_sizes = indices.sizes();
  out_sizes.push_back(weight.size(1));
  const Tensor flat = untracked::reshape(indices, {-1});
  Tensor rows_taken = index_select(weight, 0, flat);
  if (padding_idx) {
    // The padding rows' values pass, without their gradient.
    const Tensor is_padding =
        untracked::unsqueeze(untracked::eq(flat, wrapped_padding_idx("embedding", *padding_idx, rows)), 1);
    rows_taken = where(is_padding, detach(rows_taken), rows_taken);
  }
  return reshape(rows_taken, out_sizes);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options,
                     TensorOptions tensor_options)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  DISTGRAD_CHECK(num_embeddings > 0 && embedding_dim > 0,
                 "Embedding: expected positive sizes, found num_embeddings=", num_embeddings,
                 ", embedding_dim=", embedding_dim);
  DISTGRAD_CHECK(is_floating(tensor_options.dtype), "Embedding: expected a floating dtype, found ",
                 dtype_name(tensor_options.dtype));
  if (options.padding_idx) padding_idx_ = wrapped_padding_idx("Embedding", *options.padding_idx, num_embeddings);
  weight = randn({num_embeddings, embedding_dim}, {.dtype = tensor_options.dtype, .device = tensor_options.device});
  if (padding_idx_) untracked::fill_(untracked::select(weight, 0, *padding_idx_), 0.0);
  register_parameter("weight", weight);
}

std::string Embedding::name() const {
  return absl::StrCat("Embedding(", num_embeddings_, ", ", embedding_dim_,
                      padding_idx_ ? absl::StrCat(", padding_idx=", *padding_idx_) : "", ")");
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight, padding_idx_); }

}  // namespace distgrad::nn
