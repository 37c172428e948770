// Tests of the creation functions: filled tensors, *_like, ranges, eye and from_vector.
#include <cmath>
#include <limits>

#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::values;

TEST(Creation, EmptyHasContiguousMetadata) {
  Tensor t = empty({2, 3, 4}, {.dtype = kInt64});
  EXPECT_EQ(t.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.dtype(), kInt64);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.storage().nbytes(), 24u * 8u);
  EXPECT_TRUE(t.is_contiguous());
}

TEST(Creation, EmptyWithAZeroSizeHasNoElements) {
  Tensor t = empty({3, 0, 2});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_THAT(values(t), IsEmpty());
}

TEST(Creation, EmptyRejectsNegativeSizes) {
  EXPECT_ERROR_CONTAINS(empty({2, -1}), "empty: expected non-negative sizes", "[2, -1]");
  EXPECT_ERROR_CONTAINS(zeros({-3}), "empty", "[-3]");
}

TEST(Creation, ZerosOnesAndFullFillEveryElement) {
  EXPECT_THAT(values(zeros({2, 2})), ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(values(ones({3}, {.dtype = kInt64})), ElementsAre(1, 1, 1));
  EXPECT_THAT(values(full({2, 1}, -2.5, {.dtype = kFloat64})), ElementsAre(-2.5, -2.5));
  EXPECT_THAT(full({2}, 7, {.dtype = kInt64}).to_vector<int64_t>(), ElementsAre(7, 7));
  EXPECT_THAT(full({2}, 1, {.dtype = kBool}).to_vector<bool>(), ElementsAre(true, true));
  EXPECT_THAT(zeros({2}, {.dtype = kBool}).to_vector<bool>(), ElementsAre(false, false));
  EXPECT_EQ(ones({4}, {.dtype = kFloat64}).dtype(), kFloat64);
  EXPECT_EQ(zeros({4}).dtype(), kFloat32);
}

TEST(Creation, FullKeepsNonFiniteValues) {
  const std::vector<double> inf = values(full({2}, std::numeric_limits<double>::infinity(), {.dtype = kFloat64}));
  EXPECT_TRUE(std::isinf(inf[0]) && inf[0] > 0);
  EXPECT_TRUE(std::isnan(full({}, std::nan(""), {.dtype = kFloat32}).item<double>()));
}

TEST(Creation, ScalarTensorIsZeroDim) {
  Tensor t = scalar_tensor(3.5, {.dtype = kFloat64});
  EXPECT_EQ(t.dim(), 0);
  EXPECT_EQ(t.numel(), 1);
  EXPECT_EQ(t.sizes(), Shape{});
  EXPECT_EQ(t.item<double>(), 3.5);
  EXPECT_EQ(scalar_tensor(-4, {.dtype = kInt64}).item<int64_t>(), -4);
}

TEST(Creation, LikeFunctionsCopySizesDtypeAndDevice) {
  // A non-contiguous source: the results are still fresh contiguous tensors of its sizes.
  Tensor like = untracked::t(zeros({3, 2}, {.dtype = kInt64}));
  for (const Tensor& t : {empty_like(like), zeros_like(like), ones_like(like), full_like(like, 9)}) {
    EXPECT_EQ(t.sizes(), (Shape{2, 3}));
    EXPECT_EQ(t.dtype(), kInt64);
    EXPECT_EQ(t.device(), Device::cpu());
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_NE(t.storage().data(), like.storage().data());
  }
  EXPECT_THAT(values(zeros_like(like)), ElementsAre(0, 0, 0, 0, 0, 0));
  EXPECT_THAT(values(ones_like(like)), ElementsAre(1, 1, 1, 1, 1, 1));
  EXPECT_THAT(values(full_like(like, 9)), ElementsAre(9, 9, 9, 9, 9, 9));
  EXPECT_ERROR_CONTAINS(zeros_like(Tensor()), "empty_like", "undefined");
}

TEST(Creation, ArangeDefaultsToInt64) {
  Tensor t = arange(5);
  EXPECT_EQ(t.dtype(), kInt64);
  EXPECT_EQ(t.sizes(), Shape{5});
  EXPECT_THAT(t.to_vector<int64_t>(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(arange(2, 7).to_vector<int64_t>(), ElementsAre(2, 3, 4, 5, 6));
  EXPECT_THAT(arange(int64_t{1}, 8, 3).to_vector<int64_t>(), ElementsAre(1, 4, 7));
  EXPECT_THAT(arange(int64_t{1}, 7, 3).to_vector<int64_t>(), ElementsAre(1, 4));
}

TEST(Creation, ArangeWithANegativeStepCountsDown) {
  EXPECT_THAT(arange(int64_t{10}, 0, -3).to_vector<int64_t>(), ElementsAre(10, 7, 4, 1));
  EXPECT_THAT(arange(int64_t{-1}, -4, -1).to_vector<int64_t>(), ElementsAre(-1, -2, -3));
}

TEST(Creation, ArangeOfAnEmptyRangeHasNoElements) {
  EXPECT_EQ(arange(0).numel(), 0);
  EXPECT_EQ(arange(5, 5).numel(), 0);
  EXPECT_EQ(arange(5, 2).numel(), 0);               // positive step away from end
  EXPECT_EQ(arange(int64_t{2}, 5, -1).numel(), 0);  // negative step away from end
  EXPECT_ERROR_CONTAINS(arange(int64_t{0}, 5, 0), "arange: step must be non-zero");
}

TEST(Creation, ArangeTakesOptions) {
  Tensor t = arange(4, {.dtype = kFloat64});
  EXPECT_EQ(t.dtype(), kFloat64);
  EXPECT_THAT(values(t), ElementsAre(0, 1, 2, 3));
}

TEST(Creation, FloatArangeDefaultsToFloat32) {
  Tensor t = arange(0.0, 1.0, 0.25);
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_THAT(values(t), ElementsAre(0, 0.25, 0.5, 0.75));
  EXPECT_THAT(values(arange(1.0, 0.0, -0.25, {.dtype = kFloat64})), ElementsAre(1, 0.75, 0.5, 0.25));
  // ceil((end - start) / step) elements: 0.3 / 0.1 is just below 3 in binary, so 3 elements.
  const std::vector<double> tenths = values(arange(0.0, 0.3, 0.1, {.dtype = kFloat64}));
  ASSERT_EQ(tenths.size(), 3u);
  EXPECT_DOUBLE_EQ(tenths[2], 0.2);
  EXPECT_EQ(arange(1.0, 1.0, 0.5).numel(), 0);
}

TEST(Creation, FloatArangeRejectsAZeroOrNonFiniteStep) {
  EXPECT_ERROR_CONTAINS(arange(0.0, 1.0, 0.0), "arange: expected finite start, end and a non-zero step", "0, 1, 0");
  EXPECT_ERROR_CONTAINS(arange(0.0, std::numeric_limits<double>::infinity(), 1.0), "arange", "inf");
}

TEST(Creation, LinspaceIncludesBothEndpoints) {
  Tensor t = linspace(0, 1, 5);
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_THAT(values(t), ElementsAre(0, 0.25, 0.5, 0.75, 1));
}

TEST(Creation, LinspaceEndpointsAreExact) {
  const double start = -1.3, end = 2.9;
  const int64_t steps = 11;
  const std::vector<double> v = values(linspace(start, end, steps, {.dtype = kFloat64}));
  ASSERT_EQ(v.size(), 11u);
  EXPECT_EQ(v.front(), start);
  EXPECT_EQ(v.back(), end);
  const double delta = (end - start) / (steps - 1);
  for (int64_t i = 0; i < steps; ++i) EXPECT_NEAR(v[i], start + delta * i, 1e-14) << i;
  const std::vector<double> down = values(linspace(5, -5, 4, {.dtype = kFloat64}));
  EXPECT_EQ(down.front(), 5);
  EXPECT_EQ(down.back(), -5);
  EXPECT_NEAR(down[1], 5 - 10.0 / 3, 1e-14);
}

TEST(Creation, LinspaceWithZeroOrOneStep) {
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
  // One step gives the start (as in numpy and PyTorch), not the end.
  EXPECT_THAT(values(linspace(3, 10, 1, {.dtype = kFloat64})), ElementsAre(3));
  EXPECT_THAT(values(linspace(3, 10, 2, {.dtype = kFloat64})), ElementsAre(3, 10));
  EXPECT_ERROR_CONTAINS(linspace(0, 1, -1), "linspace: expected a non-negative number of steps, found -1");
}

TEST(Creation, EyeIsTheIdentity) {
  Tensor t = eye(3);
  EXPECT_EQ(t.sizes(), (Shape{3, 3}));
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_THAT(values(t), ElementsAre(1, 0, 0, 0, 1, 0, 0, 0, 1));
  EXPECT_THAT(eye(2, {.dtype = kInt64}).to_vector<int64_t>(), ElementsAre(1, 0, 0, 1));
}

TEST(Creation, RectangularEye) {
  Tensor wide = eye(2, 4, {.dtype = kFloat64});
  EXPECT_EQ(wide.sizes(), (Shape{2, 4}));
  EXPECT_THAT(values(wide), ElementsAre(1, 0, 0, 0, 0, 1, 0, 0));
  Tensor tall = eye(3, 2, {.dtype = kFloat64});
  EXPECT_EQ(tall.sizes(), (Shape{3, 2}));
  EXPECT_THAT(values(tall), ElementsAre(1, 0, 0, 1, 0, 0));
  EXPECT_EQ(eye(0).sizes(), (Shape{0, 0}));
  EXPECT_EQ(eye(2, 0).sizes(), (Shape{2, 0}));
  EXPECT_ERROR_CONTAINS(eye(-1, 2), "eye: expected non-negative sizes, found -1 x 2");
}

TEST(Creation, FromVectorTakesItsDtypeFromTheElementType) {
  EXPECT_EQ(from_vector<float>({1, 2}).dtype(), kFloat32);
  EXPECT_EQ(from_vector<double>({1, 2}).dtype(), kFloat64);
  EXPECT_EQ(from_vector<int64_t>({1, 2}).dtype(), kInt64);
  EXPECT_EQ(from_vector<bool>({true}).dtype(), kBool);
}

TEST(Creation, FromVectorFillsTheShapeInRowMajorOrder) {
  Tensor v = from_vector<double>({1.5, 2.5, 3.5});
  EXPECT_EQ(v.sizes(), Shape{3});
  EXPECT_THAT(values(v), ElementsAre(1.5, 2.5, 3.5));
  Tensor m = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(m.sizes(), (Shape{2, 3}));
  EXPECT_EQ(m.at<int64_t>({0, 2}), 3);
  EXPECT_EQ(m.at<int64_t>({1, 0}), 4);
  Tensor scalar = from_vector<double>({4.25}, Shape{});
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item<double>(), 4.25);
  EXPECT_EQ(from_vector<float>({}, {0, 3}).sizes(), (Shape{0, 3}));
}

TEST(Creation, FromVectorRejectsACountMismatch) {
  EXPECT_ERROR_CONTAINS(from_vector<double>({1, 2, 3, 4, 5}, {2, 3}),
                        "from_vector: 5 values cannot fill shape [2, 3] (6 elements)");
  EXPECT_ERROR_CONTAINS(from_vector<int64_t>({1, 2}, Shape{}), "2 values cannot fill shape [] (1 elements)");
}

TEST(Creation, FromVectorOfBool) {
  Tensor t = from_vector<bool>({true, false, false, true}, {2, 2});
  EXPECT_EQ(t.dtype(), kBool);
  EXPECT_THAT(t.to_vector<bool>(), ElementsAre(true, false, false, true));
  EXPECT_THAT(values(t), ElementsAre(1, 0, 0, 1));
}

}  // namespace
}  // namespace distgrad
