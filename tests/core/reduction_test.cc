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
  Tensor total = untracked::sum(cube.tensor);
  EXPECT_EQ(total.dim(), 0);
  EXPECT_EQ(total.dtype(), kFloat64);
  expect_close(total, reference_sum(cube.data, cube.sizes, {0, 1, 2}));
}

TEST(Reduction, SumOverOneDim) {
  Cube cube;
  for (int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE(dim);
    Tensor s = untracked::sum(cube.tensor, {dim});
    Shape expected_sizes{2, 3, 4};
    expected_sizes.erase(expected_sizes.begin() + dim);
    EXPECT_EQ(s.sizes(), expected_sizes);
    expect_close(s, reference_sum(cube.data, cube.sizes, {dim}));
  }
  expect_close(untracked::sum(cube.tensor, {-1}), reference_sum(cube.data, cube.sizes, {2}));
  expect_close(untracked::sum(cube.tensor, {-3}), reference_sum(cube.data, cube.sizes, {0}));
}

TEST(Reduction, SumOverAdjacentDims) {
  Cube cube;
  Tensor leading = untracked::sum(cube.tensor, {0, 1});
  EXPECT_EQ(leading.sizes(), Shape{4});
  expect_close(leading, reference_sum(cube.data, cube.sizes, {0, 1}));
  Tensor trailing = untracked::sum(cube.tensor, {2, 1});
  EXPECT_EQ(trailing.sizes(), Shape{2});
  expect_close(trailing, reference_sum(cube.data, cube.sizes, {1, 2}));
}

TEST(Reduction, SumOverNonAdjacentDims) {
  Cube cube;
  Tensor s = untracked::sum(cube.tensor, {0, 2});
  EXPECT_EQ(s.sizes(), Shape{3});
  expect_close(s, reference_sum(cube.data, cube.sizes, {0, 2}));
  expect_close(untracked::sum(cube.tensor, {-1, 0}), reference_sum(cube.data, cube.sizes, {0, 2}));
  // Four dims, two kept in between reduced ones.
  const std::vector<double> data = sample(120);
  Tensor t = from_vector(data, {2, 3, 4, 5});
  Tensor r = untracked::sum(t, {1, 3});
  EXPECT_EQ(r.sizes(), (Shape{2, 4}));
  expect_close(r, reference_sum(data, {2, 3, 4, 5}, {1, 3}));
}

// A bias gradient's sum over {0, 2, 3} of NCHW, reduced in two steps (the trailing block, then
// dim 0), with and without keepdim, and of a transposed (non-contiguous) view.
TEST(Reduction, SumOverTwoBlocksOfDims) {
  const std::vector<double> data = sample(2 * 3 * 4 * 5);
  const Tensor t = from_vector(data, {2, 3, 4, 5});
  expect_close(untracked::sum(t, {0, 2, 3}), reference_sum(data, {2, 3, 4, 5}, {0, 2, 3}));
  const Tensor kept = untracked::sum(t, {3, 0, 2}, /*keepdim=*/true);
  EXPECT_EQ(kept.sizes(), (Shape{1, 3, 1, 1}));
  expect_close(kept, reference_sum(data, {2, 3, 4, 5}, {0, 2, 3}));
  const Tensor transposed = untracked::transpose(t, 0, 1);  // [3, 2, 4, 5]: reduce the original dims 1 and 2
  expect_close(untracked::sum(transposed, {0, 2}), reference_sum(data, {2, 3, 4, 5}, {1, 2}));
}

TEST(Reduction, SumKeepdimLeavesSizeOneDims) {
  Cube cube;
  Tensor s = untracked::sum(cube.tensor, {0, 2}, /*keepdim=*/true);
  EXPECT_EQ(s.sizes(), (Shape{1, 3, 1}));
  expect_close(s, reference_sum(cube.data, cube.sizes, {0, 2}));
  EXPECT_EQ(untracked::sum(cube.tensor, {}, true).sizes(), (Shape{1, 1, 1}));
  EXPECT_EQ(untracked::sum(cube.tensor, {1}, true).sizes(), (Shape{2, 1, 4}));
}

