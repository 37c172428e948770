// Tests of the reductions against loops over the same data written here: sums and means over
// any set of dims, var/std, max/min with indices, logsumexp, the softmax family, norms and the
// boolean summaries.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using testing::transposed_copy_of;
using testing::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// n distinct values of both signs.
std::vector<double> sample(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 10 * std::sin(1.7 * static_cast<double>(i) + 0.3);
  return v;
}

// Folds `data` (row-major, of `sizes`) over the dims in `reduced` with `combine`, starting from
// `init`; the result is row-major over the kept dims.
std::vector<double> reference_reduce(const std::vector<double>& data, const std::vector<int64_t>& sizes,
                                     const std::set<int64_t>& reduced, double init,
                                     const std::function<double(double, double)>& combine) {
  int64_t out_numel = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!reduced.count(d)) out_numel *= sizes[d];
  }
  std::vector<double> out(out_numel, init);
  std::vector<int64_t> index(sizes.size(), 0);
  for (double value : data) {
    int64_t o = 0;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (!reduced.count(d)) o = o * sizes[d] + index[d];
    }
    out[o] = combine(out[o], value);
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

std::vector<double> reference_sum(const std::vector<double>& data, const std::vector<int64_t>& sizes,
                                  const std::set<int64_t>& reduced) {
  return reference_reduce(data, sizes, reduced, 0, std::plus<double>());
}

void expect_close(const Tensor& actual, const std::vector<double>& expected, double tolerance = 1e-12) {
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

// A [2, 3, 4] float64 tensor and its data.
struct Cube {
  std::vector<double> data = sample(24);
  std::vector<int64_t> sizes = {2, 3, 4};
  Tensor tensor = from_vector(data, {2, 3, 4});
};

TEST(Reduction, SumOverAllDims) {
  Cube cube;
  Tensor total = ops::sum(cube.tensor);
  EXPECT_EQ(total.dim(), 0);
  EXPECT_EQ(total.dtype(), kFloat64);
  expect_close(total, reference_sum(cube.data, cube.sizes, {0, 1, 2}));
}

TEST(Reduction, SumOverOneDim) {
  Cube cube;
  for (int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE(dim);
    Tensor s = ops::sum(cube.tensor, {dim});
    Shape expected_sizes{2, 3, 4};
    expected_sizes.erase(expected_sizes.begin() + dim);
    EXPECT_EQ(s.sizes(), expected_sizes);
    expect_close(s, reference_sum(cube.data, cube.sizes, {dim}));
  }
  expect_close(ops::sum(cube.tensor, {-1}), reference_sum(cube.data, cube.sizes, {2}));
  expect_close(ops::sum(cube.tensor, {-3}), reference_sum(cube.data, cube.sizes, {0}));
}

TEST(Reduction, SumOverAdjacentDims) {
  Cube cube;
  Tensor leading = ops::sum(cube.tensor, {0, 1});
  EXPECT_EQ(leading.sizes(), Shape{4});
  expect_close(leading, reference_sum(cube.data, cube.sizes, {0, 1}));
  Tensor trailing = ops::sum(cube.tensor, {2, 1});
  EXPECT_EQ(trailing.sizes(), Shape{2});
  expect_close(trailing, reference_sum(cube.data, cube.sizes, {1, 2}));
}

TEST(Reduction, SumOverNonAdjacentDims) {
  Cube cube;
  Tensor s = ops::sum(cube.tensor, {0, 2});
  EXPECT_EQ(s.sizes(), Shape{3});
  expect_close(s, reference_sum(cube.data, cube.sizes, {0, 2}));
  expect_close(ops::sum(cube.tensor, {-1, 0}), reference_sum(cube.data, cube.sizes, {0, 2}));
  // Four dims, two kept in between reduced ones.
  const std::vector<double> data = sample(120);
  Tensor t = from_vector(data, {2, 3, 4, 5});
  Tensor r = ops::sum(t, {1, 3});
  EXPECT_EQ(r.sizes(), (Shape{2, 4}));
  expect_close(r, reference_sum(data, {2, 3, 4, 5}, {1, 3}));
}

// A bias gradient's sum over {0, 2, 3} of NCHW, reduced in two steps (the trailing block, then
// dim 0), with and without keepdim, and of a transposed (non-contiguous) view.
TEST(Reduction, SumOverTwoBlocksOfDims) {
  const std::vector<double> data = sample(2 * 3 * 4 * 5);
  const Tensor t = from_vector(data, {2, 3, 4, 5});
  expect_close(ops::sum(t, {0, 2, 3}), reference_sum(data, {2, 3, 4, 5}, {0, 2, 3}));
  const Tensor kept = ops::sum(t, {3, 0, 2}, /*keepdim=*/true);
  EXPECT_EQ(kept.sizes(), (Shape{1, 3, 1, 1}));
  expect_close(kept, reference_sum(data, {2, 3, 4, 5}, {0, 2, 3}));
  const Tensor transposed = ops::transpose(t, 0, 1);  // [3, 2, 4, 5]: reduce the original dims 1 and 2
  expect_close(ops::sum(transposed, {0, 2}), reference_sum(data, {2, 3, 4, 5}, {1, 2}));
}

TEST(Reduction, SumKeepdimLeavesSizeOneDims) {
  Cube cube;
  Tensor s = ops::sum(cube.tensor, {0, 2}, /*keepdim=*/true);
  EXPECT_EQ(s.sizes(), (Shape{1, 3, 1}));
  expect_close(s, reference_sum(cube.data, cube.sizes, {0, 2}));
  EXPECT_EQ(ops::sum(cube.tensor, {}, true).sizes(), (Shape{1, 1, 1}));
  EXPECT_EQ(ops::sum(cube.tensor, {1}, true).sizes(), (Shape{2, 1, 4}));
}

TEST(Reduction, SumOfAZeroDimTensor) {
  Tensor s = ops::sum(scalar_tensor(2.5, {.dtype = kFloat64}), {0});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<double>(), 2.5);
}

