// clip_grad_norm_ and clip_grad_value_ against values worked out by hand (torch.nn.utils's
// formulas: coefficient min(1, max_norm / (total + 1e-6))), and their errors.
#include "nn/clip_grad.h"

#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "core/creation.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::Pointwise;
using testing::values;

// A leaf whose grad() is `grad`.
Tensor with_grad(const std::vector<double>& grad) {
  Tensor parameter = zeros({static_cast<int64_t>(grad.size())}, {.dtype = kFloat64}).requires_grad_();
  parameter.set_grad(from_vector<double>(grad));
  return parameter;
}

TEST(ClipGradNorm, ScalesEveryGradientByTheTotalNorm) {
  const Tensor a = with_grad({3, 4}), b = with_grad({12}), without = zeros({2}).requires_grad_();
  const Tensor total = nn::clip_grad_norm_({a, without, b}, 6.5);
  EXPECT_EQ(total.item<double>(), 13);  // sqrt(9 + 16 + 144)
  const double coefficient = 6.5 / (13 + 1e-6);
  EXPECT_THAT(values(a.grad()), Pointwise(DoubleNear(1e-15), {3 * coefficient, 4 * coefficient}));
  EXPECT_THAT(values(b.grad()), Pointwise(DoubleNear(1e-15), {12 * coefficient}));
  EXPECT_FALSE(without.grad().defined());
}

TEST(ClipGradNorm, LeavesGradientsWithinTheNormAlone) {
  const Tensor a = with_grad({3, 4});
  EXPECT_EQ(nn::clip_grad_norm_({a}, 10).item<double>(), 5);
  EXPECT_THAT(values(a.grad()), ElementsAre(3, 4));
}

TEST(ClipGradNorm, OtherNorms) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor a = with_grad({3, -4}), b = with_grad({-2});
  EXPECT_EQ(nn::clip_grad_norm_({a, b}, 100, inf).item<double>(), 4);
  EXPECT_EQ(nn::clip_grad_norm_({a, b}, 100, 1).item<double>(), 9);
  EXPECT_EQ(nn::clip_grad_norm_({a, b}, 2, inf).item<double>(), 4);
  const double coefficient = 2 / (4 + 1e-6);
  EXPECT_THAT(values(a.grad()), Pointwise(DoubleNear(1e-15), {3 * coefficient, -4 * coefficient}));
}

TEST(ClipGradNorm, KeepsTheGradientsDtypeAndReturnsZeroWithoutGradients) {
  Tensor p = zeros({2}).requires_grad_();
  p.set_grad(from_vector<float>({6, 8}));
  const Tensor total = nn::clip_grad_norm_({p}, 5);
  EXPECT_EQ(total.dtype(), kFloat32);
  EXPECT_NEAR(p.grad().to_vector<float>()[1], 4.0, 1e-5);
  EXPECT_EQ(nn::clip_grad_norm_({zeros({1}).requires_grad_()}, 1).item<double>(), 0);
}

TEST(ClipGradNorm, ANonFiniteTotalIsAnErrorOnlyWhenAsked) {
  const Tensor a = with_grad({std::nan(""), 1});
  EXPECT_ERROR_CONTAINS(nn::clip_grad_norm_({a}, 1, 2, /*error_if_nonfinite=*/true),
                        "clip_grad_norm_: the total norm of order 2 of the gradients is nan");
  nn::clip_grad_norm_({a}, 1);  // scaled by the NaN, as in PyTorch
  EXPECT_TRUE(std::isnan(values(a.grad())[1]));
  EXPECT_ERROR_CONTAINS(nn::clip_grad_norm_({a}, 1, 0), "expected norm_type > 0");
}

TEST(ClipGradNorm, AnIntegerGradientIsAnErrorNamingItsParameter) {
  const Tensor counts = zeros({2}, {.dtype = kInt64});
  counts.set_grad(zeros({2}, {.dtype = kInt64}));
  EXPECT_ERROR_CONTAINS(nn::clip_grad_norm_({with_grad({1}), counts}, 1),
                        "clip_grad_norm_: parameter 1's gradient is a int64 tensor",
                        "expected a floating-point tensor");
}

TEST(ClipGradValue, ClampsEveryElement) {
  const Tensor a = with_grad({-3, 0.5, 7}), without = zeros({1}).requires_grad_();
  nn::clip_grad_value_({a, without}, 1);
  EXPECT_THAT(values(a.grad()), ElementsAre(-1, 0.5, 1));
  EXPECT_ERROR_CONTAINS(nn::clip_grad_value_({a}, -1), "expected clip_value >= 0, found -1");
}

}  // namespace
}  // namespace distgrad
