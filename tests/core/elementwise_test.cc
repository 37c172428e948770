// Tests of the elementwise ops against references computed here with <cmath> on doubles,
// plus broadcasting, strided inputs, int64 arithmetic, in-place forms and operators.
#include <cmath>
#include <cstdint>
#include <limits>

#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using namespace untracked;
using ::testing::ElementsAre;
using testing::transposed_copy_of;
using testing::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Inputs on both sides of zero, away from any op's singularity.
const std::vector<double> kInputs = {-3.7, -2.5, -1.0, -0.3, 0.0, 0.4, 1.0, 2.2, 3.7};
const std::vector<double> kOthers = {1.5, -0.5, 2.0, 0.25, -4.0, 3.0, -1.0, 0.75, 8.0};
const std::vector<double> kPositive = {0.05, 0.4, 1.0, 2.2, 3.7, 10.0, 123.456};

template <typename F>
std::vector<double> map_each(const std::vector<double>& x, F f) {
  std::vector<double> out;
  for (double v : x) out.push_back(f(v));
  return out;
}

template <typename F>
std::vector<double> map_each(const std::vector<double>& a, const std::vector<double>& b, F f) {
  std::vector<double> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(f(a[i], b[i]));
  return out;
}

Tensor f64(const std::vector<double>& v) { return from_vector(v); }

// Each element within `tolerance` relative to max(1, |expected|); NaN and infinities must match exactly.
void expect_close(const Tensor& actual, const std::vector<double>& expected, double tolerance = 1e-15) {
  const std::vector<double> got = values(actual);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << " is " << got[i] << ", expected NaN";
    } else if (std::isinf(expected[i])) {
      EXPECT_EQ(got[i], expected[i]) << "element " << i;
    } else {
      EXPECT_NEAR(got[i], expected[i], tolerance * std::max(1.0, std::abs(expected[i]))) << "element " << i;
    }
  }
}

std::vector<bool> bools(const Tensor& t) {
  EXPECT_EQ(t.dtype(), kBool);
  return t.to_vector<bool>();
}

TEST(Elementwise, ArithmeticIsExactInFloat64) {
  const Tensor a = f64(kInputs), b = f64(kOthers);
  expect_close(add(a, b), map_each(kInputs, kOthers, [](double x, double y) { return x + y; }), 0);
  expect_close(sub(a, b), map_each(kInputs, kOthers, [](double x, double y) { return x - y; }), 0);
  expect_close(mul(a, b), map_each(kInputs, kOthers, [](double x, double y) { return x * y; }), 0);
  expect_close(div(a, b), map_each(kInputs, kOthers, [](double x, double y) { return x / y; }), 0);
  EXPECT_EQ(add(a, b).dtype(), kFloat64);
}

TEST(Elementwise, ScalarOperands) {
  const Tensor a = f64(kInputs);
  expect_close(add(a, 2.5), map_each(kInputs, [](double x) { return x + 2.5; }), 0);
  expect_close(sub(a, 2.5), map_each(kInputs, [](double x) { return x - 2.5; }), 0);
  expect_close(mul(a, -3.0), map_each(kInputs, [](double x) { return x * -3.0; }), 0);
  expect_close(div(a, 4.0), map_each(kInputs, [](double x) { return x / 4.0; }), 0);
}

TEST(Elementwise, DivisionByZeroFollowsIeee) {
  const std::vector<double> v = values(div(f64({1, -1, 0}), f64({0, 0, 0})));
  EXPECT_EQ(v[0], kInf);
  EXPECT_EQ(v[1], -kInf);
  EXPECT_TRUE(std::isnan(v[2]));
}

TEST(Elementwise, PowOfTwoTensors) {
  const std::vector<double> exponents = {2.0, -1.5, 0.0, 3.3, 0.5, -2.0, 1.0};
  expect_close(pow(f64(kPositive), f64(exponents)),
               map_each(kPositive, exponents, [](double x, double y) { return std::pow(x, y); }));
}

