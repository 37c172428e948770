#include "nn/attention.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/ops.h"
#include "nn/dropout.h"
#include "nn/init.h"

namespace distgrad::nn {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// bool [L, S]: true where query i may attend to key j <= i.
Tensor causal_allowed(int64_t queries, int64_t keys, Device device) {
  const Tensor rows = untracked::unsqueeze(arange(queries, {.dtype = kInt64, .device = device}), 1);
  const Tensor columns = untracked::unsqueeze(arange(keys, {.dtype = kInt64, .device = device}), 0);
  return untracked::ge(rows, columns);
}

void check_same_floating(const char* op, const char* name, const Tensor& t, const Tensor& like) {
  t.check_defined(op);
  DISTGRAD_CHECK(t.dtype() == like.dtype() && t.device() == like.device() && is_floating(t.dtype()), op,
                 ": expected a floating ", name, " with the query's dtype and device (", dtype_name(like.dtype()),
                 " on ", like.device().str(), "), found a ", t.describe());
}

// `scores` [..., L, S] with a mask added: bool true = allowed when `true_allows`, else true =
// masked out; a floating mask is added.
Tensor apply_mask(const char* op, const Tensor& scores, const Tensor& mask, bool true_allows) {
  DISTGRAD_CHECK(mask.device() == scores.device(), op, ": expected the mask on ", scores.device().str(), ", found a ",
                 mask.describe());
  if (mask.dtype() == kBool) return masked_fill(scores, true_allows ? logical_not(mask) : mask, -kInfinity);
  DISTGRAD_CHECK(mask.dtype() == scores.dtype(), op, ": expected a bool mask or one of the scores' dtype ",
                 dtype_name(scores.dtype()), ", found a ", mask.describe());
  return add(scores, mask);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const ScaledDotProductAttentionOptions& options, Generator& generator) {
  const char* op = "scaled_dot_product_attention";
  query.check_defined(op);
  DISTGRAD_CHECK(is_floating(query.dtype()) && query.dim() >= 2, op,
                 ": expected a floating query of shape [..., L, E], found a ", query.describe());
  check_same_floating(op, "key", key, query);
  check_same_floating(op, "value", value, query);
  const Shape leading(query.sizes().begin(), query.sizes().end() - 2);
  const bool shapes_agree = key.dim() == query.dim() && value.dim() == query.dim() &&
                            Shape(key.sizes().begin(), key.sizes().end() - 2) == leading &&
                            Shape(value.sizes().begin(), value.sizes().end() - 2) == leading &&
                            key.size(-1) == query.size(-1) && value.size(-2) == key.size(-2);
  DISTGRAD_CHECK(shapes_agree, op, ": expected query [..., L, E], key [..., S, E] and value [..., S, Ev] with the ",
                 "same leading dims, found ", shape_str(query.sizes()), ", ", shape_str(key.sizes()), " and ",
                 shape_str(value.sizes()));
  DISTGRAD_CHECK(!(options.is_causal && options.attn_mask.defined()), op,
                 ": is_causal and attn_mask exclude each other (give one)");
  DISTGRAD_CHECK(options.dropout_p >= 0 && options.dropout_p <= 1, op, ": expected dropout_p in [0, 1], found ",
                 options.dropout_p);
  const int64_t queries = query.size(-2), keys = key.size(-2), width = query.size(-1);
  const int64_t batch = shape_numel(leading);
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(width)));
  Shape score_sizes = leading;
  score_sizes.insert(score_sizes.end(), {queries, keys});
  Tensor scores = reshape(
      matmul(reshape(query, {batch, queries, width}), transpose(reshape(key, {batch, keys, width}), 1, 2)) * scale,
      score_sizes);
  if (options.is_causal) scores = apply_mask(op, scores, causal_allowed(queries, keys, query.device()), true);
  if (options.attn_mask.defined()) scores = apply_mask(op, scores, options.attn_mask, true);
  Tensor weights = softmax(scores, -1);
  if (options.dropout_p > 0) weights = dropout(weights, options.dropout_p, true, generator);
  Shape out_sizes = leading;
  out_sizes.insert(out_sizes.end(), {queries, value.size(-1)});
  return reshape(matmul(reshape(weights, {batch, queries, keys}), reshape(value, {batch, keys, value.size(-1)})),
                 out_sizes);
}

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options,
                                       TensorOptions tensor_options)
    : embed_dim_(embed_dim), num_heads_(num_heads), options_(options) {
  DISTGRAD_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
                 "MultiheadAttention: expected num_heads to divide embed_dim, found embed_dim=", embed_dim,
                 ", num_heads=", num_heads);
  DISTGRAD_CHECK(options.dropout >= 0 && options.dropout <= 1,
                 "MultiheadAttention: expected a dropout probability in [0, 1], found ", options.dropout);
  DISTGRAD_CHECK(is_floating(tensor_options.dtype), "MultiheadAttention: expected a floating dtype, found ",
                 dtype_name(tensor_options.dtype));
  const TensorOptions plain{.dtype = tensor_options.dtype, .device = tensor_options.device};
  const double xavier_bound = std::sqrt(6.0 / static_cast<double>(embed_dim + 3 * embed_dim));
  in_proj_weight = init::uniform({3 * embed_dim, embed_dim}, -xavier_bound, xavier_bound, plain);
  register_parameter("in_proj_weight", in_proj_weight);
  if (options.bias) {
    in_proj_bias = zeros({3 * embed_dim}, plain);
    register_parameter("in_proj_bias", in_proj_bias);
  }
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, options.bias, plain));
  if (options.bias) untracked::zero_(out_proj->bias);
}

