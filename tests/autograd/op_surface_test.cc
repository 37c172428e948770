// Tests of the one user-facing op surface: the operators are autograd's, and they record the
// graph even where core's untracked kernels are in scope too (that made `a * b` ambiguous, and a
// user who reached for the wrong namespace silently lost the graph). Also the operators' values,
// with the scalar on either side and in place.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "autograd/autograd.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/creation.h"
#include "core/ops.h"

namespace distgrad {
namespace {

using namespace untracked;  // every kernel name in scope beside the differentiable ones
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::Pointwise;

Tensor f64(std::vector<double> values) { return from_vector<double>(values); }
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(OpSurface, OperatorsWithTheKernelsInScopeAreTheDifferentiableOnes) {
  const Tensor x = f64({1, 2, 4}).requires_grad_();
  const Tensor y = f64({3, -1, 0.5}).requires_grad_();
  const Tensor product = x * y + 2.0 * x - y / 2.0 - (1.0 - x) / y;
  ASSERT_TRUE(product.requires_grad()) << "an operator dropped the graph";
  autograd::backward({distgrad::sum(product)});
  // d/dx = y + 2 + 1/y; d/dy = x - 1/2 + (1 - x)/y^2
  const std::vector<double> dx = {3 + 2 + 1.0 / 3, -1 + 2 - 1, 0.5 + 2 + 2};
  const std::vector<double> dy = {1 - 0.5 + 0.0, 2 - 0.5 - 1, 4 - 0.5 - 3 / 0.25};
  EXPECT_THAT(values(x.grad()), Pointwise(DoubleNear(1e-12), dx));
  EXPECT_THAT(values(y.grad()), Pointwise(DoubleNear(1e-12), dy));
}

TEST(OpSurface, TheDifferentiableOpsRecordNothingUnderNoGrad) {
  const Tensor x = f64({1, 2}).requires_grad_();
  autograd::NoGradGuard no_grad;
  const Tensor y = distgrad::exp(x * 3.0);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

TEST(OpSurface, ArithmeticOperators) {
  const Tensor a = f64({1, 2, 4});
  const Tensor b = f64({4, -1, 0.5});
  EXPECT_THAT(values(a + b), ElementsAre(5, 1, 4.5));
  EXPECT_THAT(values(a - b), ElementsAre(-3, 3, 3.5));
  EXPECT_THAT(values(a * b), ElementsAre(4, -2, 2));
  EXPECT_THAT(values(a / b), ElementsAre(0.25, -2, 8));
  EXPECT_THAT(values(-a), ElementsAre(-1, -2, -4));
  EXPECT_THAT(values(a + 1.0), ElementsAre(2, 3, 5));
  EXPECT_THAT(values(a - 1.0), ElementsAre(0, 1, 3));
  EXPECT_THAT(values(a * 3.0), ElementsAre(3, 6, 12));
  EXPECT_THAT(values(a / 2.0), ElementsAre(0.5, 1, 2));
  EXPECT_THAT(values(2.0 + a), ElementsAre(3, 4, 6));
  EXPECT_THAT(values(2.0 - a), ElementsAre(1, 0, -2));
  EXPECT_THAT(values(2.0 * a), ElementsAre(2, 4, 8));
  EXPECT_THAT(values(2.0 / a), ElementsAre(2, 1, 0.5));
  EXPECT_THAT((10.0 - from_vector<int64_t>({1, 20})).to_vector<int64_t>(), ElementsAre(9, -10));
}

TEST(OpSurface, ComparisonOperators) {
  const Tensor a = f64({1, 2, 3});
  const Tensor b = f64({2, 2, 2});
  EXPECT_THAT((a < b).to_vector<bool>(), ElementsAre(true, false, false));
  EXPECT_THAT((a <= b).to_vector<bool>(), ElementsAre(true, true, false));
  EXPECT_THAT((a > b).to_vector<bool>(), ElementsAre(false, false, true));
  EXPECT_THAT((a >= b).to_vector<bool>(), ElementsAre(false, true, true));
  EXPECT_THAT((a > 1.5).to_vector<bool>(), ElementsAre(false, true, true));
  EXPECT_THAT((a <= 1.0).to_vector<bool>(), ElementsAre(true, false, false));
}

TEST(OpSurface, InPlaceOperators) {
  Tensor a = f64({2, 4, 6});
  const Tensor b = f64({1, 2, 3});
  a += b;
  EXPECT_THAT(values(a), ElementsAre(3, 6, 9));
  a -= b;
  EXPECT_THAT(values(a), ElementsAre(2, 4, 6));
  a *= b;
  EXPECT_THAT(values(a), ElementsAre(2, 8, 18));
  a /= b;
  EXPECT_THAT(values(a), ElementsAre(2, 4, 6));
  a += 1.0;
  a -= 3.0;
  a *= 2.0;
  a /= 4.0;
  EXPECT_THAT(values(a), ElementsAre(0, 1, 2));
}

}  // namespace
}  // namespace distgrad