TEST(Reduction, SumOfAZeroDimTensor) {
  Tensor s = untracked::sum(scalar_tensor(2.5, {.dtype = kFloat64}), {0});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<double>(), 2.5);
}

TEST(Reduction, SumOfBoolCountsInInt64) {
  Tensor flags = from_vector<bool>({true, false, true, false, false, true}, {2, 3});
  Tensor count = untracked::sum(flags);
  EXPECT_EQ(count.dtype(), kInt64);
  EXPECT_EQ(count.item<int64_t>(), 3);
  EXPECT_THAT(untracked::sum(flags, {0}).to_vector<int64_t>(), ElementsAre(1, 0, 2));
  EXPECT_THAT(untracked::sum(flags, {1}).to_vector<int64_t>(), ElementsAre(2, 1));
}

TEST(Reduction, SumOfInt64IsExact) {
  const int64_t big = (int64_t{1} << 60) + 1;
  Tensor t = from_vector<int64_t>({big, 3, -1, 5}, {2, 2});
  EXPECT_EQ(untracked::sum(t).dtype(), kInt64);
  EXPECT_EQ(untracked::sum(t).item<int64_t>(), big + 7);
  EXPECT_THAT(untracked::sum(t, {1}).to_vector<int64_t>(), ElementsAre(big + 3, 4));
}

TEST(Reduction, Float32SumAccumulatesInFloat64) {
  // A million copies of 0.1f: a float accumulator drifts by hundreds, a double one stays exact to 1e-6.
  const int64_t n = 1000000;
  Tensor t = full({n}, 0.1, {.dtype = kFloat32});
  const double expected = static_cast<double>(n) * static_cast<double>(0.1f);
  EXPECT_NEAR(untracked::sum(t).item<double>(), expected, 0.01);
  EXPECT_NEAR(untracked::sum(untracked::view(t, {1000, 1000}), {0}).at<double>({7}), 1000 * static_cast<double>(0.1f),
              1e-3);
}

TEST(Reduction, LongRowsAndManyRowsSplitAcrossThreads) {
  const std::vector<double> data = sample(200000);
  expect_close(untracked::sum(from_vector(data)), reference_sum(data, {200000}, {0}), 1e-10);
  expect_close(untracked::sum(from_vector(data, {100000, 2}), {1}), reference_sum(data, {100000, 2}, {1}));
  expect_close(untracked::sum(from_vector(data, {2, 100000}), {0}), reference_sum(data, {2, 100000}, {0}));
}