TEST(Reduction, SumOfBoolCountsInInt64) {
  Tensor flags = from_vector<bool>({true, false, true, false, false, true}, {2, 3});
  Tensor count = ops::sum(flags);
  EXPECT_EQ(count.dtype(), kInt64);
  EXPECT_EQ(count.item<int64_t>(), 3);
  EXPECT_THAT(ops::sum(flags, {0}).to_vector<int64_t>(), ElementsAre(1, 0, 2));
  EXPECT_THAT(ops::sum(flags, {1}).to_vector<int64_t>(), ElementsAre(2, 1));
}

TEST(Reduction, SumOfInt64IsExact) {
  const int64_t big = (int64_t{1} << 60) + 1;
  Tensor t = from_vector<int64_t>({big, 3, -1, 5}, {2, 2});
  EXPECT_EQ(ops::sum(t).dtype(), kInt64);
  EXPECT_EQ(ops::sum(t).item<int64_t>(), big + 7);
  EXPECT_THAT(ops::sum(t, {1}).to_vector<int64_t>(), ElementsAre(big + 3, 4));
}

TEST(Reduction, Float32SumAccumulatesInFloat64) {
  // A million copies of 0.1f: a float accumulator drifts by hundreds, a double one stays exact to 1e-6.
  const int64_t n = 1000000;
  Tensor t = full({n}, 0.1, {.dtype = kFloat32});
  const double expected = static_cast<double>(n) * static_cast<double>(0.1f);
  EXPECT_NEAR(ops::sum(t).item<double>(), expected, 0.01);
  EXPECT_NEAR(ops::sum(ops::view(t, {1000, 1000}), {0}).at<double>({7}), 1000 * static_cast<double>(0.1f), 1e-3);
}

TEST(Reduction, LongRowsAndManyRowsSplitAcrossThreads) {
  const std::vector<double> data = sample(200000);
  expect_close(ops::sum(from_vector(data)), reference_sum(data, {200000}, {0}), 1e-10);
  expect_close(ops::sum(from_vector(data, {100000, 2}), {1}), reference_sum(data, {100000, 2}, {1}));
  expect_close(ops::sum(from_vector(data, {2, 100000}), {0}), reference_sum(data, {2, 100000}, {0}));
}

