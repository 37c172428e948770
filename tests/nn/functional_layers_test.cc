// torch.nn.functional's layers and the modules built on them (layer_norm, group_norm, dropout,
// embedding, pad, adaptive_avg_pool2d, scaled_dot_product_attention, linear, batch_norm with
// running statistics; LayerNorm, GroupNorm, Dropout, Embedding, MultiheadAttention,
// TransformerEncoderLayer, ModuleList, ModuleDict): values against loops written out here,
// gradients of first and second order in float64, PyTorch's parameter names, and errors.
#include <cmath>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "nn/attention.h"
#include "nn/batch_norm.h"
#include "nn/containers.h"
#include "nn/conv2d.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "nn/padding.h"
#include "nn/pooling.h"
#include "nn/transformer.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad {
namespace {

using autograd::TensorList;
using ::testing::ElementsAre;
using testing::expect_module_gradients_match;
using testing::expect_values_near;
using testing::random_leaf;
using testing::values;

constexpr TensorOptions kDouble{.dtype = kFloat64};

void expect_gradients_match(const autograd::DifferentiableFunction& fn, const TensorList& inputs) {
  EXPECT_TRUE(autograd::gradcheck(fn, inputs));
  EXPECT_TRUE(autograd::gradgradcheck(fn, inputs));
}

// Each row of length `width` of `data` normalised with its own mean and biased variance.
std::vector<double> normalized_rows(const std::vector<double>& data, size_t width, double eps) {
  std::vector<double> out(data.size());
  for (size_t row = 0; row < data.size() / width; ++row) {
    double mean = 0, var = 0;
    for (size_t j = 0; j < width; ++j) mean += data[row * width + j] / static_cast<double>(width);
    for (size_t j = 0; j < width; ++j) var += std::pow(data[row * width + j] - mean, 2) / static_cast<double>(width);
    for (size_t j = 0; j < width; ++j) out[row * width + j] = (data[row * width + j] - mean) / std::sqrt(var + eps);
  }
  return out;
}

TEST(LayerNorm, NormalizesTheLastDimsThenScalesAndShifts) {
  const Tensor x = randn({2, 3, 4}, kDouble);
  const Tensor weight = randn({4}, kDouble), bias = randn({4}, kDouble);
  std::vector<double> expected = normalized_rows(values(x), 4, 1e-5);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = expected[i] * values(weight)[i % 4] + values(bias)[i % 4];
  expect_values_near(nn::layer_norm(x, {4}, weight, bias), expected);
  // Over the last two dims: rows of 12.
  expect_values_near(nn::layer_norm(x, {3, 4}), normalized_rows(values(x), 12, 1e-5));
}

TEST(LayerNorm, GradientsOfBothOrders) {
  expect_gradients_match([](const TensorList& x) { return TensorList{nn::layer_norm(x[0], {3}, x[1], x[2])}; },
                         {random_leaf({2, 3}), random_leaf({3}), random_leaf({3})});
  nn::LayerNorm norm(Shape{2, 3}, {}, kDouble);
  untracked::copy_(norm.weight, randn({2, 3}, kDouble));
  expect_module_gradients_match(norm, random_leaf({2, 2, 3}));
}

TEST(LayerNorm, ModuleParametersAndErrors) {
  nn::LayerNorm norm(Shape{8});
  EXPECT_THAT(norm.named_parameters().keys(), ElementsAre("weight", "bias"));
  EXPECT_EQ(values(norm.weight), std::vector<double>(8, 1.0));
  nn::LayerNorm bare(Shape{8}, {.elementwise_affine = false});
  EXPECT_TRUE(bare.named_parameters().empty());
  EXPECT_ERROR_CONTAINS(norm.forward(zeros({2, 7})),
                        "layer_norm: expected input of shape [*, 8] (normalized_shape [8]), found [2, 7]");
  EXPECT_ERROR_CONTAINS(nn::layer_norm(zeros({2, 4}), {4}, zeros({3})),
                        "layer_norm: expected a weight of shape [4], found [3]");
}

TEST(GroupNorm, NormalizesEachGroupOfChannels) {
  const Tensor x = randn({2, 4, 3}, kDouble);  // two groups of 2 channels x 3 positions: rows of 6
  const Tensor weight = randn({4}, kDouble), bias = randn({4}, kDouble);
  std::vector<double> expected = normalized_rows(values(x), 6, 1e-5);
  for (size_t i = 0; i < expected.size(); ++i) {
    const size_t channel = i / 3 % 4;
    expected[i] = expected[i] * values(weight)[channel] + values(bias)[channel];
  }
  expect_values_near(nn::group_norm(x, 2, weight, bias), expected);
  expect_gradients_match([](const TensorList& x) { return TensorList{nn::group_norm(x[0], 2, x[1], x[2])}; },
                         {random_leaf({2, 4, 2, 2}), random_leaf({4}), random_leaf({4})});
  EXPECT_ERROR_CONTAINS(nn::group_norm(x, 3), "group_norm: expected num_groups to divide the 4 channels");
  EXPECT_ERROR_CONTAINS(nn::GroupNorm(3, 4), "GroupNorm: expected num_groups to divide num_channels");
  nn::GroupNorm module(2, 4, {}, kDouble);
  EXPECT_THAT(module.named_parameters().keys(), ElementsAre("weight", "bias"));
  expect_values_near(module.forward(x), normalized_rows(values(x), 6, 1e-5));
}

TEST(Dropout, ZeroesWithProbabilityPAndScalesTheRest) {
  manual_seed(3);
  const Tensor x = ones({20000}, kDouble);
  const std::vector<double> y = values(nn::dropout(x, 0.3));
  int64_t zeros_seen = 0;
  for (double v : y) {
    if (v == 0) {
      ++zeros_seen;
    } else {
      EXPECT_DOUBLE_EQ(v, 1 / 0.7);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros_seen) / 20000, 0.3, 0.02);
  EXPECT_EQ(values(nn::dropout(x, 0.3, /*training=*/false)), values(x));
  EXPECT_EQ(values(nn::dropout(x, 1.0)), std::vector<double>(20000, 0.0));
  EXPECT_ERROR_CONTAINS(nn::dropout(x, 1.5), "dropout: expected a dropout probability in [0, 1], found 1.5");
}

TEST(Dropout, ReproducibleFromTheSeedAndDifferentAcrossSeeds) {
  const Tensor x = ones({64}, kDouble);
  manual_seed(11);
  const std::vector<double> first = values(nn::dropout(x, 0.5));
  manual_seed(11);
  EXPECT_EQ(values(nn::dropout(x, 0.5)), first);
  manual_seed(12);  // another rank's seed: another mask
  EXPECT_NE(values(nn::dropout(x, 0.5)), first);
}

TEST(Dropout, TheGradientIsTheSameMaskAndTheModuleFollowsTrainingMode) {
  manual_seed(5);
  const Tensor x = random_leaf({50});
  const Tensor y = nn::dropout(x, 0.4);
  sum(y).backward();
  const std::vector<double> kept = values(y), grad = values(x.grad()), input = values(x);
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_DOUBLE_EQ(grad[i] * input[i], kept[i]);
  nn::Dropout module(0.4);
  module.eval();
  EXPECT_EQ(values(module.forward(x)), input);
  EXPECT_EQ(module.name(), "Dropout(p=0.4)");
}

TEST(Embedding, LooksUpRowsAndSkipsThePaddingRowsGradient) {
  const Tensor weight = random_leaf({5, 3});
  const Tensor ids = from_vector<int64_t>({4, 0, 4, 2}, {2, 2});
  const Tensor out = nn::embedding(ids, weight, /*padding_idx=*/0);
  EXPECT_THAT(out.sizes(), ElementsAre(2, 2, 3));
  const std::vector<double> w = values(weight.detach()), o = values(out);
  const int64_t rows[] = {4, 0, 4, 2};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(o[i * 3 + j], w[rows[i] * 3 + j]);
  }
  sum(out).backward();
  // Row 4 used twice, row 2 once, row 0 is padding: no gradient.
  EXPECT_EQ(values(weight.grad()), (std::vector<double>{0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 2, 2, 2}));
  EXPECT_ERROR_CONTAINS(nn::embedding(from_vector<int64_t>({5}), weight),
                        "embedding: index 5 is out of range for a table of 5 rows [0, 5)");
  EXPECT_ERROR_CONTAINS(nn::embedding(from_vector<double>({1}), weight), "embedding: expected int64 indices");
  nn::Embedding module(6, 2, {.padding_idx = -1}, kDouble);
  EXPECT_EQ(values(untracked::select(module.weight, 0, 5)), (std::vector<double>{0, 0}));
  EXPECT_EQ(module.name(), "Embedding(6, 2, padding_idx=5)");
  // The lookup's own gradient (the padding row, deliberately not differentiated, is unused here).
  expect_gradients_match([&ids](const TensorList& x) { return TensorList{nn::embedding(ids, x[0], 1)}; },
                         {random_leaf({5, 3})});
}