// Fused on the CPU: the same bits as summing mul's result, for every pattern of dims the
// reduction plans (one block, NCHW's {0, 2, 3}, all, none, a long single run).
TEST(Reduction, SumOfProductIsTheSumOfMulsResult) {
  for (const DType dtype : {kFloat32, kFloat64}) {
    const Tensor a = untracked::to(randn({3, 4, 5, 6}), dtype), b = untracked::to(randn({3, 4, 5, 6}), dtype);
    for (const Shape& dims : std::vector<Shape>{{0, 2, 3}, {1}, {2, 3}, {0}, {}, {-1}, {0, 3}}) {
      for (const bool keepdim : {false, true}) {
        const Tensor fused = untracked::sum_of_product(a, b, dims, keepdim);
        const Tensor unfused = untracked::sum(untracked::mul(a, b), dims, keepdim);
        EXPECT_EQ(fused.sizes(), unfused.sizes()) << shape_str(dims);
        EXPECT_EQ(values(fused), values(unfused)) << dtype_name(dtype) << " dims " << shape_str(dims);
      }
    }
    const Tensor long_a = untracked::to(randn({300000}), dtype), long_b = untracked::to(randn({300000}), dtype);
    EXPECT_EQ(values(untracked::sum_of_product(long_a, long_b)),
              values(untracked::sum(untracked::mul(long_a, long_b))));
  }
  // A non-contiguous operand, an empty reduced dim and an empty kept one.
  const Tensor a = randn({4, 3}), b = untracked::t(randn({3, 4}));
  EXPECT_EQ(values(untracked::sum_of_product(a, b, {0})), values(untracked::sum(untracked::mul(a, b), {0})));
  EXPECT_EQ(values(untracked::sum_of_product(zeros({0, 3}), zeros({0, 3}), {0})), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(untracked::sum_of_product(zeros({0, 3}), zeros({0, 3}), {1}).sizes(), (Shape{0}));
  // Integers take mul, then sum.
  EXPECT_EQ(untracked::sum_of_product(from_vector<int64_t>({2, 3}), from_vector<int64_t>({4, 5})).item<int64_t>(), 23);
  EXPECT_ERROR_CONTAINS(untracked::sum_of_product(randn({2, 3}), randn({3})),
                        "sum_of_product: expected tensors of one shape, found [2, 3] and [3]");
  EXPECT_ERROR_CONTAINS(untracked::sum_of_product(randn({2}), untracked::to(randn({2}), kFloat64)), "sum_of_product");
}

TEST(Reduction, MeanDividesByTheReducedCount) {
  Cube cube;
  expect_close(untracked::mean(cube.tensor), {reference_sum(cube.data, cube.sizes, {0, 1, 2})[0] / 24});
  std::vector<double> expected = reference_sum(cube.data, cube.sizes, {0, 2});
  for (double& v : expected) v /= 8;
  Tensor m = untracked::mean(cube.tensor, {0, -1}, true);
  EXPECT_EQ(m.sizes(), (Shape{1, 3, 1}));
  expect_close(m, expected);
  EXPECT_ERROR_CONTAINS(untracked::mean(from_vector<int64_t>({1, 2})),
                        "mean: expected a floating tensor, found a int64 tensor of shape [2]");
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
    expect_close(untracked::var(m, {1}, correction), expected);
    std::vector<double> deviations;
    for (double v : expected) deviations.push_back(std::sqrt(v));
    expect_close(untracked::std(m, {1}, correction), deviations);
    expect_close(untracked::var(m, {}, correction), row_variances(data, 1, 15, correction));
  }
  EXPECT_EQ(untracked::var(m, {1}, 1, true).sizes(), (Shape{3, 1}));
  expect_close(untracked::var(from_vector<double>({2, 4, 4, 4, 5, 5, 7, 9})), {32.0 / 7});
  expect_close(untracked::std(from_vector<double>({2, 4, 4, 4, 5, 5, 7, 9}), {}, 0), {2});
}

TEST(Reduction, VarOverTheFirstDim) {
  const std::vector<double> data = sample(15);
  std::vector<double> transposed(15);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 5; ++c) transposed[c * 3 + r] = data[r * 5 + c];
  }
  expect_close(untracked::var(from_vector(transposed, {5, 3}), {0}), row_variances(data, 3, 5, 1));
}

TEST(Reduction, VarOfOneElementWithCorrectionIsNaN) {
  EXPECT_TRUE(std::isnan(untracked::var(from_vector<double>({3})).item<double>()));
  EXPECT_EQ(untracked::var(from_vector<double>({3}), {}, 0).item<double>(), 0);
}

TEST(Reduction, AmaxAndAminOverSeveralDims) {
  const std::vector<double> data = {3, -1, 7, 2, 9, 0, -4, 8, 5, 6, 1, -2};  // 3 x 2 x 2
  const Tensor cube = from_vector(data, {3, 2, 2});
  EXPECT_THAT(values(untracked::amax(cube, {0, 2})), ElementsAre(9, 8));  // max of {3,-1,9,0,5,6}, {7,2,-4,8,1,-2}
  EXPECT_THAT(values(untracked::amin(cube, {1, 2})), ElementsAre(-1, -4, -2));  // each 2 x 2 block
  EXPECT_EQ(untracked::amax(cube, {0, 2}, /*keepdim=*/true).sizes(), (Shape{1, 2, 1}));
  EXPECT_EQ(untracked::amax(cube).item<double>(), 9);
  EXPECT_ERROR_CONTAINS(untracked::amax(zeros({2}, {.dtype = kBool})), "amax: expected a numeric tensor");
}

