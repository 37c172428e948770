// Tests of matmul in each of its forms, addmm and outer, against a naive triple loop here.
#include <cmath>
#include <limits>
#include <random>

#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using testing::transposed_copy_of;
using testing::values;

// `n` uniform values in [-1, 1) from a seeded engine of the test's own.
std::vector<double> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = uniform(engine);
  return v;
}

// Row-major [batch, m, k] x [batch, k, n] -> [batch, m, n]; a batch of 1 is reused for every entry.
std::vector<double> naive_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t batch, int64_t m,
                                 int64_t k, int64_t n) {
  const bool a_batched = static_cast<int64_t>(a.size()) == batch * m * k;
  const bool b_batched = static_cast<int64_t>(b.size()) == batch * k * n;
  std::vector<double> c(batch * m * n, 0);
  for (int64_t p = 0; p < batch; ++p) {
    const double* ap = a.data() + (a_batched ? p * m * k : 0);
    const double* bp = b.data() + (b_batched ? p * k * n : 0);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double total = 0;
        for (int64_t l = 0; l < k; ++l) total += ap[i * k + l] * bp[l * n + j];
        c[(p * m + i) * n + j] = total;
      }
    }
  }
  return c;
}

void expect_close(const Tensor& actual, const std::vector<double>& expected, double tolerance = 1e-13) {
  const std::vector<double> got = values(actual);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tolerance) << "element " << i;
}

TEST(Matmul, DotOfTwoVectorsIsZeroDim) {
  const std::vector<double> a = random_values(7, 1), b = random_values(7, 2);
  Tensor out = untracked::matmul(from_vector(a), from_vector(b));
  EXPECT_EQ(out.dim(), 0);
  expect_close(out, naive_matmul(a, b, 1, 1, 7, 1));
}

TEST(Matmul, MatrixTimesVector) {
  const std::vector<double> a = random_values(12, 1), b = random_values(4, 2);
  Tensor out = untracked::matmul(from_vector(a, {3, 4}), from_vector(b));
  EXPECT_EQ(out.sizes(), Shape{3});
  expect_close(out, naive_matmul(a, b, 1, 3, 4, 1));
}

TEST(Matmul, VectorTimesMatrix) {
  const std::vector<double> a = random_values(4, 1), b = random_values(20, 2);
  Tensor out = untracked::matmul(from_vector(a), from_vector(b, {4, 5}));
  EXPECT_EQ(out.sizes(), Shape{5});
  expect_close(out, naive_matmul(a, b, 1, 1, 4, 5));
}

TEST(Matmul, MatrixTimesMatrix) {
  const std::vector<double> a = random_values(12, 1), b = random_values(20, 2);
  Tensor out = untracked::matmul(from_vector(a, {3, 4}), from_vector(b, {4, 5}));
  EXPECT_EQ(out.sizes(), (Shape{3, 5}));
  expect_close(out, naive_matmul(a, b, 1, 3, 4, 5));
  EXPECT_THAT(
      values(untracked::matmul(from_vector<double>({1, 2, 3, 4}, {2, 2}), from_vector<double>({5, 6, 7, 8}, {2, 2}))),
      ElementsAre(19, 22, 43, 50));
}

TEST(Matmul, BatchTimesBatch) {
  const std::vector<double> a = random_values(24, 1), b = random_values(40, 2);
  Tensor out = untracked::matmul(from_vector(a, {2, 3, 4}), from_vector(b, {2, 4, 5}));
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 5}));
  expect_close(out, naive_matmul(a, b, 2, 3, 4, 5));
}

TEST(Matmul, BatchTimesMatrix) {
  const std::vector<double> a = random_values(24, 1), b = random_values(20, 2);
  Tensor out = untracked::matmul(from_vector(a, {2, 3, 4}), from_vector(b, {4, 5}));
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 5}));
  expect_close(out, naive_matmul(a, b, 2, 3, 4, 5));
}

TEST(Matmul, MatrixTimesBatch) {
  const std::vector<double> a = random_values(12, 1), b = random_values(40, 2);
  Tensor out = untracked::matmul(from_vector(a, {3, 4}), from_vector(b, {2, 4, 5}));
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 5}));
  expect_close(out, naive_matmul(a, b, 2, 3, 4, 5));
}

