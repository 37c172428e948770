// Tests of the ops that join tensors or pick elements by index: cat, stack, index_select,
// gather, scatter_add, masked_fill, where and one_hot.
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::transposed_copy_of;
using testing::values;

Tensor indices(std::vector<int64_t> v, const Shape& sizes) { return from_vector(v, sizes); }
Tensor indices(std::vector<int64_t> v) { return from_vector(v); }

// [[1, 2, 3], [4, 5, 6]] as float64.
Tensor matrix23() { return from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}); }

TEST(Indexing, CatAlongTheFirstDim) {
  Tensor out = untracked::cat({matrix23(), from_vector<double>({7, 8, 9}, {1, 3})});
  EXPECT_EQ(out.sizes(), (Shape{3, 3}));
  EXPECT_THAT(values(out), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9));
}

TEST(Indexing, CatAlongTheLastDim) {
  Tensor out = untracked::cat({from_vector<double>({10, 20}, {2, 1}), matrix23()}, -1);
  EXPECT_EQ(out.sizes(), (Shape{2, 4}));
  EXPECT_THAT(values(out), ElementsAre(10, 1, 2, 3, 20, 4, 5, 6));
  EXPECT_THAT(values(untracked::cat({matrix23(), matrix23()}, 1)), ElementsAre(1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6));
}

TEST(Indexing, CatCopiesNonContiguousAndEmptyInputs) {
  Tensor transposed = transposed_copy_of({1, 2, 3, 4, 5, 6}, 2, 3);
  Tensor stepped = untracked::slice(matrix23(), 1, 0, 3, 2);  // columns 0 and 2
  Tensor out = untracked::cat({transposed, zeros({2, 0}, {.dtype = kFloat64}), stepped}, 1);
  EXPECT_EQ(out.sizes(), (Shape{2, 5}));
  EXPECT_THAT(values(out), ElementsAre(1, 2, 3, 1, 3, 4, 5, 6, 4, 6));
}

TEST(Indexing, CatMismatchNamesTheTensorAndShapes) {
  EXPECT_ERROR_CONTAINS(untracked::cat({matrix23(), zeros({2, 4}, {.dtype = kFloat64})}),
                        "cat: tensor 1 has shape [2, 4] but tensor 0 has shape [2, 3]",
                        "all sizes must match except in dimension 0");
  EXPECT_ERROR_CONTAINS(untracked::cat({matrix23(), matrix23(), zeros({3}, {.dtype = kFloat64})}, 1),
                        "cat: tensor 2 has shape [3] but tensor 0 has shape [2, 3]");
}

TEST(Indexing, CatRejectsMixedDtypes) {
  EXPECT_ERROR_CONTAINS(untracked::cat({matrix23(), zeros({1, 3})}),
                        "cat: expected tensors of one dtype, found a float64 tensor of shape [2, 3] on cpu and a "
                        "float32 tensor of shape [1, 3] on cpu");
}

TEST(Indexing, CatRejectsNoTensorsAndZeroDimTensors) {
  EXPECT_ERROR_CONTAINS(untracked::cat({}), "cat: expected at least one tensor");
  EXPECT_ERROR_CONTAINS(untracked::cat({scalar_tensor(1), scalar_tensor(2)}),
                        "cat: zero-dimensional tensors cannot be concatenated");
  EXPECT_ERROR_CONTAINS(untracked::cat({matrix23()}, 2), "cat: dimension 2 is out of range for a 2-D tensor");
}

TEST(Indexing, CatReturnsNewMemory) {
  Tensor a = matrix23();
  Tensor out = untracked::cat({a});
  untracked::fill_(out, 0);
  EXPECT_THAT(values(a), ElementsAre(1, 2, 3, 4, 5, 6));
}