TEST(Elementwise, PowWithAScalarExponent) {
  expect_close(pow(f64(kInputs), 2.0), map_each(kInputs, [](double x) { return x * x; }), 0);
  expect_close(pow(f64(kInputs), 3.0), map_each(kInputs, [](double x) { return x * x * x; }));
  expect_close(pow(f64(kPositive), 0.5), map_each(kPositive, [](double x) { return std::sqrt(x); }));
  expect_close(pow(f64(kPositive), -1.0), map_each(kPositive, [](double x) { return 1 / x; }));
  EXPECT_TRUE(std::isnan(pow(f64({-2.0}), 0.5).item<double>()));
}

TEST(Elementwise, PowWithAScalarBase) {
  expect_close(pow(2.0, f64(kInputs)), map_each(kInputs, [](double x) { return std::exp2(x); }));
  expect_close(pow(0.5, f64(kInputs)), map_each(kInputs, [](double x) { return std::exp2(-x); }));
}

TEST(Elementwise, Int64PowIsExact) {
  const Tensor base = from_vector<int64_t>({2, -3, 0, 1, -1, 5, 7, 3, 0});
  const Tensor exponent = from_vector<int64_t>({3, 3, 0, -2, -3, -1, 0, 39, 5});
  Tensor result = pow(base, exponent);
  EXPECT_EQ(result.dtype(), kInt64);
  // 3^39 = 4052555153018976267 is above 2^53: it must not pass through a double.
  EXPECT_THAT(result.to_vector<int64_t>(), ElementsAre(8, -27, 1, 1, -1, 0, 1, 4052555153018976267, 0));
}

TEST(Elementwise, Int64PowWithScalars) {
  const Tensor base = from_vector<int64_t>({-2, -1, 0, 1, 2, 3});
  EXPECT_THAT(pow(base, 2.0).to_vector<int64_t>(), ElementsAre(4, 1, 0, 1, 4, 9));
  // A negative exponent leaves only 1 and -1 non-zero (integer division of 1 by base^n).
  EXPECT_THAT(pow(base, -1.0).to_vector<int64_t>(), ElementsAre(0, -1, 0, 1, 0, 0));
  EXPECT_THAT(pow(base, -2.0).to_vector<int64_t>(), ElementsAre(0, 1, 0, 1, 0, 0));
  EXPECT_THAT(pow(2.0, from_vector<int64_t>({0, 1, 10, 62})).to_vector<int64_t>(),
              ElementsAre(1, 2, 1024, int64_t{1} << 62));
}

TEST(Elementwise, MaximumAndMinimum) {
  expect_close(maximum(f64(kInputs), f64(kOthers)),
               map_each(kInputs, kOthers, [](double x, double y) { return std::fmax(x, y); }), 0);
  expect_close(minimum(f64(kInputs), f64(kOthers)),
               map_each(kInputs, kOthers, [](double x, double y) { return std::fmin(x, y); }), 0);
  EXPECT_THAT(maximum(from_vector<int64_t>({1, 5}), from_vector<int64_t>({3, 2})).to_vector<int64_t>(),
              ElementsAre(3, 5));
}

TEST(Elementwise, MaximumAndMinimumPropagateNaN) {
  // Unlike fmax/fmin, a NaN on either side wins (as in PyTorch).
  const Tensor a = f64({1, kNaN, 3, kNaN, -kInf});
  const Tensor b = f64({2, 0, kNaN, kNaN, 5});
  expect_close(maximum(a, b), {2, kNaN, kNaN, kNaN, 5}, 0);
  expect_close(minimum(a, b), {1, kNaN, kNaN, kNaN, -kInf}, 0);
}

TEST(Elementwise, NegAbsSignRelu) {
  const Tensor a = f64(kInputs);
  expect_close(neg(a), map_each(kInputs, [](double x) { return -x; }), 0);
  expect_close(abs(a), map_each(kInputs, [](double x) { return std::fabs(x); }), 0);
  expect_close(sign(a), map_each(kInputs, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }), 0);
  expect_close(relu(a), map_each(kInputs, [](double x) { return std::fmax(x, 0.0); }), 0);
  EXPECT_TRUE(std::isnan(relu(f64({kNaN})).item<double>()));
}