TEST(Pad, EveryModeAgainstTheElementsItCopies) {
  const Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values_near(nn::pad(x, {1, 2}, nn::PadMode::kConstant, 9), {9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9, 9});
  expect_values_near(nn::pad(x, {2, 1}, nn::PadMode::kReflect), {3, 2, 1, 2, 3, 2, 6, 5, 4, 5, 6, 5});
  expect_values_near(nn::pad(x, {1, 2}, nn::PadMode::kReplicate), {1, 1, 2, 3, 3, 3, 4, 4, 5, 6, 6, 6});
  expect_values_near(nn::pad(x, {2, 1}, nn::PadMode::kCircular), {2, 3, 1, 2, 3, 1, 5, 6, 4, 5, 6, 4});
  expect_values_near(nn::pad(x, {-1, 0, 1, 0}), {0, 0, 2, 3, 5, 6});  // crop the last dim, pad the first
  EXPECT_THAT(nn::pad(x, {0, 0, 1, 1}, nn::PadMode::kReflect).sizes(), ElementsAre(4, 3));
  for (nn::PadMode mode :
       {nn::PadMode::kConstant, nn::PadMode::kReflect, nn::PadMode::kReplicate, nn::PadMode::kCircular}) {
    expect_gradients_match(
        [mode](const TensorList& x) {
          return TensorList{nn::pad(x[0], {1, 2, 2, 1}, mode)};
        },
        {random_leaf({3, 4})});
  }
  EXPECT_ERROR_CONTAINS(nn::pad(x, {3, 0}, nn::PadMode::kReflect),
                        "pad: reflect padding of 3 and 0 needs amounts smaller than the size 3 of dim 1");
  EXPECT_ERROR_CONTAINS(nn::pad(x, {1}), "pad: expected (before, after) pairs");
}