TEST(Indexing, StackAddsADim) {
  Tensor a = from_vector<double>({1, 2, 3}), b = from_vector<double>({4, 5, 6});
  Tensor rows = untracked::stack({a, b});
  EXPECT_EQ(rows.sizes(), (Shape{2, 3}));
  EXPECT_THAT(values(rows), ElementsAre(1, 2, 3, 4, 5, 6));
  Tensor columns = untracked::stack({a, b}, 1);
  EXPECT_EQ(columns.sizes(), (Shape{3, 2}));
  EXPECT_THAT(values(columns), ElementsAre(1, 4, 2, 5, 3, 6));
  EXPECT_THAT(values(untracked::stack({a, b}, -1)), ElementsAre(1, 4, 2, 5, 3, 6));
  Tensor scalars = untracked::stack({scalar_tensor(7), scalar_tensor(8), scalar_tensor(9)});
  EXPECT_EQ(scalars.sizes(), Shape{3});
  EXPECT_THAT(values(scalars), ElementsAre(7, 8, 9));
}

TEST(Indexing, StackRejectsDifferentShapes) {
  EXPECT_ERROR_CONTAINS(untracked::stack({from_vector<double>({1, 2}), from_vector<double>({1, 2, 3})}),
                        "stack: expected tensors of one shape, tensor 1 has shape [3] but tensor 0 has shape [2]");
  EXPECT_ERROR_CONTAINS(untracked::stack({from_vector<double>({1, 2})}, 2),
                        "stack: dimension 2 is out of range for a 2-D tensor (expected a value in [-2, 1])");
  EXPECT_ERROR_CONTAINS(untracked::stack({}), "stack: expected at least one tensor");
}

TEST(Indexing, IndexSelectPicksRowsOrColumns) {
  Tensor rows = untracked::index_select(matrix23(), 0, indices({1, 0, 1}));
  EXPECT_EQ(rows.sizes(), (Shape{3, 3}));
  EXPECT_THAT(values(rows), ElementsAre(4, 5, 6, 1, 2, 3, 4, 5, 6));
  Tensor columns = untracked::index_select(matrix23(), -1, indices({2, 2, 0, 1}));
  EXPECT_EQ(columns.sizes(), (Shape{2, 4}));
  EXPECT_THAT(values(columns), ElementsAre(3, 3, 1, 2, 6, 6, 4, 5));
  EXPECT_EQ(untracked::index_select(matrix23(), 1, indices({}, {0})).sizes(), (Shape{2, 0}));
}

TEST(Indexing, IndexSelectOfAStridedInput) {
  Tensor t = transposed_copy_of({1, 2, 3, 4, 5, 6}, 2, 3);
  EXPECT_THAT(values(untracked::index_select(t, 1, indices({2, 0}))), ElementsAre(3, 1, 6, 4));
  Tensor cube = from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2});
  EXPECT_THAT(untracked::index_select(cube, 1, indices({1})).to_vector<int64_t>(), ElementsAre(2, 3, 6, 7));
}

TEST(Indexing, IndexSelectChecksItsIndex) {
  EXPECT_ERROR_CONTAINS(untracked::index_select(matrix23(), 0, indices({0, 2})),
                        "index_select: index 2 is out of range for dimension 0 of size 2 (expected indices in [0, 2))");
  EXPECT_ERROR_CONTAINS(untracked::index_select(matrix23(), 1, indices({-1})),
                        "index_select: index -1 is out of range for dimension 1 of size 3");
  EXPECT_ERROR_CONTAINS(untracked::index_select(matrix23(), 0, from_vector<float>({0})),
                        "index_select: expected an int64 index tensor, found a float32 tensor of shape [1] on cpu");
  EXPECT_ERROR_CONTAINS(untracked::index_select(matrix23(), 0, indices({0, 1}, {1, 2})),
                        "index_select: expected a 1-D index, found shape [1, 2]");
}

TEST(Indexing, GatherAlongTheFirstDim) {
  Tensor t = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  // out[i][j] = t[index[i][j]][j]
  Tensor out = untracked::gather(t, 0, indices({2, 0, 1, 1}, {2, 2}));
  EXPECT_EQ(out.sizes(), (Shape{2, 2}));
  EXPECT_THAT(values(out), ElementsAre(5, 2, 3, 4));
}