// PyTorch's threshold_backward at 0: the gradient passes where the output is positive or NaN.
TEST(Elementwise, ReluBackwardPassesTheGradientWhereTheOutputIsPositive) {
  const Tensor grad = f64({1.5, -2, 3, kNaN, 4, 5});
  const Tensor result = f64({2, 1e-300, 0, 0, -0.0, kNaN});
  expect_close(relu_backward(grad, result), {1.5, -2, 0, 0, 0, 5}, 0);
  EXPECT_THAT(relu_backward(from_vector<int64_t>({3, 4, 5}), from_vector<int64_t>({0, 2, -1})).to_vector<int64_t>(),
              ElementsAre(0, 4, 0));
  EXPECT_ERROR_CONTAINS(relu_backward(grad, f64({1, 2})), "relu_backward");
  EXPECT_ERROR_CONTAINS(relu_backward(grad, to(result, kInt64)), "relu_backward: expected tensors of one dtype");
}

TEST(Elementwise, ReluBackwardInPlaceWritesTheSameIntoTheGradient) {
  const Tensor result = f64({2, 0, -1, kNaN});
  const Tensor grad = f64({1.5, -2, 3, 4});
  const uint64_t version = grad.storage().version();
  EXPECT_EQ(&relu_backward_(grad, result), &grad);
  expect_close(grad, {1.5, 0, 0, 4}, 0);
  EXPECT_GT(grad.storage().version(), version);
  EXPECT_ERROR_CONTAINS(relu_backward_(grad, f64({1, 2})), "relu_backward_");
  EXPECT_ERROR_CONTAINS(relu_backward_(f64({1}), result), "relu_backward_: the result of shape [4] does not fit");
}

TEST(Elementwise, NegAbsSignReluOnInt64) {
  const Tensor a = from_vector<int64_t>({-7, 0, 4});
  EXPECT_THAT(neg(a).to_vector<int64_t>(), ElementsAre(7, 0, -4));
  EXPECT_THAT(abs(a).to_vector<int64_t>(), ElementsAre(7, 0, 4));
  EXPECT_THAT(sign(a).to_vector<int64_t>(), ElementsAre(-1, 0, 1));
  EXPECT_THAT(relu(a).to_vector<int64_t>(), ElementsAre(0, 0, 4));
  EXPECT_EQ(relu(a).dtype(), kInt64);
}

TEST(Elementwise, TranscendentalFunctionsMatchCmath) {
  const Tensor a = f64(kInputs), p = f64(kPositive);
  expect_close(exp(a), map_each(kInputs, [](double x) { return std::exp(x); }));
  expect_close(expm1(a), map_each(kInputs, [](double x) { return std::expm1(x); }));
  expect_close(log(p), map_each(kPositive, [](double x) { return std::log(x); }));
  expect_close(log1p(p), map_each(kPositive, [](double x) { return std::log1p(x); }));
  expect_close(sqrt(p), map_each(kPositive, [](double x) { return std::sqrt(x); }));
  expect_close(rsqrt(p), map_each(kPositive, [](double x) { return std::pow(x, -0.5); }));
  expect_close(sin(a), map_each(kInputs, [](double x) { return std::sin(x); }));
  expect_close(cos(a), map_each(kInputs, [](double x) { return std::cos(x); }));
  expect_close(tanh(a), map_each(kInputs, [](double x) { return std::tanh(x); }));
  expect_close(erf(a), map_each(kInputs, [](double x) { return std::erf(x); }));
}

TEST(Elementwise, LogAndSqrtOutsideTheirDomain) {
  expect_close(log(f64({0, -1})), {-kInf, kNaN}, 0);
  expect_close(sqrt(f64({-1})), {kNaN}, 0);
  expect_close(log1p(f64({-1, 1e-20})), {-kInf, 1e-20}, 0);  // log1p keeps tiny values exact
  expect_close(expm1(f64({1e-20, -kInf})), {1e-20, -1}, 0);  // so does expm1, where exp(x) - 1 gives 0
  expect_close(rsqrt(f64({0})), {kInf}, 0);
}