TEST(Reduction, ProdOfEverythingAndAlongADim) {
  const Tensor m = from_vector<double>({1, 2, 3, -4, 0.5, 2}, {2, 3});
  EXPECT_DOUBLE_EQ(untracked::prod(m).item<double>(), -24);
  EXPECT_THAT(values(untracked::prod(m, 1)), ElementsAre(6, -4));
  EXPECT_THAT(values(untracked::prod(m, 0, true)), ElementsAre(-4, 1, 6));
  EXPECT_EQ(untracked::prod(from_vector<int64_t>({3, 5}), 0).item<int64_t>(), 15);
  EXPECT_EQ(untracked::prod(zeros({0})).item<float>(), 1);  // the empty product
}

TEST(Reduction, CumsumAddsInOrderAlongTheDim) {
  const Tensor m = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_THAT(values(untracked::cumsum(m, 1)), ElementsAre(1, 3, 6, 4, 9, 15));
  EXPECT_THAT(values(untracked::cumsum(m, 0)), ElementsAre(1, 2, 3, 5, 7, 9));
  EXPECT_THAT(values(untracked::cumsum(m, -1, /*reverse=*/true)), ElementsAre(6, 5, 3, 15, 11, 6));
  EXPECT_THAT(values(untracked::cumsum(untracked::t(m), 0)), ElementsAre(1, 4, 3, 9, 6, 15));  // strided input
  const Tensor flags = untracked::to(from_vector<double>({1, 0, 1, 1}), kBool);
  EXPECT_THAT(untracked::cumsum(flags, 0).to_vector<int64_t>(), ElementsAre(1, 1, 2, 3));
  // An infinity spreads to the later sums only (no 0 * inf from a product formulation).
  EXPECT_THAT(values(untracked::cumsum(from_vector<double>({1, INFINITY, 2}), 0)), ElementsAre(1, INFINITY, INFINITY));
  EXPECT_EQ(untracked::cumsum(scalar_tensor(4.0), 0).item<float>(), 4);
  EXPECT_ERROR_CONTAINS(untracked::cumsum(m, 2), "cumsum");
}

TEST(Reduction, MaxAndMinAlongADim) {
  const std::vector<double> data = {3, -1, 7, 2, 9, 0, -4, 8, 5, 6, 1, -2};  // 3 x 4
  const Tensor m = from_vector(data, {3, 4});
  auto [row_max, row_argmax] = untracked::max(m, 1);
  EXPECT_EQ(row_max.sizes(), Shape{3});
  EXPECT_THAT(values(row_max), ElementsAre(7, 9, 6));
  EXPECT_EQ(row_argmax.dtype(), kInt64);
  EXPECT_THAT(row_argmax.to_vector<int64_t>(), ElementsAre(2, 0, 1));
  auto [column_min, column_argmin] = untracked::min(m, 0);
  EXPECT_THAT(values(column_min), ElementsAre(3, -1, -4, -2));
  EXPECT_THAT(column_argmin.to_vector<int64_t>(), ElementsAre(0, 0, 1, 2));
  auto [kept, kept_indices] = untracked::max(m, -1, /*keepdim=*/true);
  EXPECT_EQ(kept.sizes(), (Shape{3, 1}));
  EXPECT_EQ(kept_indices.sizes(), (Shape{3, 1}));
  EXPECT_EQ(untracked::max(m).item<double>(), 9);
  EXPECT_EQ(untracked::min(m).item<double>(), -4);
  EXPECT_EQ(untracked::max(m).dim(), 0);
}

TEST(Reduction, MaxAlongTheMiddleDimOfACube) {
  Cube cube;
  auto [values_, indices] = untracked::max(cube.tensor, 1);
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
  EXPECT_THAT(untracked::max(t, 1).indices.to_vector<int64_t>(), ElementsAre(1, 2));
  EXPECT_THAT(untracked::min(t, 1).indices.to_vector<int64_t>(), ElementsAre(0, 0));
  EXPECT_EQ(untracked::argmax(t).item<int64_t>(), 1);
  EXPECT_EQ(untracked::argmin(t).item<int64_t>(), 3);
  EXPECT_EQ(untracked::argmax(from_vector<int64_t>({2, 2, 2})).item<int64_t>(), 0);
}