TEST(Matmul, VectorsAgainstBatches) {
  const std::vector<double> v = random_values(4, 1), batch = random_values(40, 2), left = random_values(24, 3);
  Tensor row_times = untracked::matmul(from_vector(v), from_vector(batch, {2, 4, 5}));
  EXPECT_EQ(row_times.sizes(), (Shape{2, 5}));
  expect_close(row_times, naive_matmul(v, batch, 2, 1, 4, 5));
  Tensor times_column = untracked::matmul(from_vector(left, {2, 3, 4}), from_vector(v));
  EXPECT_EQ(times_column.sizes(), (Shape{2, 3}));
  expect_close(times_column, naive_matmul(left, v, 2, 3, 4, 1));
}

TEST(Matmul, BatchOfOneBroadcasts) {
  const std::vector<double> one = random_values(12, 1), many = random_values(60, 2);
  Tensor left = untracked::matmul(from_vector(one, {1, 3, 4}), from_vector(many, {3, 4, 5}));
  EXPECT_EQ(left.sizes(), (Shape{3, 3, 5}));
  expect_close(left, naive_matmul(one, many, 3, 3, 4, 5));
  const std::vector<double> lhs = random_values(36, 3), rhs = random_values(20, 4);
  Tensor right = untracked::matmul(from_vector(lhs, {3, 3, 4}), from_vector(rhs, {1, 4, 5}));
  EXPECT_EQ(right.sizes(), (Shape{3, 3, 5}));
  expect_close(right, naive_matmul(lhs, rhs, 3, 3, 4, 5));
}

TEST(Matmul, FourDimensionalBatches) {
  const std::vector<double> a = random_values(2 * 3 * 2 * 4, 1), b = random_values(2 * 3 * 4 * 5, 2);
  Tensor out = untracked::matmul(from_vector(a, {2, 3, 2, 4}), from_vector(b, {2, 3, 4, 5}));
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 2, 5}));
  expect_close(out, naive_matmul(a, b, 6, 2, 4, 5));
}

TEST(Matmul, FourDimensionalBatchesBroadcastAgainstEachOther) {
  // [2, 1] and [1, 3] batch dims broadcast to [2, 3].
  const std::vector<double> a = random_values(2 * 2 * 4, 1), b = random_values(3 * 4 * 5, 2);
  Tensor out = untracked::matmul(from_vector(a, {2, 1, 2, 4}), from_vector(b, {1, 3, 4, 5}));
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 2, 5}));
  std::vector<double> expected;
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      const std::vector<double> ai(a.begin() + i * 8, a.begin() + (i + 1) * 8);
      const std::vector<double> bj(b.begin() + j * 20, b.begin() + (j + 1) * 20);
      for (double v : naive_matmul(ai, bj, 1, 2, 4, 5)) expected.push_back(v);
    }
  }
  expect_close(out, expected);
}

TEST(Matmul, TransposedOperands) {
  const std::vector<double> a = random_values(12, 1), b = random_values(20, 2);
  Tensor at = transposed_copy_of(a, 3, 4), bt = transposed_copy_of(b, 4, 5);
  ASSERT_FALSE(at.is_contiguous());
  ASSERT_FALSE(bt.is_contiguous());
  const std::vector<double> expected = naive_matmul(a, b, 1, 3, 4, 5);
  expect_close(untracked::matmul(at, bt), expected);
  expect_close(untracked::matmul(at, from_vector(b, {4, 5})), expected);
  expect_close(untracked::matmul(from_vector(a, {3, 4}), bt), expected);
}