TEST(AdaptiveAvgPool2d, BinsOfPyTorchsBoundaries) {
  const Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {1, 3, 5});
  // Rows in 2 bins: {0, 1} and {1, 2}; columns in 3 bins: {0, 1}, {1, 2, 3}, {3, 4}.
  const auto bin_mean = [&](int r0, int r1, int c0, int c1) {
    double total = 0;
    for (int r = r0; r <= r1; ++r) {
      for (int c = c0; c <= c1; ++c) total += values(x)[r * 5 + c];
    }
    return total / ((r1 - r0 + 1) * (c1 - c0 + 1));
  };
  expect_values_near(nn::adaptive_avg_pool2d(x, {2, 3}),
                     {bin_mean(0, 1, 0, 1), bin_mean(0, 1, 1, 3), bin_mean(0, 1, 3, 4), bin_mean(1, 2, 0, 1),
                      bin_mean(1, 2, 1, 3), bin_mean(1, 2, 3, 4)});
  expect_values_near(nn::adaptive_avg_pool2d(x, 1), {8});
  expect_values_near(nn::AdaptiveAvgPool2d({3, 5}).forward(x), values(x));
  expect_gradients_match(
      [](const TensorList& x) {
        return TensorList{nn::adaptive_avg_pool2d(x[0], {2, 3}), nn::adaptive_avg_pool2d(x[0], {2, 2})};
      },
      {random_leaf({2, 1, 4, 5})});
}