TEST(Indexing, GatherAlongTheLastDim) {
  Tensor t = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  // out[i][j] = t[i][index[i][j]]; the index may be longer than t along dim and shorter elsewhere.
  EXPECT_THAT(values(untracked::gather(t, 1, indices({2, 2, 0, 1, 0, 1, 2, 0}, {2, 4}))),
              ElementsAre(3, 3, 1, 2, 4, 5, 6, 4));
  EXPECT_THAT(values(untracked::gather(t, -1, indices({1}, {1, 1}))), ElementsAre(2));
  EXPECT_THAT(values(untracked::gather(untracked::t(t), 0, indices({2, 1}, {1, 2}))), ElementsAre(3, 5));
}

TEST(Indexing, GatherChecksItsIndex) {
  Tensor t = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_ERROR_CONTAINS(untracked::gather(t, 0, indices({3, 0}, {1, 2})),
                        "gather: index 3 is out of range for dimension 0 of size 3");
  EXPECT_ERROR_CONTAINS(untracked::gather(t, 1, indices({0, -1}, {1, 2})),
                        "gather: index -1 is out of range for dimension 1 of size 2");
  EXPECT_ERROR_CONTAINS(untracked::gather(t, 0, indices({0})), "gather: index has 1 dims but the input has 2");
  EXPECT_ERROR_CONTAINS(untracked::gather(t, 1, indices({0, 0, 0, 0}, {4, 1})),
                        "gather: index shape [4, 1] exceeds input shape [3, 2] in dimension 0");
}

TEST(Indexing, ScatterAddAlongTheFirstDim) {
  // self[index[i][j]][j] += src[i][j]; duplicate positions accumulate.
  Tensor self = zeros({3, 2}, {.dtype = kFloat64});
  Tensor src = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor out = untracked::scatter_add(self, 0, indices({0, 1, 2, 0, 0, 0}, {3, 2}), src);
  EXPECT_THAT(values(out), ElementsAre(6, 10, 0, 2, 3, 0));
  EXPECT_THAT(values(self), ElementsAre(0, 0, 0, 0, 0, 0));  // the out-of-place form copies
}

TEST(Indexing, ScatterAddAlongTheLastDim) {
  Tensor self = ones({2, 3}, {.dtype = kFloat64});
  Tensor src = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor& result = untracked::scatter_add_(self, 1, indices({0, 0, 2, 1, 1, 1}, {2, 3}), src);
  EXPECT_TRUE(result.is_same(self));
  EXPECT_THAT(values(self), ElementsAre(4, 1, 4, 1, 16, 1));
}

TEST(Indexing, ScatterAddUsesTheLeadingPartOfALargerSrc) {
  Tensor src = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor out = untracked::scatter_add(zeros({2, 2}, {.dtype = kFloat64}), 0, indices({1, 0}, {1, 2}), src);
  EXPECT_THAT(values(out), ElementsAre(0, 2, 1, 0));
}

TEST(Indexing, ScatterAddIntoANonContiguousSelf) {
  Tensor base = zeros({2, 3}, {.dtype = kInt64});
  Tensor self = untracked::t(base);  // [3, 2]
  untracked::scatter_add_(self, 0, indices({2, 0}, {1, 2}), from_vector<int64_t>({5, 7}, {1, 2}));
  // self[2][0] += 5 is base[0][2]; self[0][1] += 7 is base[1][0].
  EXPECT_THAT(base.to_vector<int64_t>(), ElementsAre(0, 0, 5, 7, 0, 0));
}

TEST(Indexing, ScatterAddWithSrcAliasingSelf) {
  // x[index[i]] += old x[i]: the kernel must not read elements it already updated.
  Tensor x = from_vector<double>({1, 2});
  untracked::scatter_add_(x, 0, indices({1, 0}), x);
  EXPECT_THAT(values(x), ElementsAre(3, 3));
  Tensor y = from_vector<double>({1, 10, 100});
  untracked::scatter_add_(y, 0, indices({1, 2}), untracked::slice(y, 0, 0, 2));
  EXPECT_THAT(values(y), ElementsAre(1, 11, 110));
}