TEST(Matmul, TransposedBatches) {
  // Each batch entry transposed: [2, 4, 3] stored, used as [2, 3, 4].
  const std::vector<double> a = random_values(24, 1), b = random_values(40, 2);
  std::vector<double> stored(24);
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t l = 0; l < 4; ++l) stored[p * 12 + l * 3 + i] = a[p * 12 + i * 4 + l];
    }
  }
  Tensor lhs = untracked::transpose(from_vector(stored, {2, 4, 3}), 1, 2);
  expect_close(untracked::matmul(lhs, from_vector(b, {2, 4, 5})), naive_matmul(a, b, 2, 3, 4, 5));
  // The batch dim moved behind the rows: [3, 2, 4] stored, used as [2, 3, 4].
  std::vector<double> rows_first(24);
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t l = 0; l < 4; ++l) rows_first[i * 8 + p * 4 + l] = a[p * 12 + i * 4 + l];
    }
  }
  Tensor permuted = untracked::permute(from_vector(rows_first, {3, 2, 4}), {1, 0, 2});
  expect_close(untracked::matmul(permuted, from_vector(b, {2, 4, 5})), naive_matmul(a, b, 2, 3, 4, 5));
}

TEST(Matmul, SlicedOperands) {
  // Every other row and column of larger matrices.
  const std::vector<double> big_a = random_values(6 * 8, 1), big_b = random_values(8 * 10, 2);
  Tensor a = untracked::slice(untracked::slice(from_vector(big_a, {6, 8}), 0, 0, 6, 2), 1, 0, 8, 2);    // [3, 4]
  Tensor b = untracked::slice(untracked::slice(from_vector(big_b, {8, 10}), 0, 1, 8, 2), 1, 1, 10, 2);  // [4, 5]
  std::vector<double> a_values, b_values;
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t l = 0; l < 4; ++l) a_values.push_back(big_a[(2 * i) * 8 + 2 * l]);
  }
  for (int64_t l = 0; l < 4; ++l) {
    for (int64_t j = 0; j < 5; ++j) b_values.push_back(big_b[(2 * l + 1) * 10 + 2 * j + 1]);
  }
  expect_close(untracked::matmul(a, b), naive_matmul(a_values, b_values, 1, 3, 4, 5));
  // Columns 2..5 of a wider matrix: unit column stride, a row stride larger than the width.
  Tensor narrow_rows = untracked::slice(from_vector(big_b, {8, 10}), 1, 2, 6);  // [8, 4]
  std::vector<double> narrow_values;
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 2; j < 6; ++j) narrow_values.push_back(big_b[i * 10 + j]);
  }
  const std::vector<double> v = random_values(4, 3);
  expect_close(untracked::matmul(narrow_rows, from_vector(v)), naive_matmul(narrow_values, v, 1, 8, 4, 1));
}

TEST(Matmul, ExpandedOperands) {
  // Stride-0 rows or columns, as broadcasting produces them.
  const std::vector<double> row = random_values(4, 1), column = random_values(4, 2), other = random_values(20, 3);
  std::vector<double> rows(12), columns(20);
  for (int64_t i = 0; i < 12; ++i) rows[i] = row[i % 4];
  for (int64_t i = 0; i < 20; ++i) columns[i] = column[i / 5];
  Tensor repeated_rows = untracked::expand(from_vector(row, {1, 4}), {3, 4});
  Tensor repeated_columns = untracked::expand(from_vector(column, {4, 1}), {4, 5});
  expect_close(untracked::matmul(repeated_rows, from_vector(other, {4, 5})), naive_matmul(rows, other, 1, 3, 4, 5));
  expect_close(untracked::matmul(from_vector(other, {5, 4}), repeated_columns),
               naive_matmul(other, columns, 1, 5, 4, 5));
  expect_close(untracked::matmul(repeated_rows, repeated_columns), naive_matmul(rows, columns, 1, 3, 4, 5));
}

TEST(Matmul, StridedVectors) {
  // A column and a row of a matrix as 1-D operands.
  const std::vector<double> data = random_values(20, 1), other = random_values(20, 2);
  Tensor m = from_vector(data, {4, 5});
  Tensor column = untracked::select(m, 1, 2);  // stride 5
  std::vector<double> column_values;
  for (int64_t i = 0; i < 4; ++i) column_values.push_back(data[i * 5 + 2]);
  expect_close(untracked::matmul(column, from_vector(other, {4, 5})), naive_matmul(column_values, other, 1, 1, 4, 5));
  expect_close(untracked::matmul(from_vector(other, {5, 4}), column), naive_matmul(other, column_values, 1, 5, 4, 1));
  expect_close(untracked::matmul(column, column), naive_matmul(column_values, column_values, 1, 1, 4, 1));
}