TEST(Reduction, NaNWinsMaxAndMin) {
  const Tensor t = from_vector<double>({1, kNaN, 3, kNaN, -kInf, 2}, {2, 3});
  auto [maxima, max_indices] = untracked::max(t, 1);
  EXPECT_TRUE(std::isnan(maxima.at<double>({0})));
  EXPECT_TRUE(std::isnan(maxima.at<double>({1})));
  EXPECT_THAT(max_indices.to_vector<int64_t>(), ElementsAre(1, 0));
  EXPECT_THAT(untracked::min(t, 1).indices.to_vector<int64_t>(), ElementsAre(1, 0));
  EXPECT_TRUE(std::isnan(untracked::max(t).item<double>()));
  EXPECT_TRUE(std::isnan(untracked::min(t).item<double>()));
  EXPECT_EQ(untracked::argmax(t).item<int64_t>(), 1);
  EXPECT_EQ(untracked::argmin(t).item<int64_t>(), 1);
}

TEST(Reduction, ArgmaxAndArgmin) {
  const Tensor m = from_vector<double>({3, -1, 7, 2, 9, 0}, {2, 3});
  Tensor flat = untracked::argmax(m);
  EXPECT_EQ(flat.dim(), 0);
  EXPECT_EQ(flat.dtype(), kInt64);
  EXPECT_EQ(flat.item<int64_t>(), 4);
  EXPECT_EQ(untracked::argmin(m).item<int64_t>(), 1);
  EXPECT_THAT(untracked::argmax(m, 0).to_vector<int64_t>(), ElementsAre(0, 1, 0));
  EXPECT_THAT(untracked::argmin(m, 1).to_vector<int64_t>(), ElementsAre(1, 2));
  EXPECT_EQ(untracked::argmax(m, 1, true).sizes(), (Shape{2, 1}));
  // The flattened index follows the logical (not the memory) order.
  EXPECT_EQ(untracked::argmax(untracked::t(m)).item<int64_t>(), 3);
}

TEST(Reduction, OrderingReductionsRejectBool) {
  const Tensor flags = from_vector<bool>({true, false});
  EXPECT_ERROR_CONTAINS(untracked::max(flags), "max: expected a numeric tensor, found a bool tensor of shape [2]");
  EXPECT_ERROR_CONTAINS(untracked::min(flags, 0), "min: expected a numeric tensor");
  EXPECT_ERROR_CONTAINS(untracked::argmax(flags), "argmax: expected a numeric tensor");
}

TEST(Reduction, LogsumexpMatchesTheDefinition) {
  const std::vector<double> data = {0.5, -1, 2, 3, 0, -2};  // 2 x 3
  const Tensor m = from_vector(data, {2, 3});
  std::vector<double> rows;
  for (int r = 0; r < 2; ++r) {
    rows.push_back(std::log(std::exp(data[r * 3]) + std::exp(data[r * 3 + 1]) + std::exp(data[r * 3 + 2])));
  }
  expect_close(untracked::logsumexp(m, {1}), rows, 1e-14);
  EXPECT_EQ(untracked::logsumexp(m, {1}, true).sizes(), (Shape{2, 1}));
  double total = 0;
  for (double v : data) total += std::exp(v);
  Tensor all = untracked::logsumexp(m, {0, 1});
  EXPECT_EQ(all.dim(), 0);
  expect_close(all, {std::log(total)}, 1e-14);
}

TEST(Reduction, LogsumexpIsStableForLargeValues) {
  expect_close(untracked::logsumexp(from_vector<double>({1000, 1000}), {0}), {1000 + std::log(2.0)}, 1e-15);
  expect_close(untracked::logsumexp(from_vector<double>({1000, 0}), {0}), {1000}, 1e-15);
  expect_close(untracked::logsumexp(from_vector<double>({-1000, -1000}), {0}), {-1000 + std::log(2.0)}, 1e-15);
  expect_close(untracked::logsumexp(from_vector<float>({1000, 1000}), {0}), {1000 + std::log(2.0)}, 1e-6);
}