TEST(MaxPool2d, CeilModeKeepsTheLastPartialWindow) {
  const Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {1, 3, 5});
  // 2 x 2 windows, stride 2: without ceil_mode [1, 2]; with it [2, 3], the last row and column partial.
  EXPECT_THAT(nn::MaxPool2d(2).forward(x).sizes(), ElementsAre(1, 1, 2));
  const Tensor pooled = nn::MaxPool2d(2, std::nullopt, 0, /*ceil_mode=*/true).forward(x);
  expect_values_near(pooled, {7, 9, 10, 12, 14, 15});
  // A window that would start in the right padding is dropped (PyTorch's rule): 5 wide, kernel 2,
  // stride 2, padding 1 gives 3 columns, not 4.
  EXPECT_THAT(
      max_pool2d(x, {.kernel_size = {2, 2}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true}).values.sizes(),
      ElementsAre(1, 2, 3));
}

// softmax(q k^T * scale + mask) v by loops, for [L, E], [S, E], [S, Ev] double matrices; `allowed`
// (L x S, row-major) says which pairs take part.
std::vector<double> attention_by_loops(const std::vector<double>& q, const std::vector<double>& k,
                                       const std::vector<double>& v, int64_t L, int64_t S, int64_t E, int64_t Ev,
                                       const std::vector<bool>& allowed) {
  std::vector<double> out(L * Ev, 0.0);
  for (int64_t i = 0; i < L; ++i) {
    std::vector<double> scores(S);
    double biggest = -INFINITY;
    for (int64_t j = 0; j < S; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += q[i * E + e] * k[j * E + e];
      scores[j] = allowed[i * S + j] ? dot / std::sqrt(static_cast<double>(E)) : -INFINITY;
      biggest = std::max(biggest, scores[j]);
    }
    double total = 0;
    for (double& s : scores) total += (s = std::exp(s - biggest));
    for (int64_t j = 0; j < S; ++j) {
      for (int64_t e = 0; e < Ev; ++e) out[i * Ev + e] += scores[j] / total * v[j * Ev + e];
    }
  }
  return out;
}

TEST(ScaledDotProductAttention, MatchesLoopsWithAndWithoutMasks) {
  const Tensor q = randn({3, 4}, kDouble), k = randn({5, 4}, kDouble), v = randn({5, 2}, kDouble);
  std::vector<bool> all(15, true), causal(15), chosen(15);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) {
      causal[i * 5 + j] = j <= i;
      chosen[i * 5 + j] = (i + j) % 2 == 0;
    }
  }
  expect_values_near(nn::scaled_dot_product_attention(q, k, v),
                     attention_by_loops(values(q), values(k), values(v), 3, 5, 4, 2, all));
  expect_values_near(nn::scaled_dot_product_attention(q, k, v, {.is_causal = true}),
                     attention_by_loops(values(q), values(k), values(v), 3, 5, 4, 2, causal));
  const Tensor mask = untracked::to(from_vector(std::vector<double>(chosen.begin(), chosen.end()), {3, 5}), kBool);
  expect_values_near(nn::scaled_dot_product_attention(q, k, v, {.attn_mask = mask}),
                     attention_by_loops(values(q), values(k), values(v), 3, 5, 4, 2, chosen));
  // A floating mask of 0 and -inf is the same bool mask.
  const Tensor additive = untracked::masked_fill(zeros({3, 5}, kDouble), untracked::logical_not(mask), -INFINITY);
  expect_values_near(nn::scaled_dot_product_attention(q, k, v, {.attn_mask = additive}),
                     attention_by_loops(values(q), values(k), values(v), 3, 5, 4, 2, chosen));
}