TEST(Elementwise, SigmoidMatchesTheTanhForm) {
  // sigmoid(x) = (1 + tanh(x / 2)) / 2, a formula independent of the kernel's.
  expect_close(sigmoid(f64(kInputs)), map_each(kInputs, [](double x) { return 0.5 + 0.5 * std::tanh(x / 2); }), 1e-15);
  const std::vector<double> extremes = values(sigmoid(f64({-800, 800})));
  EXPECT_EQ(extremes[0], 0);
  EXPECT_EQ(extremes[1], 1);
}

TEST(Elementwise, GeluIsTheExactErfForm) {
  // x * Phi(x) with Phi(x) = erfc(-x / sqrt(2)) / 2; the tanh approximation differs by up to 5e-4.
  expect_close(gelu(f64(kInputs)), map_each(kInputs, [](double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); }),
               1e-15);
  EXPECT_NEAR(gelu(f64({1.0})).item<double>(), 0.8413447460685429, 1e-15);
}

TEST(Elementwise, ClampWithOneOrBothBounds) {
  const Tensor a = f64(kInputs);
  expect_close(clamp(a, -1.0, 2.0), map_each(kInputs, [](double x) { return std::fmin(std::fmax(x, -1.0), 2.0); }), 0);
  expect_close(clamp(a, 0.0, std::nullopt), map_each(kInputs, [](double x) { return std::fmax(x, 0.0); }), 0);
  expect_close(clamp(a, std::nullopt, -0.5), map_each(kInputs, [](double x) { return std::fmin(x, -0.5); }), 0);
  EXPECT_THAT(clamp(from_vector<int64_t>({-5, 0, 5}), -2.0, 3.0).to_vector<int64_t>(), ElementsAre(-2, 0, 3));
  EXPECT_ERROR_CONTAINS(clamp(a, std::nullopt, std::nullopt), "clamp: expected at least one of min and max");
}

TEST(Elementwise, ClampLetsNaNThrough) {
  expect_close(clamp(f64({kNaN, 5, -5}), -1.0, 1.0), {kNaN, 1, -1}, 0);
  expect_close(clamp(f64({kNaN}), 0.0, std::nullopt), {kNaN}, 0);
}

TEST(Elementwise, ComparisonsWithTensors) {
  const Tensor a = f64({1, 2, 3, kNaN});
  const Tensor b = f64({2, 2, 2, kNaN});
  EXPECT_THAT(bools(eq(a, b)), ElementsAre(false, true, false, false));
  EXPECT_THAT(bools(ne(a, b)), ElementsAre(true, false, true, true));
  EXPECT_THAT(bools(lt(a, b)), ElementsAre(true, false, false, false));
  EXPECT_THAT(bools(le(a, b)), ElementsAre(true, true, false, false));
  EXPECT_THAT(bools(gt(a, b)), ElementsAre(false, false, true, false));
  EXPECT_THAT(bools(ge(a, b)), ElementsAre(false, true, true, false));
}

TEST(Elementwise, ComparisonsWithScalars) {
  const Tensor a = from_vector<int64_t>({1, 2, 3});
  EXPECT_THAT(bools(eq(a, 2)), ElementsAre(false, true, false));
  EXPECT_THAT(bools(ne(a, 2)), ElementsAre(true, false, true));
  EXPECT_THAT(bools(lt(a, 2)), ElementsAre(true, false, false));
  EXPECT_THAT(bools(le(a, 2)), ElementsAre(true, true, false));
  EXPECT_THAT(bools(gt(a, 2)), ElementsAre(false, false, true));
  EXPECT_THAT(bools(ge(a, 2)), ElementsAre(false, true, true));
}

TEST(Elementwise, EqualityOfBoolTensors) {
  const Tensor a = from_vector<bool>({true, true, false, false});
  const Tensor b = from_vector<bool>({true, false, true, false});
  EXPECT_THAT(bools(eq(a, b)), ElementsAre(true, false, false, true));
  EXPECT_THAT(bools(ne(a, b)), ElementsAre(false, true, true, false));
}