std::string MultiheadAttention::name() const {
  return absl::StrCat("MultiheadAttention(embed_dim=", embed_dim_, ", num_heads=", num_heads_,
                      ", dropout=", options_.dropout, ", batch_first=", options_.batch_first ? "true" : "false", ")");
}

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const MultiheadAttentionCall& call) {
  const std::string op = name();
  for (const Tensor* t : {&query, &key, &value}) {
    t->check_defined("MultiheadAttention");
    DISTGRAD_CHECK(t->dim() == 3 && t->size(2) == embed_dim_, op, ": expected query, key and value of shape ",
                   options_.batch_first ? "[batch, sequence, " : "[sequence, batch, ", embed_dim_, "], found ",
                   shape_str(query.sizes()), ", ", shape_str(key.sizes()), " and ", shape_str(value.sizes()));
  }
  // Batch first from here on: [N, L, E] and [N, S, E].
  const Tensor q_in = options_.batch_first ? query : transpose(query, 0, 1);
  const Tensor k_in = options_.batch_first ? key : transpose(key, 0, 1);
  const Tensor v_in = options_.batch_first ? value : transpose(value, 0, 1);
  const int64_t batch = q_in.size(0), queries = q_in.size(1), keys = k_in.size(1);
  DISTGRAD_CHECK(k_in.size(0) == batch && v_in.size(0) == batch && v_in.size(1) == keys, op,
                 ": expected key and value with the query's batch and one sequence length, found ",
                 shape_str(query.sizes()), ", ", shape_str(key.sizes()), " and ", shape_str(value.sizes()));
  const int64_t heads = num_heads_, head_dim = embed_dim_ / num_heads_;
  const auto projection = [&](const Tensor& x, int64_t part) {
    const Tensor w = narrow(in_proj_weight, 0, part * embed_dim_, embed_dim_);
    const Tensor b = in_proj_bias.defined() ? narrow(in_proj_bias, 0, part * embed_dim_, embed_dim_) : Tensor();
    // [N, T, E] -> [N, heads, T, head_dim]
    return transpose(reshape(linear(x, w, b), {batch, x.size(1), heads, head_dim}), 1, 2);
  };
  const Tensor q = projection(q_in, 0), k = projection(k_in, 1), v = projection(v_in, 2);

  // The masks as one additive [N or 1, heads or 1, L, S] tensor of the scores' dtype (PyTorch's
  // canonical float mask: -inf where bool true).
  const TensorOptions float_options{.dtype = q.dtype(), .device = q.device()};
  const auto as_additive = [&](const Tensor& mask, const char* what) {
    DISTGRAD_CHECK(mask.device() == q.device() && (mask.dtype() == kBool || mask.dtype() == q.dtype()), op,
                   ": expected a bool or ", dtype_name(q.dtype()), " ", what, " on ", q.device().str(), ", found a ",
                   mask.describe());
    return mask.dtype() == kBool ? masked_fill(zeros(mask.sizes(), float_options), mask, -kInfinity) : mask;
  };
  Tensor additive;
  if (call.attn_mask.defined()) {
    const Tensor& m = call.attn_mask;
    const bool per_head = m.dim() == 3 && m.size(0) == batch * heads && m.size(1) == queries && m.size(2) == keys;
    DISTGRAD_CHECK((m.dim() == 2 && m.size(0) == queries && m.size(1) == keys) || per_head, op,
                   ": expected an attn_mask of shape [", queries, ", ", keys, "] or [", batch * heads, ", ", queries,
                   ", ", keys, "], found ", shape_str(m.sizes()));
    additive =
        per_head ? reshape(as_additive(m, "attn_mask"), {batch, heads, queries, keys}) : as_additive(m, "attn_mask");
  } else if (call.is_causal) {
    additive = as_additive(logical_not(causal_allowed(queries, keys, q.device())), "causal mask");
  }
  if (call.key_padding_mask.defined()) {
    const Tensor& m = call.key_padding_mask;
    DISTGRAD_CHECK(m.dim() == 2 && m.size(0) == batch && m.size(1) == keys, op,
                   ": expected a key_padding_mask of shape [", batch, ", ", keys, "], found ", shape_str(m.sizes()));
    const Tensor padding = reshape(as_additive(m, "key_padding_mask"), {batch, 1, 1, keys});
    additive = additive.defined() ? add(additive, padding) : padding;
  }

  const double dropout_p = is_training() ? options_.dropout : 0.0;
  AttentionOutput result;
  Tensor attended;  // [N, heads, L, head_dim]
  if (call.need_weights) {
    Tensor scores =
        matmul(reshape(q * std::sqrt(1.0 / static_cast<double>(head_dim)), {batch * heads, queries, head_dim}),
               transpose(reshape(k, {batch * heads, keys, head_dim}), 1, 2));
    scores = reshape(scores, {batch, heads, queries, keys});
    if (additive.defined()) scores = add(scores, additive);
    Tensor weights = softmax(scores, -1);
    if (dropout_p > 0) weights = dropout(weights, dropout_p, true);
    result.weights = call.average_attn_weights ? mean(weights, {1}) : weights;  // after dropout, as PyTorch's
    attended =
        reshape(matmul(reshape(weights, {batch * heads, queries, keys}), reshape(v, {batch * heads, keys, head_dim})),
                {batch, heads, queries, head_dim});
  } else {
    attended = scaled_dot_product_attention(q, k, v, {.attn_mask = additive, .dropout_p = dropout_p});
  }
  // [N, heads, L, head_dim] -> [N, L, E], projected.
  Tensor output = out_proj->forward(reshape(transpose(attended, 1, 2), {batch, queries, embed_dim_}));
  result.output = options_.batch_first ? output : transpose(output, 0, 1);
  return result;
}

Tensor MultiheadAttention::forward(const Tensor& input) {
  return forward(input, input, input, {.need_weights = false}).output;
}

}  // namespace distgrad::nn