TEST(ScaledDotProductAttention, BatchedGradientsAndErrors) {
  expect_gradients_match(
      [](const TensorList& x) {
        return TensorList{nn::scaled_dot_product_attention(x[0], x[1], x[2], {.is_causal = true}),
                          nn::scaled_dot_product_attention(x[0], x[1], x[2], {.scale = 0.3})};
      },
      {random_leaf({2, 2, 3, 4}), random_leaf({2, 2, 3, 4}), random_leaf({2, 2, 3, 2})});
  EXPECT_ERROR_CONTAINS(nn::scaled_dot_product_attention(zeros({3, 4}), zeros({5, 3}), zeros({5, 2})),
                        "scaled_dot_product_attention: expected query [..., L, E], key [..., S, E] and value "
                        "[..., S, Ev] with the same leading dims, found [3, 4], [5, 3] and [5, 2]");
  EXPECT_ERROR_CONTAINS(nn::scaled_dot_product_attention(zeros({3, 4}), zeros({5, 4}), zeros({5, 2}, kDouble)),
                        "expected a floating value with the query's dtype and device");
}

TEST(MultiheadAttention, EachHeadIsAttentionOfItsProjections) {
  manual_seed(1);
  nn::MultiheadAttention attention(4, 2, {.batch_first = true}, kDouble);
  untracked::copy_(attention.in_proj_bias, randn({12}, kDouble));
  const Tensor x = randn({1, 3, 4}, kDouble), memory = randn({1, 5, 4}, kDouble);
  const auto [output, weights] = attention.forward(x, memory, memory);
  // By hand: project, attend per head by loops, concatenate, project out.
  const Tensor w = attention.in_proj_weight.detach(), b = attention.in_proj_bias.detach();
  const auto project = [&](const Tensor& input, int part) {
    return untracked::add(
        untracked::matmul(untracked::select(input, 0, 0), untracked::t(untracked::narrow(w, 0, part * 4, 4))),
        untracked::narrow(b, 0, part * 4, 4));
  };
  const Tensor q = project(x, 0), k = project(memory, 1), v = project(memory, 2);
  std::vector<double> heads(3 * 4);
  for (int h = 0; h < 2; ++h) {
    const auto head_of = [h](const Tensor& t) {
      return values(untracked::contiguous(untracked::narrow(t, 1, h * 2, 2)));
    };
    const std::vector<double> out =
        attention_by_loops(head_of(q), head_of(k), head_of(v), 3, 5, 2, 2, std::vector<bool>(15, true));
    for (int i = 0; i < 3; ++i) {
      for (int e = 0; e < 2; ++e) heads[i * 4 + h * 2 + e] = out[i * 2 + e];
    }
  }
  const Tensor expected =
      untracked::add(untracked::matmul(from_vector(heads, {3, 4}), untracked::t(attention.out_proj->weight.detach())),
                     attention.out_proj->bias.detach());
  expect_values_near(output, values(expected));
  EXPECT_THAT(weights.sizes(), ElementsAre(1, 3, 5));  // averaged over the heads
  expect_values_near(sum(weights, {2}), {1, 1, 1});
  // The other layout and no weights: the same output.
  nn::MultiheadAttention sequence_first(4, 2, {}, kDouble);
  sequence_first.load_state_dict(attention.state_dict());
  const nn::AttentionOutput transposed = sequence_first.forward(transpose(x, 0, 1), transpose(memory, 0, 1),
                                                                transpose(memory, 0, 1), {.need_weights = false});
  EXPECT_FALSE(transposed.weights.defined());
  expect_values_near(transpose(transposed.output, 0, 1), values(output));
}