// Fused on the CPU: the same bits as summing mul's result, for every pattern of dims the
// reduction plans (one block, NCHW's {0, 2, 3}, all, none, a long single run).
TEST(Reduction, SumOfProductIsTheSumOfMulsResult) {
  for (const DType dtype : {kFloat32, kFloat64}) {
    const Tensor a = ops::to(randn({3, 4, 5, 6}), dtype), b = ops::to(randn({3, 4, 5, 6}), dtype);
    for (const Shape& dims : std::vector<Shape>{{0, 2, 3}, {1}, {2, 3}, {0}, {}, {-1}, {0, 3}}) {
      for (const bool keepdim : {false, true}) {
        const Tensor fused = ops::sum_of_product(a, b, dims, keepdim);
        const Tensor unfused = ops::sum(ops::mul(a, b), dims, keepdim);
        EXPECT_EQ(fused.sizes(), unfused.sizes()) << shape_str(dims);
        EXPECT_EQ(values(fused), values(unfused)) << dtype_name(dtype) << " dims " << shape_str(dims);
      }
    }
    const Tensor long_a = ops::to(randn({300000}), dtype), long_b = ops::to(randn({300000}), dtype);
    EXPECT_EQ(values(ops::sum_of_product(long_a, long_b)), values(ops::sum(ops::mul(long_a, long_b))));
  }
  // A non-contiguous operand, an empty reduced dim and an empty kept one.
  const Tensor a = randn({4, 3}), b = ops::t(randn({3, 4}));
  EXPECT_EQ(values(ops::sum_of_product(a, b, {0})), values(ops::sum(ops::mul(a, b), {0})));
  EXPECT_EQ(values(ops::sum_of_product(zeros({0, 3}), zeros({0, 3}), {0})), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(ops::sum_of_product(zeros({0, 3}), zeros({0, 3}), {1}).sizes(), (Shape{0}));
  // Integers take mul, then sum.
  EXPECT_EQ(ops::sum_of_product(from_vector<int64_t>({2, 3}), from_vector<int64_t>({4, 5})).item<int64_t>(), 23);
  EXPECT_ERROR_CONTAINS(ops::sum_of_product(randn({2, 3}), randn({3})),
                        "sum_of_product: expected tensors of one shape, found [2, 3] and [3]");
  EXPECT_ERROR_CONTAINS(ops::sum_of_product(randn({2}), ops::to(randn({2}), kFloat64)), "sum_of_product");
}

TEST(Reduction, MeanDividesByTheReducedCount) {
  Cube cube;
  expect_close(ops::mean(cube.tensor), {reference_sum(cube.data, cube.sizes, {0, 1, 2})[0] / 24});
  std::vector<double> expected = reference_sum(cube.data, cube.sizes, {0, 2});
  for (double& v : expected) v /= 8;
  Tensor m = ops::mean(cube.tensor, {0, -1}, true);
  EXPECT_EQ(m.sizes(), (Shape{1, 3, 1}));
  expect_close(m, expected);
  EXPECT_ERROR_CONTAINS(ops::mean(from_vector<int64_t>({1, 2})),
                        "mean: expected a float32 or float64 tensor, found a int64 tensor of shape [2]");
}

// Variance of each row of a [rows, cols] matrix with `correction`.
std::vector<double> row_variances(const std::vector<double>& data, int64_t rows, int64_t cols, int64_t correction) {
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0;
    for (int64_t c = 0; c < cols; ++c) mean += data[r * cols + c];
    mean /= cols;
    double squares = 0;
    for (int64_t c = 0; c < cols; ++c) squares += (data[r * cols + c] - mean) * (data[r * cols + c] - mean);
    out.push_back(squares / static_cast<double>(cols - correction));
  }
  return out;
}