TEST(Elementwise, LogicalOps) {
  const Tensor a = from_vector<bool>({true, true, false, false});
  const Tensor b = from_vector<bool>({true, false, true, false});
  EXPECT_THAT(bools(logical_and(a, b)), ElementsAre(true, false, false, false));
  EXPECT_THAT(bools(logical_or(a, b)), ElementsAre(true, true, true, false));
  EXPECT_THAT(bools(logical_not(a)), ElementsAre(false, false, true, true));
  EXPECT_THAT(bools(logical_and(a, from_vector<bool>({true}))), ElementsAre(true, true, false, false));
}

TEST(Elementwise, BroadcastColumnWithRow) {
  const std::vector<double> column = {1, 2, 3}, row = {10, 20, 30, 40};
  Tensor sum = add(from_vector(column, {3, 1}), from_vector(row, {1, 4}));
  EXPECT_EQ(sum.sizes(), (Shape{3, 4}));
  std::vector<double> expected;
  for (double c : column) {
    for (double r : row) expected.push_back(c + r);
  }
  expect_close(sum, expected, 0);
  std::vector<double> quotients;
  for (double c : column) {
    for (double r : row) quotients.push_back(r / c);
  }
  expect_close(div(from_vector(row, {1, 4}), from_vector(column, {3, 1})), quotients, 0);
}

TEST(Elementwise, BroadcastTrailingDims) {
  std::vector<double> big(24), small = {1, -1, 2, -2};
  for (size_t i = 0; i < big.size(); ++i) big[i] = 0.5 * static_cast<double>(i);
  Tensor product = mul(from_vector(small), from_vector(big, {2, 3, 4}));
  EXPECT_EQ(product.sizes(), (Shape{2, 3, 4}));
  std::vector<double> expected(24);
  for (size_t i = 0; i < big.size(); ++i) expected[i] = big[i] * small[i % 4];
  expect_close(product, expected, 0);
  EXPECT_EQ(sub(from_vector(big, {2, 3, 4}), from_vector(small)).sizes(), (Shape{2, 3, 4}));
}

TEST(Elementwise, BroadcastZeroDimScalarTensor) {
  const Tensor scalar = scalar_tensor(3, {.dtype = kFloat64});
  const Tensor m = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor left = sub(scalar, m), right = sub(m, scalar);
  EXPECT_EQ(left.sizes(), (Shape{2, 3}));
  EXPECT_THAT(values(left), ElementsAre(2, 1, 0, -1, -2, -3));
  EXPECT_THAT(values(right), ElementsAre(-2, -1, 0, 1, 2, 3));
  EXPECT_EQ(add(scalar, scalar).dim(), 0);
  EXPECT_EQ(add(scalar, scalar).item<double>(), 6);
}

TEST(Elementwise, BroadcastFailureNamesBothShapes) {
  EXPECT_ERROR_CONTAINS(add(zeros({2, 3}), zeros({2})), "add: shapes [2, 3] and [2] cannot be broadcast together");
}

TEST(Elementwise, TransposedAndSteppedInputs) {
  const std::vector<double> data = {1, -2, 3, -4, 5, -6};  // 2 x 3
  const Tensor transposed = transposed_copy_of(data, 2, 3);
  ASSERT_FALSE(transposed.is_contiguous());
  const Tensor stepped = slice(f64({10, 99, 20, 99, 30, 99, 40, 99, 50, 99, 60, 99}), 0, 0, 12, 2);
  ASSERT_FALSE(stepped.is_contiguous());
  Tensor result = add(transposed, view(stepped, {2, 3}));
  expect_close(result, {11, 18, 33, 36, 55, 54}, 0);
  expect_close(exp(transposed), map_each(data, [](double x) { return std::exp(x); }));
  expect_close(mul(transposed, view(stepped, {2, 3})), {10, -40, 90, -160, 250, -360}, 0);
}

TEST(Elementwise, LargeTransposedInputsSplitAcrossThreads) {
  // Enough elements for the parallel path, with rows that do not divide evenly between threads.
  const int64_t rows = 301, cols = 257;
  std::vector<double> a(rows * cols), b(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    a[i] = static_cast<double>(i % 1000) - 500;
    b[i] = static_cast<double>(i % 7) * 0.25;
  }
  Tensor result = add(transposed_copy_of(a, rows, cols), from_vector(b, {rows, cols}));
  std::vector<double> expected(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) expected[i] = a[i] + b[i];
  expect_close(result, expected, 0);
}