TEST(Reduction, LogsumexpWithInfiniteInputs) {
  expect_close(untracked::logsumexp(from_vector<double>({-kInf, -kInf}), {0}), {-kInf});
  expect_close(untracked::logsumexp(from_vector<double>({-kInf, 1}), {0}), {1}, 1e-15);
  expect_close(untracked::logsumexp(from_vector<double>({kInf, 1}), {0}), {kInf});
  expect_close(untracked::logsumexp(from_vector<double>({-kInf, -kInf, 0, 0}, {2, 2}), {1}), {-kInf, std::log(2.0)},
               1e-15);
}

TEST(Reduction, SoftmaxRowsSumToOneAndMatchTheDefinition) {
  const std::vector<double> data = sample(12);  // 3 x 4
  Tensor s = untracked::softmax(from_vector(data, {3, 4}), 1);
  EXPECT_EQ(s.sizes(), (Shape{3, 4}));
  std::vector<double> expected(12);
  for (int r = 0; r < 3; ++r) {
    double total = 0;
    for (int c = 0; c < 4; ++c) total += std::exp(data[r * 4 + c]);
    for (int c = 0; c < 4; ++c) expected[r * 4 + c] = std::exp(data[r * 4 + c]) / total;
  }
  expect_close(s, expected, 1e-14);
  expect_close(untracked::sum(s, {1}), {1, 1, 1}, 1e-14);
}

TEST(Reduction, SoftmaxAlongTheFirstDim) {
  Tensor s = untracked::softmax(from_vector<double>({0, 1, std::log(3.0), 1}, {2, 2}), 0);
  expect_close(s, {0.25, 0.5, 0.75, 0.5}, 1e-15);
}

TEST(Reduction, SoftmaxIsStableForLargeValues) {
  const double e = std::exp(1.0);
  const double total = 1 + e + e * e;
  expect_close(untracked::softmax(from_vector<double>({1000, 1001, 1002}), 0), {1 / total, e / total, e * e / total},
               1e-14);
  expect_close(untracked::softmax(from_vector<double>({-1000, 1000}), -1), {0, 1}, 0);
}

TEST(Reduction, LogSoftmaxMatchesTheLogOfSoftmax) {
  const std::vector<double> data = sample(12);
  Tensor ls = untracked::log_softmax(from_vector(data, {3, 4}), 1);
  std::vector<double> expected(12);
  for (int r = 0; r < 3; ++r) {
    double total = 0;
    for (int c = 0; c < 4; ++c) total += std::exp(data[r * 4 + c]);
    for (int c = 0; c < 4; ++c) expected[r * 4 + c] = data[r * 4 + c] - std::log(total);
  }
  expect_close(ls, expected, 1e-14);
  // Stable where exp overflows: log_softmax([1000, 0]) = [0, -1000] (to rounding).
  expect_close(untracked::log_softmax(from_vector<double>({1000, 0}), 0), {0, -1000}, 1e-15);
}

TEST(Reduction, SoftmaxRejectsIntegerInput) {
  EXPECT_ERROR_CONTAINS(untracked::softmax(from_vector<int64_t>({1, 2}), 0), "softmax: expected a floating tensor");
  EXPECT_ERROR_CONTAINS(untracked::log_softmax(from_vector<double>({1, 2}), 1), "dimension 1 is out of range");
}

TEST(Reduction, NormForSeveralP) {
  const std::vector<double> data = {3, -4, 1, -2, 0.5, 6};
  const Tensor v = from_vector(data);
  auto p_norm = [&](double p) {
    double total = 0;
    for (double x : data) total += std::pow(std::abs(x), p);
    return std::pow(total, 1 / p);
  };
  expect_close(untracked::norm(v, 1), {16.5}, 1e-15);
  expect_close(untracked::norm(v), {p_norm(2)}, 1e-15);
  expect_close(untracked::norm(v, 3), {p_norm(3)}, 1e-14);
  expect_close(untracked::norm(v, kInf), {6}, 0);
  EXPECT_EQ(untracked::norm(v).dim(), 0);
}

