// The losses: hand-computed values for every reduction, gradients of first and second order
// (gradcheck, gradgradcheck in float64), PyTorch's behaviour at saturated probabilities, and
// every error by message.
#include "nn/loss.h"

#include <cmath>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad {
namespace {

using autograd::TensorList;
using nn::Reduction;
using testing::expect_values_near;
using testing::leaf;
using testing::values;

constexpr Reduction kAllReductions[] = {Reduction::kNone, Reduction::kMean, Reduction::kSum};

Tensor labels(std::vector<int64_t> classes) { return from_vector(classes); }

TEST(MseLoss, EveryReduction) {
  const Tensor input = from_vector<double>({1, 2, 3});
  const Tensor target = from_vector<double>({0, 2, 5});  // squared errors 1, 0, 4
  EXPECT_EQ(values(nn::mse_loss(input, target, Reduction::kNone)), (std::vector<double>{1, 0, 4}));
  EXPECT_DOUBLE_EQ(nn::mse_loss(input, target).item<double>(), 5.0 / 3);
  EXPECT_DOUBLE_EQ(nn::mse_loss(input, target, Reduction::kSum).item<double>(), 5);
  EXPECT_EQ(nn::mse_loss(input, target).dim(), 0);
}

TEST(MseLoss, Gradients) {
  for (Reduction reduction : kAllReductions) {
    const auto fn = [reduction](const TensorList& x) { return TensorList{nn::mse_loss(x[0], x[1], reduction)}; };
    const TensorList inputs{leaf({0.5, -1, 2, 0.25, 3, -2}, {2, 3}), leaf({1, 0, -1, 2, 2.5, 0}, {2, 3})};
    EXPECT_TRUE(autograd::gradcheck(fn, inputs));
    EXPECT_TRUE(autograd::gradgradcheck(fn, inputs));
  }
}

TEST(MseLoss, Errors) {
  EXPECT_ERROR_CONTAINS(nn::mse_loss(zeros({4, 1}), zeros({4})),
                        "mse_loss: expected input and target of the same shape, found input [4, 1] and target [4]");
  EXPECT_ERROR_CONTAINS(
      nn::mse_loss(zeros({2}), zeros({2}, {.dtype = kFloat64})),
      "mse_loss: expected a target with the dtype and device of the input (float32 on cpu), found a float64 "
      "tensor of shape [2] on cpu");
  EXPECT_ERROR_CONTAINS(nn::mse_loss(zeros({2}, {.dtype = kInt64}), zeros({2}, {.dtype = kInt64})),
                        "mse_loss: expected a float32 or float64 input, found a int64 tensor");
}

TEST(NllLoss, EveryReduction) {
  const Tensor log_probs = from_vector<double>({-1, -2, -3, -0.5, -1.5, -2.5}, {2, 3});
  const Tensor target = labels({2, 0});
  EXPECT_EQ(values(nn::nll_loss(log_probs, target, Reduction::kNone)), (std::vector<double>{3, 0.5}));
  EXPECT_DOUBLE_EQ(nn::nll_loss(log_probs, target).item<double>(), 1.75);
  EXPECT_DOUBLE_EQ(nn::nll_loss(log_probs, target, Reduction::kSum).item<double>(), 3.5);
}

TEST(CrossEntropy, EveryReduction) {
  const Tensor logits = from_vector<double>({1, 2, 3, 1, -1, 0}, {2, 3});
  const Tensor target = labels({2, 0});
  // logsumexp - the target's logit: log(1 + e^-1 + e^-2) for both rows.
  const double per_sample = std::log(1 + std::exp(-1) + std::exp(-2));
  expect_values_near(nn::cross_entropy(logits, target, Reduction::kNone), {per_sample, per_sample});
  EXPECT_NEAR(nn::cross_entropy(logits, target).item<double>(), per_sample, 1e-15);
  EXPECT_NEAR(nn::cross_entropy(logits, target, Reduction::kSum).item<double>(), 2 * per_sample, 1e-15);
}

TEST(NllLossAndCrossEntropy, Gradients) {
  const Tensor target = labels({1, 0, 2, 1});
  for (Reduction reduction : kAllReductions) {
    const auto nll = [&](const TensorList& x) {
      return TensorList{nn::nll_loss(log_softmax(x[0], 1), target, reduction)};
    };
    const auto ce = [&](const TensorList& x) { return TensorList{nn::cross_entropy(x[0], target, reduction)}; };
    const TensorList inputs{leaf({0.5, -1, 2, 0.25, 3, -2, 1, 1.5, -0.5, 0, 0.75, -1.25}, {4, 3})};
    EXPECT_TRUE(autograd::gradcheck(nll, inputs));
    EXPECT_TRUE(autograd::gradgradcheck(nll, inputs));
    EXPECT_TRUE(autograd::gradcheck(ce, inputs));
    EXPECT_TRUE(autograd::gradgradcheck(ce, inputs));
  }
}

TEST(NllLossAndCrossEntropy, Errors) {
  const Tensor scores = zeros({2, 3});
  EXPECT_ERROR_CONTAINS(nn::nll_loss(scores, labels({0, 3})),
                        "nll_loss: target index 3 is out of range for 3 classes [0, 3)");
  EXPECT_ERROR_CONTAINS(nn::cross_entropy(scores, labels({-1, 2})),
                        "cross_entropy: target index -1 is out of range for 3 classes [0, 3)");
  EXPECT_ERROR_CONTAINS(
      nn::nll_loss(scores, zeros({2})),
      "nll_loss: expected a target of int64 class indices, found a float32 tensor of shape [2] on cpu");
  EXPECT_ERROR_CONTAINS(nn::cross_entropy(scores, labels({0, 1, 2})),
                        "cross_entropy: expected a target of shape [2] for logits of shape [2, 3], found [3]");
  EXPECT_ERROR_CONTAINS(nn::nll_loss(zeros({3}), labels({0})),
                        "nll_loss: expected log_probs of shape [N, C] and a floating dtype, found a float32 tensor of "
                        "shape [3] on cpu");
  EXPECT_ERROR_CONTAINS(nn::cross_entropy(zeros({2, 3, 4}), labels({0, 1})),
                        "cross_entropy: expected logits of shape [N, C] and a floating dtype, found a float32 tensor "
                        "of shape [2, 3, 4] on cpu");
}

TEST(BinaryCrossEntropy, EveryReduction) {
  const Tensor p = from_vector<double>({0.25, 0.5, 0.8});
  const Tensor target = from_vector<double>({1, 0, 1});
  const std::vector<double> expected{-std::log(0.25), -std::log(0.5), -std::log(0.8)};
  expect_values_near(nn::binary_cross_entropy(p, target, Reduction::kNone), expected, 1e-15);
  EXPECT_NEAR(nn::binary_cross_entropy(p, target).item<double>(), (expected[0] + expected[1] + expected[2]) / 3, 1e-15);
  EXPECT_NEAR(nn::binary_cross_entropy(p, target, Reduction::kSum).item<double>(),
              expected[0] + expected[1] + expected[2], 1e-15);
}

TEST(BinaryCrossEntropy, Gradients) {
  for (Reduction reduction : kAllReductions) {
    const auto fn = [reduction](const TensorList& x) {
      return TensorList{nn::binary_cross_entropy(x[0], x[1], reduction)};
    };
    const TensorList inputs{leaf({0.2, 0.5, 0.9, 0.35, 0.6, 0.75}, {2, 3}), leaf({1, 0, 0.3, 1, 0, 0.8}, {2, 3})};
    EXPECT_TRUE(autograd::gradcheck(fn, inputs));
    EXPECT_TRUE(autograd::gradgradcheck(fn, inputs));
  }
}

TEST(BinaryCrossEntropy, SaturatedProbabilitiesStayFiniteAsInPyTorch) {
  // Values computed with PyTorch 2: F.binary_cross_entropy(p, t, reduction='sum') and its
  // gradients. Each log is clamped at -100; the gradient with respect to p divides by
  // max(p (1 - p), 1e-12).
  const Tensor p = leaf({0, 1, 0.25, 0.5}, {4});
  const Tensor target = leaf({1, 0, 1, 0}, {4});
  const Tensor loss = nn::binary_cross_entropy(p, target, Reduction::kSum);
  EXPECT_NEAR(loss.item<double>(), 202.07944154167984, 1e-12);
  loss.backward();
  const std::vector<double> grad_p = values(p.grad());
  EXPECT_NEAR(grad_p[0], -1e12, 1e4);  // PyTorch: -1000000003995.8 (its 1e-12 passes through float32)
  EXPECT_NEAR(grad_p[1], 1e12, 1e4);
  EXPECT_DOUBLE_EQ(grad_p[2], -4);
  EXPECT_DOUBLE_EQ(grad_p[3], 2);
  const std::vector<double> grad_target = values(target.grad());
  EXPECT_EQ(grad_target[0], INFINITY);  // log(1 - p) - log(p), unclamped, as in PyTorch
  EXPECT_EQ(grad_target[1], -INFINITY);
  EXPECT_NEAR(grad_target[2], 1.0986122886681098, 1e-15);
  EXPECT_EQ(grad_target[3], 0);
}

TEST(BinaryCrossEntropy, Errors) {
  EXPECT_ERROR_CONTAINS(nn::binary_cross_entropy(from_vector<double>({0.5, 1.5}), from_vector<double>({1, 0})),
                        "binary_cross_entropy: expected probabilities in [0, 1], found 1.5");
  EXPECT_ERROR_CONTAINS(nn::binary_cross_entropy(from_vector<double>({-0.5, 0.5}), from_vector<double>({1, 0})),
                        "found -0.5");
  EXPECT_ERROR_CONTAINS(nn::binary_cross_entropy(zeros({2, 1}), zeros({2})),
                        "binary_cross_entropy: expected probabilities and target of the same shape, found "
                        "probabilities [2, 1] and target [2]");
  EXPECT_ERROR_CONTAINS(
      nn::binary_cross_entropy(zeros({2}), zeros({2}, {.dtype = kFloat64})),
      "binary_cross_entropy: expected a target with the dtype and device of the probabilities (float32 on cpu)");
}

// Per-sample cross entropy by hand: logsumexp(logits[i]) - logits[i, target[i]].
std::vector<double> per_sample_cross_entropy(const std::vector<double>& logits, const std::vector<int64_t>& target,
                                             int64_t classes) {
  std::vector<double> losses;
  for (size_t i = 0; i < target.size(); ++i) {
    double total = 0;
    for (int64_t c = 0; c < classes; ++c) total += std::exp(logits[i * classes + c]);
    losses.push_back(std::log(total) - logits[i * classes + target[i]]);
  }
  return losses;
}

TEST(CrossEntropy, ClassWeightsAndIgnoreIndexAsPyTorch) {
  const std::vector<double> raw{0.5, -1, 2, 0.25, 3, -2, 1, 1.5, -0.5, 0, 0.75, -1.25};
  const Tensor logits = from_vector(raw, {4, 3});
  const std::vector<int64_t> classes{1, 0, 2, 1};
  const std::vector<double> weight{0.2, 1.5, 0.7};
  const std::vector<double> losses = per_sample_cross_entropy(raw, classes, 3);
  double weighted_sum = 0, weight_sum = 0;
  for (int i = 0; i < 4; ++i) {
    weighted_sum += weight[classes[i]] * losses[i];
    weight_sum += weight[classes[i]];
  }
  const nn::CrossEntropyOptions weighted{.weight = from_vector(weight)};
  // kMean divides by the sum of the targets' weights, not by N.
  EXPECT_NEAR(nn::cross_entropy(logits, labels(classes), weighted).item<double>(), weighted_sum / weight_sum, 1e-14);
  // Ignored samples (target 1 here) count in neither the sum nor the divisor.
  const Tensor some_ignored = labels({1, 0, 2, -100});
  EXPECT_NEAR(nn::cross_entropy(logits, some_ignored, {.ignore_index = -100}).item<double>(),
              (losses[0] + losses[1] + losses[2]) / 3, 1e-14);
  expect_values_near(
      nn::cross_entropy(logits, labels({1, 7, 2, 1}), {.ignore_index = 7, .reduction = Reduction::kNone}),
      {losses[0], 0, losses[2], losses[3]}, 1e-14);
  EXPECT_TRUE(
      std::isnan(nn::nll_loss(log_softmax(logits, 1), labels({5, 5, 5, 5}), {.ignore_index = 5}).item<double>()));
  EXPECT_ERROR_CONTAINS(nn::cross_entropy(logits, labels({1, 3, 2, 1}), {.ignore_index = 7}),
                        "cross_entropy: target index 3 is out of range for 3 classes [0, 3) (ignore_index is 7)");
  EXPECT_ERROR_CONTAINS(nn::cross_entropy(logits, labels(classes), {.weight = from_vector<double>({1, 2})}),
                        "cross_entropy: expected a class weight of shape [3], dtype float64 on cpu, found a float64 "
                        "tensor of shape [2]");
}

TEST(CrossEntropy, LabelSmoothingIsTheLossAgainstTheSmoothedTarget) {
  const std::vector<double> raw{0.5, -1, 2, 0.25, 3, -2};
  const Tensor logits = from_vector(raw, {2, 3});
  const double s = 0.2;
  // The smoothed one-hot target as probabilities: the same loss.
  const Tensor smoothed = from_vector<double>({s / 3, (1 - s) + s / 3, s / 3, (1 - s) + s / 3, s / 3, s / 3}, {2, 3});
  EXPECT_NEAR(nn::cross_entropy(logits, labels({1, 0}), {.label_smoothing = s}).item<double>(),
              nn::cross_entropy(logits, smoothed).item<double>(), 1e-14);
  // Probability targets by hand: -sum_c t log softmax.
  const std::vector<double> log_probs = values(log_softmax(logits, 1)), t = values(smoothed);
  double expected = 0;
  for (int i = 0; i < 6; ++i) expected -= t[i] * log_probs[i] / 2;
  EXPECT_NEAR(nn::cross_entropy(logits, smoothed).item<double>(), expected, 1e-14);
  // With class weights, PyTorch's formula: (1 - s) * weighted nll + s / C * sum_i sum_c -w_c log p / sum_i w_{y_i}.
  const std::vector<double> w{0.5, 2, 1};
  const std::vector<double> losses = per_sample_cross_entropy(raw, {1, 0}, 3);
  const double nll = (w[1] * losses[0] + w[0] * losses[1]) / (w[1] + w[0]);
  double smooth = 0;
  for (int i = 0; i < 6; ++i) smooth -= w[i % 3] * log_probs[i];
  EXPECT_NEAR(
      nn::cross_entropy(logits, labels({1, 0}), {.weight = from_vector(w), .label_smoothing = s}).item<double>(),
      (1 - s) * nll + s / 3 * smooth / (w[1] + w[0]), 1e-14);
  for (Reduction reduction : kAllReductions) {
    const auto fn = [reduction, &w](const TensorList& x) {
      return TensorList{
          nn::cross_entropy(
              x[0], labels({1, 0, 2}),
              {.weight = from_vector(w), .ignore_index = 2, .label_smoothing = 0.1, .reduction = reduction}),
          nn::cross_entropy(x[0], softmax(x[1], 1), {.reduction = reduction})};
    };
    const TensorList inputs{leaf({0.5, -1, 2, 0.25, 3, -2, 1, 1.5, -0.5}, {3, 3}),
                            leaf({0.1, 0.2, -0.3, 1, 0, -1, 0.5, 0.5, 0}, {3, 3})};
    EXPECT_TRUE(autograd::gradcheck(fn, inputs));
    EXPECT_TRUE(autograd::gradgradcheck(fn, inputs));
  }
  EXPECT_ERROR_CONTAINS(nn::cross_entropy(logits, labels({1, 0}), {.label_smoothing = 1.5}),
                        "cross_entropy: expected label_smoothing in [0, 1], found 1.5");
}

TEST(BinaryCrossEntropyWithLogits, EqualsTheLossOfTheSigmoidAndStaysFinite) {
  const Tensor logits = from_vector<double>({-3, -0.5, 0, 1, 4, 2}, {2, 3});
  const Tensor target = from_vector<double>({0, 1, 0.5, 1, 0, 0.3}, {2, 3});
  expect_values_near(nn::binary_cross_entropy_with_logits(logits, target, {.reduction = Reduction::kNone}),
                     values(nn::binary_cross_entropy(sigmoid(logits), target, Reduction::kNone)), 1e-14);
  // pos_weight p per class: -(p t log s + (1 - t) log(1 - s)); weight scales each element.
  const std::vector<double> pos{2, 0.5, 3}, x = values(logits), y = values(target);
  std::vector<double> expected;
  for (int i = 0; i < 6; ++i) {
    const double sig = 1 / (1 + std::exp(-x[i]));
    expected.push_back(-(pos[i % 3] * y[i] * std::log(sig) + (1 - y[i]) * std::log(1 - sig)) * 0.5);
  }
  expect_values_near(nn::binary_cross_entropy_with_logits(logits, target,
                                                          {.weight = full({2, 3}, 0.5, {.dtype = kFloat64}),
                                                           .pos_weight = from_vector(pos),
                                                           .reduction = Reduction::kNone}),
                     expected, 1e-14);
  // Large logits: finite where sigmoid saturates (PyTorch gives 1000 and 0).
  expect_values_near(nn::binary_cross_entropy_with_logits(from_vector<double>({1000, -1000}),
                                                          from_vector<double>({0, 0}), {.reduction = Reduction::kNone}),
                     {1000, 0});
  const auto fn = [](const TensorList& x) {
    return TensorList{nn::binary_cross_entropy_with_logits(x[0], x[1], {.pos_weight = x[2]})};
  };
  EXPECT_TRUE(autograd::gradcheck(
      fn, {leaf({-3, -0.5, 0.2, 1, 4, 2}, {2, 3}), leaf({0, 1, 0.5, 1, 0, 0.3}, {2, 3}), leaf({2, 0.5, 3}, {3})}));
  EXPECT_TRUE(autograd::gradgradcheck(
      fn, {leaf({-3, -0.5, 0.2, 1, 4, 2}, {2, 3}), leaf({0, 1, 0.5, 1, 0, 0.3}, {2, 3}), leaf({2, 0.5, 3}, {3})}));
  EXPECT_ERROR_CONTAINS(
      nn::binary_cross_entropy_with_logits(logits, target, {.pos_weight = from_vector<double>({1, 2})}),
      "binary_cross_entropy_with_logits: expected a pos_weight that broadcasts to the logits' shape "
      "[2, 3], found [2]");
}

TEST(SmoothL1AndHuber, BothSidesOfTheThreshold) {
  const Tensor input = from_vector<double>({0.5, -2, 3, 0.1});
  const Tensor target = from_vector<double>({0, 0, 0.5, 0.1});  // differences 0.5, -2, 2.5, 0
  expect_values_near(nn::smooth_l1_loss(input, target, Reduction::kNone), {0.125, 1.5, 2, 0});
  expect_values_near(nn::smooth_l1_loss(input, target, Reduction::kNone, 2.0), {0.0625, 1, 1.5, 0});
  expect_values_near(nn::smooth_l1_loss(input, target, Reduction::kNone, 0.0), {0.5, 2, 2.5, 0});
  expect_values_near(nn::huber_loss(input, target, Reduction::kNone, 2.0), {0.125, 2, 3, 0});
  EXPECT_NEAR(nn::huber_loss(input, target).item<double>(), (0.125 + 1.5 + 2 + 0) / 4, 1e-15);
  for (Reduction reduction : kAllReductions) {
    const auto fn = [reduction](const TensorList& x) {
      return TensorList{nn::smooth_l1_loss(x[0], x[1], reduction, 0.7), nn::huber_loss(x[0], x[1], reduction, 0.7)};
    };
    const TensorList inputs{leaf({0.5, -2, 3, 0.1}, {4}), leaf({0.2, 0, 0.5, 1.2}, {4})};
    EXPECT_TRUE(autograd::gradcheck(fn, inputs));
    EXPECT_TRUE(autograd::gradgradcheck(fn, inputs));
  }
  EXPECT_ERROR_CONTAINS(nn::huber_loss(input, target, Reduction::kMean, 0), "huber_loss: expected a positive delta");
  EXPECT_ERROR_CONTAINS(nn::smooth_l1_loss(input, target, Reduction::kBatchMean),
                        "smooth_l1_loss: Reduction::kBatchMean is kl_div's only");
}

TEST(KlDiv, PointwiseReductionsAndLogTarget) {
  const Tensor log_q = log_softmax(from_vector<double>({0.5, -1, 2, 0.25, 3, -2}, {2, 3}), 1);
  const Tensor p = from_vector<double>({0.2, 0.8, 0, 0.5, 0.25, 0.25}, {2, 3});
  const std::vector<double> lq = values(log_q), pv = values(p);
  std::vector<double> pointwise;
  double total = 0;
  for (int i = 0; i < 6; ++i) {
    pointwise.push_back(pv[i] == 0 ? 0 : pv[i] * (std::log(pv[i]) - lq[i]));
    total += pointwise.back();
  }
  expect_values_near(nn::kl_div(log_q, p, Reduction::kNone), pointwise, 1e-15);
  EXPECT_NEAR(nn::kl_div(log_q, p).item<double>(), total / 6, 1e-15);
  EXPECT_NEAR(nn::kl_div(log_q, p, Reduction::kBatchMean).item<double>(), total / 2, 1e-15);
  // log_target: the same divergence from log p (here p without zeros).
  const Tensor q_target = softmax(from_vector<double>({1, 0, -1, 0.5, 0.5, 2}, {2, 3}), 1);
  EXPECT_NEAR(nn::kl_div(log_q, log(q_target), Reduction::kSum, true).item<double>(),
              nn::kl_div(log_q, q_target, Reduction::kSum).item<double>(), 1e-14);
  const auto fn = [](const TensorList& x) {
    return TensorList{nn::kl_div(log_softmax(x[0], 1), softmax(x[1], 1), Reduction::kBatchMean),
                      nn::kl_div(log_softmax(x[0], 1), log_softmax(x[1], 1), Reduction::kSum, true)};
  };
  const TensorList inputs{leaf({0.5, -1, 2, 0.25, 3, -2}, {2, 3}), leaf({1, 0, -1, 0.5, 0.5, 2}, {2, 3})};
  EXPECT_TRUE(autograd::gradcheck(fn, inputs));
  EXPECT_TRUE(autograd::gradgradcheck(fn, inputs));
}

}  // namespace
}  // namespace distgrad