TEST(Elementwise, Int64ArithmeticIsExact) {
  const int64_t big = (int64_t{1} << 60) + 1;  // not representable as a double
  const Tensor a = from_vector<int64_t>({big, -7, 9});
  const Tensor b = from_vector<int64_t>({2, 3, -4});
  EXPECT_THAT(add(a, b).to_vector<int64_t>(), ElementsAre(big + 2, -4, 5));
  EXPECT_THAT(sub(a, b).to_vector<int64_t>(), ElementsAre(big - 2, -10, 13));
  EXPECT_THAT(mul(b, b).to_vector<int64_t>(), ElementsAre(4, 9, 16));
  EXPECT_THAT(add(a, 1.0).to_vector<int64_t>(), ElementsAre(big + 1, -6, 10));
  EXPECT_EQ(add(a, b).dtype(), kInt64);
}

TEST(Elementwise, ScalarsAreConvertedToTheTensorsDtype) {
  Tensor t = add(from_vector<int64_t>({1, 2}), 2.75);
  EXPECT_EQ(t.dtype(), kInt64);
  EXPECT_THAT(t.to_vector<int64_t>(), ElementsAre(3, 4));
  Tensor f = mul(from_vector<float>({1}), 0.1);
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(f.item<float>(), 0.1f);
}

TEST(Elementwise, InPlaceTensorForms) {
  const std::vector<double> start = {1, 2, 3, 4};
  const Tensor other = f64({0.5, -1, 4, 8});
  Tensor a = f64(start);
  const Tensor* same = &add_(a, other);
  EXPECT_EQ(same, &a);
  expect_close(a, {1.5, 1, 7, 12}, 0);
  sub_(a, other);
  expect_close(a, start, 0);
  mul_(a, other);
  expect_close(a, {0.5, -2, 12, 32}, 0);
  div_(a, other);
  expect_close(a, start, 0);
}

TEST(Elementwise, InPlaceScalarForms) {
  Tensor a = f64({1, -2, 3});
  add_(a, 1.5);
  expect_close(a, {2.5, -0.5, 4.5}, 0);
  sub_(a, 0.5);
  expect_close(a, {2, -1, 4}, 0);
  mul_(a, 3.0);
  expect_close(a, {6, -3, 12}, 0);
  div_(a, 4.0);
  expect_close(a, {1.5, -0.75, 3}, 0);
  neg_(a);
  expect_close(a, {-1.5, 0.75, -3}, 0);
  clamp_(a, -2.0, 0.5);
  expect_close(a, {-1.5, 0.5, -2}, 0);
  clamp_(a, std::nullopt, -1.75);
  expect_close(a, {-1.75, -1.75, -2}, 0);
}

TEST(Elementwise, InPlaceFormsBumpTheVersion) {
  Tensor a = f64({1, 2});
  const uint64_t before = a.storage().version();
  add_(a, a);
  neg_(a);
  clamp_(a, 0.0, std::nullopt);
  add_(a, 1.0);
  EXPECT_EQ(a.storage().version(), before + 4);
}

TEST(Elementwise, Int64InPlace) {
  Tensor a = from_vector<int64_t>({5, -6});
  add_(a, from_vector<int64_t>({1, 1}));
  mul_(a, 3.0);
  neg_(a);
  EXPECT_THAT(a.to_vector<int64_t>(), ElementsAre(-18, 15));
  EXPECT_ERROR_CONTAINS(div_(a, 2.0), "div_", "integer division");
}

TEST(Elementwise, InPlaceWithABroadcastOther) {
  Tensor m = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  add_(m, f64({10, 20, 30}));
  expect_close(m, {11, 22, 33, 14, 25, 36}, 0);
  mul_(m, from_vector<double>({1, -1}, {2, 1}));
  expect_close(m, {11, 22, 33, -14, -25, -36}, 0);
  mul_(m, scalar_tensor(2, {.dtype = kFloat64}));
  expect_close(m, {22, 44, 66, -28, -50, -72}, 0);
}