TEST(Indexing, ScatterAddWithAnIndexAliasingSelf) {
  // The indices are read before any update: both entries add to position 1 (updated in place,
  // the second index would read 2 and write out of bounds).
  Tensor x = from_vector<int64_t>({1, 1});
  untracked::scatter_add_(x, 0, x, from_vector<int64_t>({1, 1}));
  EXPECT_THAT(x.to_vector<int64_t>(), ElementsAre(1, 3));
}

TEST(Indexing, ScatterAddChecksItsIndex) {
  Tensor self = zeros({3, 2}, {.dtype = kFloat64});
  Tensor src = ones({1, 2}, {.dtype = kFloat64});
  EXPECT_ERROR_CONTAINS(untracked::scatter_add(self, 0, indices({3, 0}, {1, 2}), src),
                        "scatter_add_: index 3 is out of range for dimension 0 of size 3");
  EXPECT_ERROR_CONTAINS(untracked::scatter_add(self, 1, indices({-1, 0}, {1, 2}), src),
                        "scatter_add_: index -1 is out of range for dimension 1 of size 2");
  EXPECT_ERROR_CONTAINS(untracked::scatter_add(self, 0, indices({0, 0, 0}, {1, 3}), src),
                        "scatter_add_: index shape [1, 3]", "exceeds src shape [1, 2]");
  EXPECT_ERROR_CONTAINS(untracked::scatter_add(self, 0, indices({0, 0}, {1, 2}), ones({1, 2})),
                        "scatter_add_: expected tensors of one dtype");
  EXPECT_ERROR_CONTAINS(untracked::scatter_add_(untracked::expand(zeros({1, 2}, {.dtype = kFloat64}), {3, 2}), 0,
                                                indices({0, 0}, {1, 2}), src),
                        "scatter_add_: cannot write in place into an expanded tensor");
}

TEST(Indexing, MaskedFill) {
  Tensor mask = from_vector<bool>({true, false, false, false, true, true}, {2, 3});
  Tensor filled = untracked::masked_fill(matrix23(), mask, -1);
  EXPECT_EQ(filled.sizes(), (Shape{2, 3}));
  EXPECT_THAT(values(filled), ElementsAre(-1, 2, 3, 4, -1, -1));
  Tensor column_mask = from_vector<bool>({false, true, false});
  EXPECT_THAT(values(untracked::masked_fill(matrix23(), column_mask, 0.5)), ElementsAre(1, 0.5, 3, 4, 0.5, 6));
  EXPECT_THAT(
      untracked::masked_fill(from_vector<int64_t>({1, 2}), from_vector<bool>({false, true}), 9).to_vector<int64_t>(),
      ElementsAre(1, 9));
}

TEST(Indexing, MaskedFillInPlace) {
  Tensor m = matrix23();
  Tensor column = untracked::select(m, 1, 2);  // a strided view: [3, 6]
  const Tensor& result = untracked::masked_fill_(column, from_vector<bool>({false, true}), 0);
  EXPECT_TRUE(result.is_same(column));
  EXPECT_THAT(values(m), ElementsAre(1, 2, 3, 4, 5, 0));
  untracked::masked_fill_(m, from_vector<bool>({true}, {1, 1}), 7);
  EXPECT_THAT(values(m), ElementsAre(7, 7, 7, 7, 7, 7));
}

TEST(Indexing, MaskedFillChecksTheMask) {
  EXPECT_ERROR_CONTAINS(untracked::masked_fill(matrix23(), ones({2, 3}), 0),
                        "masked_fill_: expected a bool mask, found a float32 tensor of shape [2, 3]");
  EXPECT_ERROR_CONTAINS(untracked::masked_fill_(from_vector<double>({1, 2, 3}), ones({2, 3}, {.dtype = kBool}), 0),
                        "masked_fill_: a mask of shape [2, 3] does not broadcast to the target shape [3]");
  EXPECT_ERROR_CONTAINS(untracked::masked_fill(matrix23(), ones({2}, {.dtype = kBool}), 0),
                        "masked_fill: shapes [2, 3] and [2] cannot be broadcast together");
}