TEST(Matmul, Float32AgreesWithTheFloat64Reference) {
  const std::vector<double> a = random_values(17 * 33, 1), b = random_values(33 * 9, 2);
  std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
  std::vector<double> a_rounded(af.begin(), af.end()), b_rounded(bf.begin(), bf.end());
  Tensor out = untracked::matmul(from_vector(af, {17, 33}), from_vector(bf, {33, 9}));
  EXPECT_EQ(out.dtype(), kFloat32);
  expect_close(out, naive_matmul(a_rounded, b_rounded, 1, 17, 33, 9), 1e-5);
  Tensor transposed =
      untracked::matmul(untracked::t(from_vector(bf, {33, 9})), untracked::t(from_vector(af, {17, 33})));
  std::vector<double> expected_t(9 * 17);
  const std::vector<double> product = naive_matmul(a_rounded, b_rounded, 1, 17, 33, 9);
  for (int64_t i = 0; i < 17; ++i) {
    for (int64_t j = 0; j < 9; ++j) expected_t[j * 17 + i] = product[i * 9 + j];
  }
  expect_close(transposed, expected_t, 1e-5);
}

TEST(Matmul, LargeProductMatchesTheReference) {
  const std::vector<double> a = random_values(70 * 130, 1), b = random_values(130 * 90, 2);
  expect_close(untracked::matmul(from_vector(a, {70, 130}), from_vector(b, {130, 90})),
               naive_matmul(a, b, 1, 70, 130, 90), 1e-12);
}

TEST(Matmul, ZeroSizeInnerDimGivesZeros) {
  Tensor out = untracked::matmul(zeros({3, 0}, {.dtype = kFloat64}), zeros({0, 4}, {.dtype = kFloat64}));
  EXPECT_EQ(out.sizes(), (Shape{3, 4}));
  EXPECT_THAT(values(out), ::testing::Each(0.0));
  EXPECT_EQ(untracked::matmul(zeros({0}, {.dtype = kFloat64}), zeros({0}, {.dtype = kFloat64})).item<double>(), 0);
  EXPECT_EQ(untracked::matmul(zeros({2, 0, 3}), zeros({3, 5})).sizes(), (Shape{2, 0, 5}));
}

TEST(Matmul, ShapeMismatchNamesBothShapes) {
  EXPECT_ERROR_CONTAINS(untracked::matmul(zeros({2, 3}), zeros({4, 5})),
                        "matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)");
  EXPECT_ERROR_CONTAINS(untracked::matmul(zeros({3}), zeros({4})),
                        "matmul: shapes [3] and [4] cannot be multiplied (3 != 4)");
  EXPECT_ERROR_CONTAINS(untracked::matmul(zeros({2, 3, 4}), zeros({3, 4, 5})),
                        "matmul: shapes [2] and [3] cannot be broadcast together");
  EXPECT_ERROR_CONTAINS(untracked::matmul(scalar_tensor(1), zeros({1})), "matmul: expected operands of at least 1 dim");
}

TEST(Matmul, RejectsIntegerAndMixedDtypes) {
  EXPECT_ERROR_CONTAINS(untracked::matmul(zeros({2, 2}, {.dtype = kInt64}), zeros({2, 2}, {.dtype = kInt64})),
                        "matmul: expected a floating tensor, found a int64 tensor of shape [2, 2]");
  EXPECT_ERROR_CONTAINS(untracked::matmul(zeros({2, 2}), zeros({2, 2}, {.dtype = kFloat64})),
                        "matmul: expected tensors of one dtype, found a float32 tensor of shape [2, 2] on cpu and a "
                        "float64 tensor of shape [2, 2] on cpu");
}

TEST(Addmm, ScalesTheBiasAndTheProduct) {
  const std::vector<double> bias = random_values(15, 1), a = random_values(12, 2), b = random_values(20, 3);
  Tensor out = untracked::addmm(from_vector(bias, {3, 5}), from_vector(a, {3, 4}), from_vector(b, {4, 5}), 0.5, 2.0);
  EXPECT_EQ(out.sizes(), (Shape{3, 5}));
  std::vector<double> expected = naive_matmul(a, b, 1, 3, 4, 5);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = 0.5 * bias[i] + 2.0 * expected[i];
  expect_close(out, expected);
}