TEST(Reduction, NormOverDims) {
  const Tensor m = from_vector<double>({3, -4, 0, 1, 2, -2}, {2, 3});
  expect_close(untracked::norm(m, 2, {1}), {5, 3}, 1e-15);
  expect_close(untracked::norm(m, 1, {0}), {4, 6, 2}, 0);
  expect_close(untracked::norm(m, kInf, {1}), {4, 2}, 0);
  expect_close(untracked::norm(m, 3, {0}), {std::cbrt(28.0), std::cbrt(72.0), 2}, 1e-14);
  EXPECT_EQ(untracked::norm(m, 2, {1}, true).sizes(), (Shape{2, 1}));
  EXPECT_ERROR_CONTAINS(untracked::norm(m, 0), "norm: expected p > 0 (or infinity), found 0");
  EXPECT_ERROR_CONTAINS(untracked::norm(from_vector<int64_t>({1}), 2), "norm: expected a floating tensor");
}

TEST(Reduction, AllAndAny) {
  EXPECT_TRUE(untracked::all(from_vector<bool>({true, true})));
  EXPECT_FALSE(untracked::all(from_vector<bool>({true, false})));
  EXPECT_TRUE(untracked::any(from_vector<bool>({false, true})));
  EXPECT_FALSE(untracked::any(from_vector<bool>({false, false})));
  EXPECT_TRUE(untracked::all(zeros({0}, {.dtype = kBool})));
  EXPECT_FALSE(untracked::any(zeros({0}, {.dtype = kBool})));
  EXPECT_ERROR_CONTAINS(untracked::all(from_vector<double>({1})),
                        "all: expected a bool tensor, found a float64 tensor");
  EXPECT_ERROR_CONTAINS(untracked::any(from_vector<int64_t>({1})), "any: expected a bool tensor, found a int64 tensor");
}

TEST(Reduction, Allclose) {
  const Tensor a = from_vector<double>({1, 2, 1e6});
  EXPECT_TRUE(untracked::allclose(a, from_vector<double>({1 + 1e-9, 2, 1e6 + 1})));
  EXPECT_FALSE(untracked::allclose(a, from_vector<double>({1 + 1e-4, 2, 1e6})));
  EXPECT_TRUE(untracked::allclose(a, from_vector<double>({1.01, 2, 1e6}), 0, 0.02));
  EXPECT_FALSE(untracked::allclose(a, from_vector<double>({1, 2})));
  EXPECT_FALSE(untracked::allclose(from_vector<double>({kNaN}), from_vector<double>({kNaN})));
  EXPECT_TRUE(untracked::allclose(from_vector<double>({kNaN, 1}), from_vector<double>({kNaN, 1}), 1e-5, 1e-8, true));
  EXPECT_FALSE(untracked::allclose(from_vector<double>({kNaN, 1}), from_vector<double>({1, 1}), 1e-5, 1e-8, true));
  EXPECT_FALSE(untracked::allclose(from_vector<double>({1}), from_vector<double>({kNaN}), 1e-5, 1e-8, true));
  EXPECT_TRUE(untracked::allclose(from_vector<double>({kInf, -kInf}), from_vector<double>({kInf, -kInf})));
  // An infinite difference is never close, although rtol * |inf| is an infinite tolerance.
  EXPECT_FALSE(untracked::allclose(from_vector<double>({kInf}), from_vector<double>({-kInf})));
  EXPECT_FALSE(untracked::allclose(from_vector<double>({1}), from_vector<double>({kInf})));
  EXPECT_FALSE(
      untracked::allclose(from_vector<float>({2}), from_vector<float>({-std::numeric_limits<float>::infinity()})));
  EXPECT_TRUE(untracked::allclose(from_vector<int64_t>({1, 2}), from_vector<int64_t>({1, 2})));
  EXPECT_FALSE(untracked::allclose(from_vector<int64_t>({1, 2}), from_vector<int64_t>({1, 3})));
  EXPECT_ERROR_CONTAINS(untracked::allclose(a, from_vector<float>({1, 2, 1e6})),
                        "allclose: expected tensors of one dtype");
}