TEST(Reduction, VarAndStdWithBothCorrections) {
  const std::vector<double> data = sample(15);
  const Tensor m = from_vector(data, {3, 5});
  for (int64_t correction : {0, 1}) {
    SCOPED_TRACE(correction);
    const std::vector<double> expected = row_variances(data, 3, 5, correction);
    expect_close(ops::var(m, {1}, correction), expected);
    std::vector<double> deviations;
    for (double v : expected) deviations.push_back(std::sqrt(v));
    expect_close(ops::std(m, {1}, correction), deviations);
    expect_close(ops::var(m, {}, correction), row_variances(data, 1, 15, correction));
  }
  EXPECT_EQ(ops::var(m, {1}, 1, true).sizes(), (Shape{3, 1}));
  expect_close(ops::var(from_vector<double>({2, 4, 4, 4, 5, 5, 7, 9})), {32.0 / 7});
  expect_close(ops::std(from_vector<double>({2, 4, 4, 4, 5, 5, 7, 9}), {}, 0), {2});
}

TEST(Reduction, VarOverTheFirstDim) {
  const std::vector<double> data = sample(15);
  std::vector<double> transposed(15);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 5; ++c) transposed[c * 3 + r] = data[r * 5 + c];
  }
  expect_close(ops::var(from_vector(transposed, {5, 3}), {0}), row_variances(data, 3, 5, 1));
}

TEST(Reduction, VarOfOneElementWithCorrectionIsNaN) {
  EXPECT_TRUE(std::isnan(ops::var(from_vector<double>({3})).item<double>()));
  EXPECT_EQ(ops::var(from_vector<double>({3}), {}, 0).item<double>(), 0);
}

TEST(Reduction, MaxAndMinAlongADim) {
  const std::vector<double> data = {3, -1, 7, 2, 9, 0, -4, 8, 5, 6, 1, -2};  // 3 x 4
  const Tensor m = from_vector(data, {3, 4});
  auto [row_max, row_argmax] = ops::max(m, 1);
  EXPECT_EQ(row_max.sizes(), Shape{3});
  EXPECT_THAT(values(row_max), ElementsAre(7, 9, 6));
  EXPECT_EQ(row_argmax.dtype(), kInt64);
  EXPECT_THAT(row_argmax.to_vector<int64_t>(), ElementsAre(2, 0, 1));
  auto [column_min, column_argmin] = ops::min(m, 0);
  EXPECT_THAT(values(column_min), ElementsAre(3, -1, -4, -2));
  EXPECT_THAT(column_argmin.to_vector<int64_t>(), ElementsAre(0, 0, 1, 2));
  auto [kept, kept_indices] = ops::max(m, -1, /*keepdim=*/true);
  EXPECT_EQ(kept.sizes(), (Shape{3, 1}));
  EXPECT_EQ(kept_indices.sizes(), (Shape{3, 1}));
  EXPECT_EQ(ops::max(m).item<double>(), 9);
  EXPECT_EQ(ops::min(m).item<double>(), -4);
  EXPECT_EQ(ops::max(m).dim(), 0);
}

TEST(Reduction, MaxAlongTheMiddleDimOfACube) {
  Cube cube;
  auto [values_, indices] = ops::max(cube.tensor, 1);
  EXPECT_EQ(values_.sizes(), (Shape{2, 4}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t k = 0; k < 4; ++k) {
      int64_t best = 0;
      for (int64_t j = 1; j < 3; ++j) {
        if (cube.data[i * 12 + j * 4 + k] > cube.data[i * 12 + best * 4 + k]) best = j;
      }
      EXPECT_EQ(values_.at<double>({i, k}), cube.data[i * 12 + best * 4 + k]);
      EXPECT_EQ(indices.at<int64_t>({i, k}), best);
    }
  }
}

TEST(Reduction, TiesGiveTheFirstIndex) {
  const Tensor t = from_vector<double>({1, 5, 5, 0, 0, 5}, {2, 3});
  EXPECT_THAT(ops::max(t, 1).indices.to_vector<int64_t>(), ElementsAre(1, 2));
  EXPECT_THAT(ops::min(t, 1).indices.to_vector<int64_t>(), ElementsAre(0, 0));
  EXPECT_EQ(ops::argmax(t).item<int64_t>(), 1);
  EXPECT_EQ(ops::argmin(t).item<int64_t>(), 3);
  EXPECT_EQ(ops::argmax(from_vector<int64_t>({2, 2, 2})).item<int64_t>(), 0);
}