TEST(MultiheadAttention, MasksTorchsParameterNamesAndGradients) {
  nn::MultiheadAttention attention(4, 2, {.batch_first = true}, kDouble);
  EXPECT_THAT(attention.named_parameters().keys(),
              ElementsAre("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"));
  const Tensor x = randn({2, 3, 4}, kDouble);
  // Padding the last key of the first sample equals dropping it.
  const Tensor padding = untracked::to(from_vector<double>({0, 0, 1, 0, 0, 0}, {2, 3}), kBool);
  const Tensor padded = attention.forward(x, x, x, {.key_padding_mask = padding}).output;
  const Tensor first = untracked::narrow(x, 0, 0, 1);
  const Tensor dropped =
      attention.forward(first, untracked::narrow(first, 1, 0, 2), untracked::narrow(first, 1, 0, 2)).output;
  expect_values_near(untracked::narrow(padded, 0, 0, 1), values(dropped));
  // A causal bool attn_mask (true: not allowed) equals is_causal.
  const Tensor upper = untracked::to(from_vector<double>({0, 1, 1, 0, 0, 1, 0, 0, 0}, {3, 3}), kBool);
  expect_values_near(attention.forward(x, x, x, {.attn_mask = upper}).output,
                     values(attention.forward(x, x, x, {.is_causal = true}).output));
  expect_module_gradients_match(attention, random_leaf({2, 3, 4}));
  EXPECT_ERROR_CONTAINS(nn::MultiheadAttention(6, 4), "MultiheadAttention: expected num_heads to divide embed_dim");
}

TEST(TransformerEncoderLayer, TorchsSubmodulesAndTheirComposition) {
  nn::TransformerEncoderLayer layer(4, 2, {.dim_feedforward = 6, .dropout = 0.0, .batch_first = true}, kDouble);
  EXPECT_THAT(layer.named_parameters().keys(),
              ElementsAre("self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                          "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                          "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"));
  const Tensor x = randn({2, 3, 4}, kDouble);
  // Post-norm: norm2(h + ff(h)) with h = norm1(x + attention(x)).
  const Tensor h = layer.norm1->forward(x + layer.self_attn->forward(x));
  const Tensor expected = layer.norm2->forward(h + layer.linear2->forward(relu(layer.linear1->forward(h))));
  expect_values_near(layer.forward(x), values(expected));
  expect_module_gradients_match(layer, random_leaf({2, 3, 4}));
  nn::TransformerEncoderLayer pre_norm(4, 2, {.dim_feedforward = 6, .dropout = 0.0, .norm_first = true}, kDouble);
  expect_module_gradients_match(pre_norm, random_leaf({3, 2, 4}));
}

TEST(TransformerEncoderLayer, DropoutOnlyInTraining) {
  manual_seed(2);
  nn::TransformerEncoderLayer layer(4, 2, {.dim_feedforward = 8, .dropout = 0.5, .batch_first = true}, kDouble);
  const Tensor x = randn({2, 3, 4}, kDouble);
  EXPECT_NE(values(layer.forward(x)), values(layer.forward(x)));
  layer.eval();
  EXPECT_EQ(values(layer.forward(x)), values(layer.forward(x)));
}

TEST(GroupedConv2d, EqualsEachGroupsConvolutionSideBySide) {
  const Tensor x = randn({2, 6, 5, 4}, kDouble), weight = randn({4, 3, 3, 2}, kDouble), bias = randn({4}, kDouble);
  const Conv2dOptions options{.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}};
  Conv2dOptions grouped = options;
  grouped.groups = 2;
  const Tensor expected = cat({conv2d(narrow(x, 1, 0, 3), narrow(weight, 0, 0, 2), narrow(bias, 0, 0, 2), options),
                               conv2d(narrow(x, 1, 3, 3), narrow(weight, 0, 2, 2), narrow(bias, 0, 2, 2), options)},
                              1);
  expect_values_near(conv2d(x, weight, bias, grouped), values(expected));
  // Depthwise, unbatched: each channel with its own filter.
  const Tensor image = randn({3, 4, 4}, kDouble), filters = randn({3, 1, 2, 2}, kDouble);
  std::vector<Tensor> channels;
  for (int64_t c = 0; c < 3; ++c) channels.push_back(conv2d(narrow(image, 0, c, 1), narrow(filters, 0, c, 1)));
  expect_values_near(conv2d(image, filters, {}, {.groups = 3}), values(cat(channels, 0)));
  EXPECT_ERROR_CONTAINS(conv2d(x, weight, {}, {.groups = 4}),
                        "conv2d: expected groups to divide the input's 6 channels");
  EXPECT_ERROR_CONTAINS(nn::Conv2d(6, 4, 3, {.groups = 4}),
                        "Conv2d: expected groups to divide in_channels and out_channels");
}