TEST(Elementwise, InPlaceResultMustFitSelf) {
  Tensor row = f64({1, 2, 3});
  EXPECT_ERROR_CONTAINS(add_(row, zeros({2, 3}, {.dtype = kFloat64})),
                        "add_: the result of shape [2, 3] does not fit the in-place target of shape [3]");
  EXPECT_ERROR_CONTAINS(add_(row, f64({1, 2})), "add_: shapes [3] and [2] cannot be broadcast together");
}

TEST(Elementwise, InPlaceIntoAnExpandedTensorIsAnError) {
  Tensor expanded = expand(f64({1, 2, 3}), {4, 3});
  EXPECT_ERROR_CONTAINS(add_(expanded, 1.0),
                        "add_: cannot write in place into an expanded tensor (shape [4, 3], strides [0, 1])",
                        "clone it first");
  EXPECT_ERROR_CONTAINS(mul_(expanded, ones({4, 3}, {.dtype = kFloat64})), "mul_: cannot write in place");
  EXPECT_ERROR_CONTAINS(neg_(expanded), "neg_: cannot write in place");
  EXPECT_ERROR_CONTAINS(clamp_(expanded, 0.0, 1.0), "clamp_: cannot write in place");
}

TEST(Elementwise, InPlaceIntoANonContiguousView) {
  Tensor m = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor column = select(m, 1, 1);
  add_(column, f64({100, 200}));
  expect_close(m, {1, 102, 3, 4, 205, 6}, 0);
  Tensor transposed = t(m);
  sub_(transposed, from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}));
  // transposed[i][j] = m[j][i] -= 1 + 2i + j
  expect_close(m, {0, 99, -2, 2, 201, 0}, 0);
}

TEST(Elementwise, InPlaceWithTheTransposeOfSelf) {
  // a += a^T reads every element after half of them were written; the result must use the old values.
  const std::vector<double> data = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  Tensor a = from_vector(data, {3, 3});
  add_(a, t(a));
  std::vector<double> expected(9);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) expected[i * 3 + j] = data[i * 3 + j] + data[j * 3 + i];
  }
  expect_close(a, expected, 0);
}

TEST(Elementwise, InPlaceWithAnOverlappingShiftedView) {
  // x[1:] += x[:-1] adds each old left neighbour, not a running sum.
  Tensor x = f64({1, 2, 3, 4, 5});
  add_(slice(x, 0, 1, 5), slice(x, 0, 0, 4));
  expect_close(x, {1, 3, 5, 7, 9}, 0);
  Tensor y = f64({1, 2, 3, 4, 5});
  mul_(slice(y, 0, 0, 4), slice(y, 0, 1, 5));
  expect_close(y, {2, 6, 12, 20, 5}, 0);
}

TEST(Elementwise, InPlaceWithItself) {
  Tensor a = f64({1, -2, 3});
  mul_(a, a);
  expect_close(a, {1, 4, 9}, 0);
}

TEST(Elementwise, Float32MatchesTheFloat64Reference) {
  std::vector<float> inputs;
  for (double x : kInputs) inputs.push_back(static_cast<float>(x));
  std::vector<double> rounded(inputs.begin(), inputs.end());
  const Tensor a = from_vector(inputs);
  EXPECT_EQ(exp(a).dtype(), kFloat32);
  expect_close(exp(a), map_each(rounded, [](double x) { return std::exp(x); }), 1e-6);
  expect_close(tanh(a), map_each(rounded, [](double x) { return std::tanh(x); }), 1e-6);
  expect_close(sigmoid(a), map_each(rounded, [](double x) { return 0.5 + 0.5 * std::tanh(x / 2); }), 1e-6);
  expect_close(gelu(a), map_each(rounded, [](double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); }), 1e-6);
  expect_close(add(mul(a, a), 1.0), map_each(rounded, [](double x) { return x * x + 1; }), 1e-6);
}

}  // namespace
}  // namespace distgrad