TEST(Reduction, NaNWinsMaxAndMin) {
  const Tensor t = from_vector<double>({1, kNaN, 3, kNaN, -kInf, 2}, {2, 3});
  auto [maxima, max_indices] = ops::max(t, 1);
  EXPECT_TRUE(std::isnan(maxima.at<double>({0})));
  EXPECT_TRUE(std::isnan(maxima.at<double>({1})));
  EXPECT_THAT(max_indices.to_vector<int64_t>(), ElementsAre(1, 0));
  EXPECT_THAT(ops::min(t, 1).indices.to_vector<int64_t>(), ElementsAre(1, 0));
  EXPECT_TRUE(std::isnan(ops::max(t).item<double>()));
  EXPECT_TRUE(std::isnan(ops::min(t).item<double>()));
  EXPECT_EQ(ops::argmax(t).item<int64_t>(), 1);
  EXPECT_EQ(ops::argmin(t).item<int64_t>(), 1);
}

TEST(Reduction, ArgmaxAndArgmin) {
  const Tensor m = from_vector<double>({3, -1, 7, 2, 9, 0}, {2, 3});
  Tensor flat = ops::argmax(m);
  EXPECT_EQ(flat.dim(), 0);
  EXPECT_EQ(flat.dtype(), kInt64);
  EXPECT_EQ(flat.item<int64_t>(), 4);
  EXPECT_EQ(ops::argmin(m).item<int64_t>(), 1);
  EXPECT_THAT(ops::argmax(m, 0).to_vector<int64_t>(), ElementsAre(0, 1, 0));
  EXPECT_THAT(ops::argmin(m, 1).to_vector<int64_t>(), ElementsAre(1, 2));
  EXPECT_EQ(ops::argmax(m, 1, true).sizes(), (Shape{2, 1}));
  // The flattened index follows the logical (not the memory) order.
  EXPECT_EQ(ops::argmax(ops::t(m)).item<int64_t>(), 3);
}

TEST(Reduction, OrderingReductionsRejectBool) {
  const Tensor flags = from_vector<bool>({true, false});
  EXPECT_ERROR_CONTAINS(ops::max(flags), "max: expected a numeric tensor, found a bool tensor of shape [2]");
  EXPECT_ERROR_CONTAINS(ops::min(flags, 0), "min: expected a numeric tensor");
  EXPECT_ERROR_CONTAINS(ops::argmax(flags), "argmax: expected a numeric tensor");
}

TEST(Reduction, LogsumexpMatchesTheDefinition) {
  const std::vector<double> data = {0.5, -1, 2, 3, 0, -2};  // 2 x 3
  const Tensor m = from_vector(data, {2, 3});
  std::vector<double> rows;
  for (int r = 0; r < 2; ++r) {
    rows.push_back(std::log(std::exp(data[r * 3]) + std::exp(data[r * 3 + 1]) + std::exp(data[r * 3 + 2])));
  }
  expect_close(ops::logsumexp(m, {1}), rows, 1e-14);
  EXPECT_EQ(ops::logsumexp(m, {1}, true).sizes(), (Shape{2, 1}));
  double total = 0;
  for (double v : data) total += std::exp(v);
  Tensor all = ops::logsumexp(m, {0, 1});
  EXPECT_EQ(all.dim(), 0);
  expect_close(all, {std::log(total)}, 1e-14);
}

TEST(Reduction, LogsumexpIsStableForLargeValues) {
  expect_close(ops::logsumexp(from_vector<double>({1000, 1000}), {0}), {1000 + std::log(2.0)}, 1e-15);
  expect_close(ops::logsumexp(from_vector<double>({1000, 0}), {0}), {1000}, 1e-15);
  expect_close(ops::logsumexp(from_vector<double>({-1000, -1000}), {0}), {-1000 + std::log(2.0)}, 1e-15);
  expect_close(ops::logsumexp(from_vector<float>({1000, 1000}), {0}), {1000 + std::log(2.0)}, 1e-6);
}