// PyTorch's derivatives at the kinks and at 0 (its elu_double_backward and log_sigmoid_double_backward).
TEST(Activations, SecondDerivativesAtZeroAreTorchs) {
  const auto second_derivative = [](const std::function<Tensor(const Tensor&)>& f, double at) {
    const Tensor x = from_vector<double>({at});
    x.requires_grad_();
    const Tensor slope = autograd::grad({f(x)}, {x}, {.create_graph = true})[0];
    return std::pair{slope.item<double>(), autograd::grad({slope}, {x})[0].item<double>()};
  };
  const auto [elu_slope, elu_curvature] = second_derivative([](const Tensor& x) { return elu(x, 0.7); }, 0.0);
  EXPECT_DOUBLE_EQ(elu_slope, 0.7);
  EXPECT_EQ(elu_curvature, 0.0);
  EXPECT_NEAR(second_derivative([](const Tensor& x) { return elu(x, 0.7); }, -0.5).second, 0.7 * std::exp(-0.5), 1e-15);
  const auto [logsigmoid_slope, logsigmoid_curvature] =
      second_derivative([](const Tensor& x) { return logsigmoid(x); }, 0.0);
  EXPECT_DOUBLE_EQ(logsigmoid_slope, 0.5);
  EXPECT_DOUBLE_EQ(logsigmoid_curvature, -0.25);
  const auto slope_at = [](const std::function<Tensor(const Tensor&)>& f, double at) {
    const Tensor x = from_vector<double>({at});
    x.requires_grad_();
    return autograd::grad({f(x)}, {x})[0].item<double>();
  };
  EXPECT_DOUBLE_EQ(slope_at([](const Tensor& x) { return leaky_relu(x, 0.2); }, 0.0), 0.2);
  EXPECT_EQ(slope_at([](const Tensor& x) { return hardtanh(x, -1, 1); }, 1.0), 0.0);
}

TEST(Containers, ModuleListAndModuleDictRegisterTheirModules) {
  nn::ModuleList list{std::make_shared<nn::Linear>(2, 3), std::make_shared<nn::Linear>(3, 1)};
  EXPECT_THAT(list.named_parameters().keys(), ElementsAre("0.weight", "0.bias", "1.weight", "1.bias"));
  EXPECT_THAT(list[1]->forward(zeros({5, 3})).sizes(), ElementsAre(5, 1));
  EXPECT_ERROR_CONTAINS(list[2], "ModuleList: index 2 is out of range for 2 modules");
  nn::ModuleDict dict{{"encoder", std::make_shared<nn::Linear>(2, 2)}};
  dict.insert("head", std::make_shared<nn::Linear>(2, 1, false));
  EXPECT_THAT(dict.keys(), ElementsAre("encoder", "head"));
  EXPECT_THAT(dict.named_parameters().keys(), ElementsAre("encoder.weight", "encoder.bias", "head.weight"));
  EXPECT_TRUE(dict.contains("head"));
  EXPECT_ERROR_CONTAINS(dict["decoder"], "ModuleDict: no module under \"decoder\"; the keys are [encoder, head]");
  EXPECT_ERROR_CONTAINS(dict.insert("head", std::make_shared<nn::Linear>(1, 1)), "head");
}

