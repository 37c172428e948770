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

}  // namespace
}  // namespace distgrad