TEST(Reduction, LogsumexpWithInfiniteInputs) {
  expect_close(ops::logsumexp(from_vector<double>({-kInf, -kInf}), {0}), {-kInf});
  expect_close(ops::logsumexp(from_vector<double>({-kInf, 1}), {0}), {1}, 1e-15);
  expect_close(ops::logsumexp(from_vector<double>({kInf, 1}), {0}), {kInf});
  expect_close(ops::logsumexp(from_vector<double>({-kInf, -kInf, 0, 0}, {2, 2}), {1}), {-kInf, std::log(2.0)}, 1e-15);
}

TEST(Reduction, SoftmaxRowsSumToOneAndMatchTheDefinition) {
  const std::vector<double> data = sample(12);  // 3 x 4
  Tensor s = ops::softmax(from_vector(data, {3, 4}), 1);
  EXPECT_EQ(s.sizes(), (Shape{3, 4}));
  std::vector<double> expected(12);
  for (int r = 0; r < 3; ++r) {
    double total = 0;
    for (int c = 0; c < 4; ++c) total += std::exp(data[r * 4 + c]);
    for (int c = 0; c < 4; ++c) expected[r * 4 + c] = std::exp(data[r * 4 + c]) / total;
  }
  expect_close(s, expected, 1e-14);
  expect_close(ops::sum(s, {1}), {1, 1, 1}, 1e-14);
}

TEST(Reduction, SoftmaxAlongTheFirstDim) {
  Tensor s = ops::softmax(from_vector<double>({0, 1, std::log(3.0), 1}, {2, 2}), 0);
  expect_close(s, {0.25, 0.5, 0.75, 0.5}, 1e-15);
}

TEST(Reduction, SoftmaxIsStableForLargeValues) {
  const double e = std::exp(1.0);
  const double total = 1 + e + e * e;
  expect_close(ops::softmax(from_vector<double>({1000, 1001, 1002}), 0), {1 / total, e / total, e * e / total}, 1e-14);
  expect_close(ops::softmax(from_vector<double>({-1000, 1000}), -1), {0, 1}, 0);
}

TEST(Reduction, LogSoftmaxMatchesTheLogOfSoftmax) {
  const std::vector<double> data = sample(12);
  Tensor ls = ops::log_softmax(from_vector(data, {3, 4}), 1);
  std::vector<double> expected(12);
  for (int r = 0; r < 3; ++r) {
    double total = 0;
    for (int c = 0; c < 4; ++c) total += std::exp(data[r * 4 + c]);
    for (int c = 0; c < 4; ++c) expected[r * 4 + c] = data[r * 4 + c] - std::log(total);
  }
  expect_close(ls, expected, 1e-14);
  // Stable where exp overflows: log_softmax([1000, 0]) = [0, -1000] (to rounding).
  expect_close(ops::log_softmax(from_vector<double>({1000, 0}), 0), {0, -1000}, 1e-15);
}

TEST(Reduction, SoftmaxRejectsIntegerInput) {
  EXPECT_ERROR_CONTAINS(ops::softmax(from_vector<int64_t>({1, 2}), 0), "softmax: expected a float32 or float64 tensor");
  EXPECT_ERROR_CONTAINS(ops::log_softmax(from_vector<double>({1, 2}), 1), "dimension 1 is out of range");
}

TEST(Reduction, NormForSeveralP) {
  const std::vector<double> data = {3, -4, 1, -2, 0.5, 6};
  const Tensor v = from_vector(data);
  auto p_norm = [&](double p) {
    double total = 0;
    for (double x : data) total += std::pow(std::abs(x), p);
    return std::pow(total, 1 / p);
  };
  expect_close(ops::norm(v, 1), {16.5}, 1e-15);
  expect_close(ops::norm(v), {p_norm(2)}, 1e-15);
  expect_close(ops::norm(v, 3), {p_norm(3)}, 1e-14);
  expect_close(ops::norm(v, kInf), {6}, 0);
  EXPECT_EQ(ops::norm(v).dim(), 0);
}