TEST(FunctionalLinearAndBatchNorm, MatchTheirModules) {
  nn::Linear fc(3, 2, true, kDouble);
  const Tensor x = randn({4, 3}, kDouble);
  EXPECT_EQ(values(nn::linear(x, fc.weight, fc.bias)), values(fc.forward(x)));
  EXPECT_ERROR_CONTAINS(nn::linear(x, zeros({2, 4}, kDouble)),
                        "linear: expected input of shape [..., 4] for a weight of shape [2, 4], found [4, 3]");
  const Tensor images = randn({5, 3, 2, 2}, kDouble);
  Tensor running_mean = zeros({3}, kDouble), running_var = ones({3}, kDouble);
  nn::BatchNorm2d module(3, {}, kDouble);
  const Tensor by_function = nn::batch_norm(images, running_mean, running_var, module.weight, module.bias, true);
  expect_values_near(by_function, values(module.forward(images)));
  expect_values_near(running_mean, values(module.running_mean));
  expect_values_near(running_var, values(module.running_var));
  module.eval();
  expect_values_near(nn::batch_norm(images, running_mean, running_var, module.weight, module.bias),
                     values(module.forward(images)));
  EXPECT_ERROR_CONTAINS(nn::batch_norm(images, {}, {}), "batch_norm: evaluation (training = false) needs running_mean");
  EXPECT_ERROR_CONTAINS(nn::batch_norm(images, zeros({4}, kDouble), ones({3}, kDouble)),
                        "batch_norm: expected a running_mean of shape [3], dtype float64 on cpu, found a float64 "
                        "tensor of shape [4]");
}

// The layers' argument errors, each naming the layer and what it found.
TEST(LayerErrors, NameTheLayerAndWhatWasFound) {
  const Tensor x = randn({2, 3, 4}, kDouble);
  EXPECT_ERROR_CONTAINS(nn::pad(x, {-3, -2}), "pad: cropping dim 2 of size 4 by -3 and -2 leaves a negative size");
  nn::MultiheadAttention attention(4, 2, {.batch_first = true}, kDouble);
  EXPECT_ERROR_CONTAINS(attention.forward(x, x, x, {.attn_mask = zeros({3, 2}, {.dtype = kBool})}),
                        "expected an attn_mask of shape [3, 3] or [4, 3, 3], found [3, 2]");
  EXPECT_ERROR_CONTAINS(attention.forward(x, x, x, {.key_padding_mask = zeros({2, 3}, {.dtype = kInt64})}),
                        "expected a bool or float64 key_padding_mask on cpu, found a int64 tensor of shape [2, 3]");
  EXPECT_ERROR_CONTAINS(attention.forward(x, x, x, {.key_padding_mask = zeros({3, 3}, {.dtype = kBool})}),
                        "expected a key_padding_mask of shape [2, 3], found [3, 3]");
  nn::TransformerEncoderLayer encoder(4, 2, {.dim_feedforward = 8, .batch_first = true}, kDouble);
  EXPECT_ERROR_CONTAINS(encoder.forward(randn({2, 3, 5}, kDouble)),
                        "expected src of shape [batch, sequence, 4], found [2, 3, 5]");
  nn::GroupNorm group_norm(2, 4, {}, kDouble);
  EXPECT_ERROR_CONTAINS(group_norm.forward(x), "expected input of shape [N, 4, *], found [2, 3, 4]");
  EXPECT_ERROR_CONTAINS(nn::Embedding(5, 2, {.padding_idx = 5}), "Embedding: expected padding_idx in [-5, 5), found 5");
  EXPECT_ERROR_CONTAINS(nn::Dropout(1.5), "expected a dropout probability in [0, 1], found 1.5");
  EXPECT_ERROR_CONTAINS(nn::dropout(x, -0.1), "dropout: expected a dropout probability in [0, 1], found -0.1");
  EXPECT_ERROR_CONTAINS(nn::layer_norm(x, {4}, {}, {}, -1), "layer_norm: expected a non-negative eps, found -1");
  EXPECT_ERROR_CONTAINS(nn::LayerNorm({4}, {}, {.dtype = kInt64}), "LayerNorm: expected a floating dtype, found int64");
}

}  // namespace
}  // namespace distgrad