TEST(Indexing, WhereBroadcastsAllThree) {
  Tensor condition = from_vector<bool>({true, false, true}, {3, 1});
  Tensor a = from_vector<double>({1, 2, 3, 4}, {1, 4});
  Tensor b = scalar_tensor(-1, {.dtype = kFloat64});
  Tensor out = untracked::where(condition, a, b);
  EXPECT_EQ(out.sizes(), (Shape{3, 4}));
  EXPECT_THAT(values(out), ElementsAre(1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4));
  Tensor same_shape =
      untracked::where(from_vector<bool>({true, false}), from_vector<int64_t>({1, 2}), from_vector<int64_t>({3, 4}));
  EXPECT_EQ(same_shape.dtype(), kInt64);
  EXPECT_THAT(same_shape.to_vector<int64_t>(), ElementsAre(1, 4));
}

TEST(Indexing, WhereChecksItsArguments) {
  Tensor a = from_vector<double>({1, 2});
  EXPECT_ERROR_CONTAINS(untracked::where(a, a, a),
                        "where: expected a bool condition, found a float64 tensor of shape [2]");
  EXPECT_ERROR_CONTAINS(untracked::where(from_vector<bool>({true, false}), a, from_vector<int64_t>({1, 2})),
                        "where: expected tensors of one dtype");
  EXPECT_ERROR_CONTAINS(untracked::where(from_vector<bool>({true, false, true}), a, a),
                        "where: shapes [3] and [2] cannot be broadcast together");
}

TEST(Indexing, OneHotInfersTheNumberOfClasses) {
  Tensor out = untracked::one_hot(indices({0, 2, 1, 2}));
  EXPECT_EQ(out.dtype(), kInt64);
  EXPECT_EQ(out.sizes(), (Shape{4, 3}));
  EXPECT_THAT(out.to_vector<int64_t>(), ElementsAre(1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1));
}

TEST(Indexing, OneHotWithExplicitClassesAndDtype) {
  Tensor out = untracked::one_hot(indices({1, 0}), 4);
  EXPECT_EQ(out.sizes(), (Shape{2, 4}));
  EXPECT_THAT(out.to_vector<int64_t>(), ElementsAre(0, 1, 0, 0, 1, 0, 0, 0));
  Tensor as_float = untracked::one_hot(indices({2}), 3, kFloat32);
  EXPECT_EQ(as_float.dtype(), kFloat32);
  EXPECT_THAT(values(as_float), ElementsAre(0, 0, 1));
  Tensor grid = untracked::one_hot(indices({0, 1, 1, 0}, {2, 2}), 2);
  EXPECT_EQ(grid.sizes(), (Shape{2, 2, 2}));
  EXPECT_THAT(values(grid), ElementsAre(1, 0, 0, 1, 0, 1, 1, 0));
  Tensor none = untracked::one_hot(indices({}, {0}));
  EXPECT_EQ(none.sizes(), (Shape{0, 0}));
  EXPECT_THAT(values(none), IsEmpty());
}

TEST(Indexing, OneHotChecksItsClasses) {
  EXPECT_ERROR_CONTAINS(untracked::one_hot(indices({0, 3}), 3), "one_hot: index 3 is out of range", "[0, 3)");
  EXPECT_ERROR_CONTAINS(untracked::one_hot(indices({-1, 0})), "one_hot: index -1 is out of range");
  EXPECT_ERROR_CONTAINS(untracked::one_hot(from_vector<float>({1})),
                        "one_hot: expected int64 class indices, found a float32");
  EXPECT_ERROR_CONTAINS(untracked::one_hot(indices({0}), -2), "one_hot: expected num_classes >= 0 or -1, found -2");
}

}  // namespace
}  // namespace distgrad