TEST(Reduction, NormOverDims) {
  const Tensor m = from_vector<double>({3, -4, 0, 1, 2, -2}, {2, 3});
  expect_close(ops::norm(m, 2, {1}), {5, 3}, 1e-15);
  expect_close(ops::norm(m, 1, {0}), {4, 6, 2}, 0);
  expect_close(ops::norm(m, kInf, {1}), {4, 2}, 0);
  expect_close(ops::norm(m, 3, {0}), {std::cbrt(28.0), std::cbrt(72.0), 2}, 1e-14);
  EXPECT_EQ(ops::norm(m, 2, {1}, true).sizes(), (Shape{2, 1}));
  EXPECT_ERROR_CONTAINS(ops::norm(m, 0), "norm: expected p > 0 (or infinity), found 0");
  EXPECT_ERROR_CONTAINS(ops::norm(from_vector<int64_t>({1}), 2), "norm: expected a float32 or float64 tensor");
}

TEST(Reduction, AllAndAny) {
  EXPECT_TRUE(ops::all(from_vector<bool>({true, true})));
  EXPECT_FALSE(ops::all(from_vector<bool>({true, false})));
  EXPECT_TRUE(ops::any(from_vector<bool>({false, true})));
  EXPECT_FALSE(ops::any(from_vector<bool>({false, false})));
  EXPECT_TRUE(ops::all(zeros({0}, {.dtype = kBool})));
  EXPECT_FALSE(ops::any(zeros({0}, {.dtype = kBool})));
  EXPECT_ERROR_CONTAINS(ops::all(from_vector<double>({1})), "all: expected a bool tensor, found a float64 tensor");
  EXPECT_ERROR_CONTAINS(ops::any(from_vector<int64_t>({1})), "any: expected a bool tensor, found a int64 tensor");
}

TEST(Reduction, Allclose) {
  const Tensor a = from_vector<double>({1, 2, 1e6});
  EXPECT_TRUE(ops::allclose(a, from_vector<double>({1 + 1e-9, 2, 1e6 + 1})));
  EXPECT_FALSE(ops::allclose(a, from_vector<double>({1 + 1e-4, 2, 1e6})));
  EXPECT_TRUE(ops::allclose(a, from_vector<double>({1.01, 2, 1e6}), 0, 0.02));
  EXPECT_FALSE(ops::allclose(a, from_vector<double>({1, 2})));
  EXPECT_FALSE(ops::allclose(from_vector<double>({kNaN}), from_vector<double>({kNaN})));
  EXPECT_TRUE(ops::allclose(from_vector<double>({kNaN, 1}), from_vector<double>({kNaN, 1}), 1e-5, 1e-8, true));
  EXPECT_FALSE(ops::allclose(from_vector<double>({kNaN, 1}), from_vector<double>({1, 1}), 1e-5, 1e-8, true));
  EXPECT_FALSE(ops::allclose(from_vector<double>({1}), from_vector<double>({kNaN}), 1e-5, 1e-8, true));
  EXPECT_TRUE(ops::allclose(from_vector<double>({kInf, -kInf}), from_vector<double>({kInf, -kInf})));
  // An infinite difference is never close, although rtol * |inf| is an infinite tolerance.
  EXPECT_FALSE(ops::allclose(from_vector<double>({kInf}), from_vector<double>({-kInf})));
  EXPECT_FALSE(ops::allclose(from_vector<double>({1}), from_vector<double>({kInf})));
  EXPECT_FALSE(ops::allclose(from_vector<float>({2}), from_vector<float>({-std::numeric_limits<float>::infinity()})));
  EXPECT_TRUE(ops::allclose(from_vector<int64_t>({1, 2}), from_vector<int64_t>({1, 2})));
  EXPECT_FALSE(ops::allclose(from_vector<int64_t>({1, 2}), from_vector<int64_t>({1, 3})));
  EXPECT_ERROR_CONTAINS(ops::allclose(a, from_vector<float>({1, 2, 1e6})), "allclose: expected tensors of one dtype");
}