TEST(Reduction, Equal) {
  const Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(untracked::equal(a, from_vector<double>({1, 2, 3, 4}, {2, 2})));
  EXPECT_FALSE(untracked::equal(a, from_vector<double>({1, 2, 3, 5}, {2, 2})));
  EXPECT_FALSE(untracked::equal(a, from_vector<double>({1, 2, 3, 4})));
  EXPECT_FALSE(untracked::equal(a, from_vector<float>({1, 2, 3, 4}, {2, 2})));
  EXPECT_TRUE(untracked::equal(untracked::t(untracked::t(a)), a));
  EXPECT_FALSE(untracked::equal(a, untracked::t(a)));
}

TEST(Reduction, NonContiguousInputs) {
  const std::vector<double> data = sample(12);  // logical 3 x 4
  const Tensor transposed = transposed_copy_of(data, 3, 4);
  ASSERT_FALSE(transposed.is_contiguous());
  expect_close(untracked::sum(transposed, {0}), reference_sum(data, {3, 4}, {0}));
  expect_close(untracked::sum(transposed, {1}), reference_sum(data, {3, 4}, {1}));
  expect_close(untracked::mean(transposed), {reference_sum(data, {3, 4}, {0, 1})[0] / 12});
  const std::vector<double> maxima =
      reference_reduce(data, {3, 4}, {1}, -kInf, [](double a, double b) { return std::max(a, b); });
  expect_close(untracked::max(transposed, 1).values, maxima, 0);
  // Every other column of a 3 x 8 matrix.
  std::vector<double> wide(24);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      wide[r * 8 + 2 * c] = data[r * 4 + c];
      wide[r * 8 + 2 * c + 1] = 1000;
    }
  }
  const Tensor stepped = untracked::slice(from_vector(wide, {3, 8}), 1, 0, 8, 2);
  expect_close(untracked::sum(stepped, {1}), reference_sum(data, {3, 4}, {1}));
  expect_close(untracked::max(stepped, 1).values, maxima, 0);
  expect_close(untracked::softmax(stepped, 1), values(untracked::softmax(from_vector(data, {3, 4}), 1)), 1e-15);
}

TEST(Reduction, SumOverEmptyDimsIsZero) {
  EXPECT_EQ(untracked::sum(zeros({0}, {.dtype = kFloat64})).item<double>(), 0);
  Tensor rows = untracked::sum(zeros({2, 0}, {.dtype = kFloat64}), {1});
  EXPECT_EQ(rows.sizes(), Shape{2});
  EXPECT_THAT(values(rows), ElementsAre(0, 0));
  Tensor columns = untracked::sum(zeros({0, 3}), {0});
  EXPECT_THAT(values(columns), ElementsAre(0, 0, 0));
  EXPECT_EQ(untracked::sum(zeros({0, 3}), {1}).sizes(), Shape{0});
  EXPECT_EQ(untracked::sum(zeros({0}, {.dtype = kInt64})).item<int64_t>(), 0);
}

TEST(Reduction, MaxOverAnEmptyDimIsAnError) {
  EXPECT_ERROR_CONTAINS(untracked::max(zeros({0})),
                        "max: cannot reduce over an empty dimension of a tensor of shape [0]");
  EXPECT_ERROR_CONTAINS(untracked::min(zeros({2, 0}), 1), "min: cannot reduce over an empty dimension", "[2, 0]");
  EXPECT_ERROR_CONTAINS(untracked::argmax(zeros({0})), "argmax: cannot reduce over an empty dimension");
  EXPECT_EQ(untracked::max(zeros({0, 3}), 1).values.sizes(), Shape{0});  // no empty window to reduce
}

TEST(Reduction, BadDimsAreErrors) {
  Cube cube;
  EXPECT_ERROR_CONTAINS(untracked::sum(cube.tensor, {3}),
                        "sum: dimension 3 is out of range for a 3-D tensor (expected a value in [-3, 2])");
  EXPECT_ERROR_CONTAINS(untracked::sum(cube.tensor, {1, -2}), "sum: dimension 1 appears twice in dims [1, -2]");
  EXPECT_ERROR_CONTAINS(untracked::max(cube.tensor, -4), "max: dimension -4 is out of range");
}

}  // namespace
}  // namespace distgrad