TEST(Addmm, BroadcastsTheBias) {
  const std::vector<double> bias = {1, 2, 3, 4, 5}, a = random_values(12, 2), b = random_values(20, 3);
  Tensor out = untracked::addmm(from_vector(bias), from_vector(a, {3, 4}), from_vector(b, {4, 5}));
  std::vector<double> expected = naive_matmul(a, b, 1, 3, 4, 5);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += bias[i % 5];
  expect_close(out, expected);
  Tensor column_bias =
      untracked::addmm(from_vector<double>({10, 20, 30}, {3, 1}), from_vector(a, {3, 4}), from_vector(b, {4, 5}));
  std::vector<double> expected_column = naive_matmul(a, b, 1, 3, 4, 5);
  for (size_t i = 0; i < expected_column.size(); ++i) expected_column[i] += 10.0 * static_cast<double>(i / 5 + 1);
  expect_close(column_bias, expected_column);
}

TEST(Addmm, BetaZeroIgnoresTheBias) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> a = random_values(12, 2), b = random_values(20, 3);
  Tensor out =
      untracked::addmm(full({3, 5}, nan, {.dtype = kFloat64}), from_vector(a, {3, 4}), from_vector(b, {4, 5}), 0.0);
  expect_close(out, naive_matmul(a, b, 1, 3, 4, 5));
}

TEST(Addmm, TransposedOperandsAndAnEmptyInnerDim) {
  const std::vector<double> a = random_values(12, 2), b = random_values(20, 3);
  Tensor out =
      untracked::addmm(zeros({5}, {.dtype = kFloat64}), transposed_copy_of(a, 3, 4), transposed_copy_of(b, 4, 5));
  expect_close(out, naive_matmul(a, b, 1, 3, 4, 5));
  Tensor empty_inner = untracked::addmm(from_vector<double>({1, 2}), zeros({3, 0}, {.dtype = kFloat64}),
                                        zeros({0, 2}, {.dtype = kFloat64}), 3.0);
  EXPECT_THAT(values(empty_inner), ElementsAre(3, 6, 3, 6, 3, 6));
}

TEST(Addmm, ChecksItsOperands) {
  Tensor bias = zeros({3, 5});
  EXPECT_ERROR_CONTAINS(untracked::addmm(bias, zeros({3, 4}), zeros({3, 5})),
                        "addmm: shapes [3, 4] and [3, 5] cannot be multiplied (4 != 3)");
  EXPECT_ERROR_CONTAINS(untracked::addmm(bias, zeros({2, 3, 4}), zeros({4, 5})),
                        "addmm: expected 2-D matrices, found shapes [2, 3, 4] and [4, 5]");
  EXPECT_ERROR_CONTAINS(untracked::addmm(zeros({3, 5}, {.dtype = kFloat64}), zeros({3, 4}), zeros({4, 5})),
                        "addmm: expected tensors of one dtype");
  EXPECT_ERROR_CONTAINS(untracked::addmm(zeros({4}), zeros({3, 4}), zeros({4, 5})),
                        "cannot expand shape [4] to [3, 5]");
}

TEST(Outer, MultipliesEveryPair) {
  Tensor out = untracked::outer(from_vector<double>({1, 2, 3}), from_vector<double>({10, -1}));
  EXPECT_EQ(out.sizes(), (Shape{3, 2}));
  EXPECT_THAT(values(out), ElementsAre(10, -1, 20, -2, 30, -3));
  EXPECT_THAT(untracked::outer(from_vector<int64_t>({2}), from_vector<int64_t>({3, 4})).to_vector<int64_t>(),
              ElementsAre(6, 8));
  EXPECT_ERROR_CONTAINS(untracked::outer(zeros({2, 1}), zeros({2})),
                        "outer: expected two 1-D tensors, found shapes [2, 1] and [2]");
}

}  // namespace
}  // namespace distgrad