TEST(Reduction, Equal) {
  const Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(ops::equal(a, from_vector<double>({1, 2, 3, 4}, {2, 2})));
  EXPECT_FALSE(ops::equal(a, from_vector<double>({1, 2, 3, 5}, {2, 2})));
  EXPECT_FALSE(ops::equal(a, from_vector<double>({1, 2, 3, 4})));
  EXPECT_FALSE(ops::equal(a, from_vector<float>({1, 2, 3, 4}, {2, 2})));
  EXPECT_TRUE(ops::equal(ops::t(ops::t(a)), a));
  EXPECT_FALSE(ops::equal(a, ops::t(a)));
}

TEST(Reduction, NonContiguousInputs) {
  const std::vector<double> data = sample(12);  // logical 3 x 4
  const Tensor transposed = transposed_copy_of(data, 3, 4);
  ASSERT_FALSE(transposed.is_contiguous());
  expect_close(ops::sum(transposed, {0}), reference_sum(data, {3, 4}, {0}));
  expect_close(ops::sum(transposed, {1}), reference_sum(data, {3, 4}, {1}));
  expect_close(ops::mean(transposed), {reference_sum(data, {3, 4}, {0, 1})[0] / 12});
  const std::vector<double> maxima =
      reference_reduce(data, {3, 4}, {1}, -kInf, [](double a, double b) { return std::max(a, b); });
  expect_close(ops::max(transposed, 1).values, maxima, 0);
  // Every other column of a 3 x 8 matrix.
  std::vector<double> wide(24);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      wide[r * 8 + 2 * c] = data[r * 4 + c];
      wide[r * 8 + 2 * c + 1] = 1000;
    }
  }
  const Tensor stepped = ops::slice(from_vector(wide, {3, 8}), 1, 0, 8, 2);
  expect_close(ops::sum(stepped, {1}), reference_sum(data, {3, 4}, {1}));
  expect_close(ops::max(stepped, 1).values, maxima, 0);
  expect_close(ops::softmax(stepped, 1), values(ops::softmax(from_vector(data, {3, 4}), 1)), 1e-15);
}

TEST(Reduction, SumOverEmptyDimsIsZero) {
  EXPECT_EQ(ops::sum(zeros({0}, {.dtype = kFloat64})).item<double>(), 0);
  Tensor rows = ops::sum(zeros({2, 0}, {.dtype = kFloat64}), {1});
  EXPECT_EQ(rows.sizes(), Shape{2});
  EXPECT_THAT(values(rows), ElementsAre(0, 0));
  Tensor columns = ops::sum(zeros({0, 3}), {0});
  EXPECT_THAT(values(columns), ElementsAre(0, 0, 0));
  EXPECT_EQ(ops::sum(zeros({0, 3}), {1}).sizes(), Shape{0});
  EXPECT_EQ(ops::sum(zeros({0}, {.dtype = kInt64})).item<int64_t>(), 0);
}

TEST(Reduction, MaxOverAnEmptyDimIsAnError) {
  EXPECT_ERROR_CONTAINS(ops::max(zeros({0})), "max: cannot reduce over an empty dimension of a tensor of shape [0]");
  EXPECT_ERROR_CONTAINS(ops::min(zeros({2, 0}), 1), "min: cannot reduce over an empty dimension", "[2, 0]");
  EXPECT_ERROR_CONTAINS(ops::argmax(zeros({0})), "argmax: cannot reduce over an empty dimension");
  EXPECT_EQ(ops::max(zeros({0, 3}), 1).values.sizes(), Shape{0});  // no empty window to reduce
}

TEST(Reduction, BadDimsAreErrors) {
  Cube cube;
  EXPECT_ERROR_CONTAINS(ops::sum(cube.tensor, {3}),
                        "sum: dimension 3 is out of range for a 3-D tensor (expected a value in [-3, 2])");
  EXPECT_ERROR_CONTAINS(ops::sum(cube.tensor, {1, -2}), "sum: dimension 1 appears twice in dims [1, -2]");
  EXPECT_ERROR_CONTAINS(ops::max(cube.tensor, -4), "max: dimension -4 is out of range");
}

}  // namespace
}  // namespace distgrad
