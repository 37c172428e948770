// Tests of the view ops: each result's values, and that views share their base's storage
// (a write through the view shows in the base).
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using testing::values;

// 0, 1, ..., n - 1 as float64.
Tensor iota(int64_t n) { return arange(n, {.dtype = kFloat64}); }

bool shares_storage(const Tensor& a, const Tensor& b) { return a.storage().data() == b.storage().data(); }

TEST(Views, ViewSharesStorage) {
  Tensor base = iota(6);
  Tensor m = untracked::view(base, {2, 3});
  EXPECT_EQ(m.sizes(), (Shape{2, 3}));
  EXPECT_EQ(m.strides(), (Shape{3, 1}));
  EXPECT_TRUE(shares_storage(m, base));
  EXPECT_EQ(m.at<double>({1, 0}), 3);
  untracked::fill_(untracked::select(m, 0, 1), -1);
  EXPECT_THAT(values(base), ElementsAre(0, 1, 2, -1, -1, -1));
}

TEST(Views, ViewInfersOneSize) {
  Tensor base = iota(12);
  EXPECT_EQ(untracked::view(base, {-1, 4}).sizes(), (Shape{3, 4}));
  EXPECT_EQ(untracked::view(base, {2, -1, 3}).sizes(), (Shape{2, 2, 3}));
  EXPECT_EQ(untracked::view(base, {-1}).sizes(), Shape{12});
  EXPECT_EQ(untracked::view(scalar_tensor(1), {-1}).sizes(), Shape{1});
  EXPECT_EQ(untracked::view(iota(1), {}).dim(), 0);
}

TEST(Views, ViewRejectsBadShapes) {
  Tensor base = iota(6);
  EXPECT_ERROR_CONTAINS(untracked::view(base, {-1, -1}), "view: only one dimension can be -1, found shape [-1, -1]");
  EXPECT_ERROR_CONTAINS(untracked::view(base, {4, -1}), "view: shape [4, -1] is invalid for a tensor of 6 elements");
  EXPECT_ERROR_CONTAINS(untracked::view(base, {4}), "view: shape [4] is invalid for a tensor of 6 elements");
  EXPECT_ERROR_CONTAINS(untracked::view(base, {-2, -3}), "view: invalid size -2 in shape [-2, -3]");
  EXPECT_ERROR_CONTAINS(untracked::reshape(base, {0, -1}),
                        "reshape: shape [0, -1] is invalid for a tensor of 6 elements");
}

TEST(Views, ViewOfANonContiguousTensorFailsAndNamesReshape) {
  Tensor m = untracked::t(untracked::view(iota(6), {2, 3}));
  EXPECT_ERROR_CONTAINS(untracked::view(m, {6}),
                        "view: a tensor of shape [3, 2] and strides [1, 3] cannot be viewed as [6]", "use reshape");
}

TEST(Views, ViewSplitsADimOfANonContiguousTensorWhenStridesAllow) {
  // Columns 0..2 of a 4 x 6 matrix: rows are 6 apart, so the row dim can be split but not merged.
  Tensor base = untracked::view(iota(24), {4, 6});
  Tensor left = untracked::slice(base, 1, 0, 3);
  Tensor split = untracked::view(left, {2, 2, 3});
  EXPECT_EQ(split.strides(), (Shape{12, 6, 1}));
  EXPECT_TRUE(shares_storage(split, base));
  EXPECT_EQ(split.at<double>({1, 1, 2}), 20);
  EXPECT_ERROR_CONTAINS(untracked::view(left, {12}), "cannot be viewed as [12]");
}

TEST(Views, ReshapeCopiesWhenAViewIsImpossible) {
  Tensor base = untracked::view(iota(6), {2, 3});
  Tensor flat = untracked::reshape(untracked::t(base), {6});
  EXPECT_THAT(values(flat), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_FALSE(shares_storage(flat, base));
  untracked::fill_(flat, 9);
  EXPECT_THAT(values(base), ElementsAre(0, 1, 2, 3, 4, 5));
}

TEST(Views, ReshapeSharesStorageWhenPossible) {
  Tensor base = iota(6);
  Tensor m = untracked::reshape(base, {3, -1});
  EXPECT_EQ(m.sizes(), (Shape{3, 2}));
  EXPECT_TRUE(shares_storage(m, base));
  untracked::fill_(untracked::select(m, 1, 1), 7);
  EXPECT_THAT(values(base), ElementsAre(0, 7, 2, 7, 4, 7));
  // A transposed tensor reshaped to its own shape (or with size-1 dims added) stays a view.
  Tensor t = untracked::t(untracked::view(iota(6), {2, 3}));
  EXPECT_TRUE(shares_storage(untracked::reshape(t, {3, 1, 2}), t));
}

TEST(Views, FlattenMergesARangeOfDims) {
  Tensor base = untracked::view(iota(24), {2, 3, 4});
  EXPECT_EQ(untracked::flatten(base).sizes(), Shape{24});
  EXPECT_EQ(untracked::flatten(base, 1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(untracked::flatten(base, 0, 1).sizes(), (Shape{6, 4}));
  EXPECT_EQ(untracked::flatten(base, -2, -1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(untracked::flatten(base, 1, 1).sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(untracked::flatten(scalar_tensor(5)).sizes(), Shape{1});
  EXPECT_TRUE(shares_storage(untracked::flatten(base), base));
  EXPECT_ERROR_CONTAINS(untracked::flatten(base, 2, 1), "flatten: start_dim 2 comes after end_dim 1");
  EXPECT_ERROR_CONTAINS(untracked::flatten(base, 3), "flatten: dimension 3 is out of range for a 3-D tensor");
}

TEST(Views, FlattenOfATransposedTensorFollowsLogicalOrder) {
  Tensor t = untracked::t(untracked::view(iota(6), {2, 3}));
  EXPECT_THAT(values(untracked::flatten(t)), ElementsAre(0, 3, 1, 4, 2, 5));
}

TEST(Views, SqueezeRemovesSizeOneDims) {
  Tensor base = untracked::view(iota(6), {1, 3, 1, 2});
  EXPECT_EQ(untracked::squeeze(base).sizes(), (Shape{3, 2}));
  EXPECT_EQ(untracked::squeeze(base, 0).sizes(), (Shape{3, 1, 2}));
  EXPECT_EQ(untracked::squeeze(base, -2).sizes(), (Shape{1, 3, 2}));
  EXPECT_EQ(untracked::squeeze(base, 1).sizes(), (Shape{1, 3, 1, 2}));  // size 3: unchanged
  EXPECT_EQ(untracked::squeeze(untracked::view(iota(1), {1, 1})).dim(), 0);
  Tensor squeezed = untracked::squeeze(base);
  EXPECT_TRUE(shares_storage(squeezed, base));
  EXPECT_EQ(squeezed.at<double>({2, 1}), 5);
  EXPECT_ERROR_CONTAINS(untracked::squeeze(base, 4), "squeeze: dimension 4 is out of range for a 4-D tensor",
                        "[-4, 3]");
}

TEST(Views, UnsqueezeInsertsASizeOneDim) {
  Tensor base = untracked::view(iota(6), {2, 3});
  EXPECT_EQ(untracked::unsqueeze(base, 0).sizes(), (Shape{1, 2, 3}));
  EXPECT_EQ(untracked::unsqueeze(base, 1).sizes(), (Shape{2, 1, 3}));
  EXPECT_EQ(untracked::unsqueeze(base, 2).sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(untracked::unsqueeze(base, -1).sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(untracked::unsqueeze(base, -3).sizes(), (Shape{1, 2, 3}));
  EXPECT_EQ(untracked::unsqueeze(scalar_tensor(1), 0).sizes(), Shape{1});
  Tensor u = untracked::unsqueeze(base, 1);
  EXPECT_TRUE(shares_storage(u, base));
  EXPECT_TRUE(u.is_contiguous());
  EXPECT_EQ(u.at<double>({1, 0, 2}), 5);
  EXPECT_ERROR_CONTAINS(untracked::unsqueeze(base, 3), "unsqueeze: dimension 3 is out of range for a 3-D tensor",
                        "[-3, 2]");
  EXPECT_ERROR_CONTAINS(untracked::unsqueeze(base, -4), "unsqueeze: dimension -4 is out of range");
}

TEST(Views, TransposeSwapsTwoDims) {
  Tensor base = untracked::view(iota(24), {2, 3, 4});
  Tensor t = untracked::transpose(base, 0, 2);
  EXPECT_EQ(t.sizes(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(t.at<double>({k, j, i}), i * 12 + j * 4 + k);
    }
  }
  EXPECT_EQ(untracked::transpose(base, -1, 0).sizes(), (Shape{4, 3, 2}));
  untracked::fill_(untracked::select(untracked::select(t, 0, 3), 0, 2), -5);  // t[3, 2, :] is base[:, 2, 3]
  EXPECT_EQ(base.at<double>({0, 2, 3}), -5);
  EXPECT_EQ(base.at<double>({1, 2, 3}), -5);
  EXPECT_ERROR_CONTAINS(untracked::transpose(base, 0, 3), "transpose: dimension 3 is out of range");
}

TEST(Views, ZeroDimTensorsStillCheckDims) {
  Tensor scalar = scalar_tensor(4);
  EXPECT_EQ(untracked::squeeze(scalar, 0).dim(), 0);
  EXPECT_EQ(untracked::squeeze(scalar, -1).dim(), 0);
  EXPECT_EQ(untracked::transpose(scalar, 0, -1).dim(), 0);
  EXPECT_ERROR_CONTAINS(untracked::squeeze(scalar, 1), "squeeze: dimension 1 is out of range for a 0-D tensor");
  EXPECT_ERROR_CONTAINS(untracked::transpose(scalar, 0, 2), "transpose: dimension 2 is out of range for a 0-D tensor");
}

TEST(Views, PermuteReordersDims) {
  Tensor base = untracked::view(iota(24), {2, 3, 4});
  Tensor p = untracked::permute(base, {2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_EQ(p.at<double>({3, 1, 2}), 1 * 12 + 2 * 4 + 3);
  EXPECT_EQ(untracked::permute(base, {-1, 0, 1}).sizes(), (Shape{4, 2, 3}));
  EXPECT_TRUE(shares_storage(p, base));
  EXPECT_ERROR_CONTAINS(untracked::permute(base, {0, 1}),
                        "permute: expected 3 dims for a tensor of shape [2, 3, 4], found [0, 1]");
  EXPECT_ERROR_CONTAINS(untracked::permute(base, {0, 0, 1}), "permute: dims [0, 0, 1] repeat dimension 0");
}

TEST(Views, TTransposesAMatrixOnly) {
  Tensor m = untracked::view(iota(6), {2, 3});
  Tensor t = untracked::t(m);
  EXPECT_EQ(t.sizes(), (Shape{3, 2}));
  EXPECT_THAT(values(t), ElementsAre(0, 3, 1, 4, 2, 5));
  Tensor v = iota(3);
  EXPECT_TRUE(untracked::t(v).is_same(v));
  EXPECT_EQ(untracked::t(scalar_tensor(2)).dim(), 0);
  EXPECT_ERROR_CONTAINS(untracked::t(untracked::view(iota(24), {2, 3, 4})),
                        "t: expected a tensor of at most 2 dims, found shape [2, 3, 4]", "transpose or permute");
}

TEST(Views, ExpandBroadcastsWithStrideZero) {
  Tensor column = from_vector<double>({1, 2, 3}, {3, 1});
  Tensor e = untracked::expand(column, {3, 4});
  EXPECT_EQ(e.sizes(), (Shape{3, 4}));
  EXPECT_EQ(e.strides(), (Shape{1, 0}));
  EXPECT_THAT(values(e), ElementsAre(1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  EXPECT_EQ(untracked::expand(column, {-1, 2}).sizes(), (Shape{3, 2}));
  Tensor leading = untracked::expand(column, {2, 3, 4});
  EXPECT_EQ(leading.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(leading.at<double>({1, 2, 3}), 3);
  untracked::fill_(untracked::select(column, 0, 1), 20);
  EXPECT_EQ(e.at<double>({1, 3}), 20);  // shares the base's storage
}

TEST(Views, ExpandRejectsIncompatibleSizes) {
  Tensor column = from_vector<double>({1, 2, 3}, {3, 1});
  EXPECT_ERROR_CONTAINS(untracked::expand(column, {4, 4}),
                        "expand: cannot expand shape [3, 1] to [4, 4] (dimension 0: 3 vs 4)");
  EXPECT_ERROR_CONTAINS(untracked::expand(column, {3}), "expand: cannot expand shape [3, 1] to fewer dims [3]");
  EXPECT_ERROR_CONTAINS(untracked::expand(column, {-1, 3, 1}), "expand: size -1 is not allowed for a new leading dim");
}

TEST(Views, ExpandRejectsNegativeSizes) {
  EXPECT_ERROR_CONTAINS(untracked::expand(from_vector<double>({1, 2, 3}, {3, 1}), {3, -2}),
                        "expand: cannot expand shape [3, 1] to [3, -2] (dimension 1: 1 vs -2)");
}

TEST(Views, ReshapeOfAnExpandedTensor) {
  Tensor row = from_vector<double>({1, 2, 3, 4}, {1, 4});
  Tensor expanded = untracked::expand(row, {3, 4});
  Tensor split = untracked::reshape(expanded, {3, 2, 2});
  EXPECT_EQ(split.strides(), (Shape{0, 2, 1}));
  EXPECT_TRUE(shares_storage(split, row));
  Tensor flat = untracked::reshape(expanded, {12});
  EXPECT_FALSE(shares_storage(flat, row));
  EXPECT_THAT(values(flat), ElementsAre(1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4));
}

TEST(Views, SliceTakesARange) {
  Tensor x = iota(10);
  EXPECT_THAT(values(untracked::slice(x, 0, 2, 7)), ElementsAre(2, 3, 4, 5, 6));
  EXPECT_THAT(values(untracked::slice(x, 0, -3, 10)), ElementsAre(7, 8, 9));
  EXPECT_THAT(values(untracked::slice(x, 0, 0, -8)), ElementsAre(0, 1));
  EXPECT_THAT(values(untracked::slice(x, -1, 1, 8, 3)), ElementsAre(1, 4, 7));
  EXPECT_THAT(values(untracked::slice(x, 0, 1, 9, 4)), ElementsAre(1, 5));
}

TEST(Views, SliceClampsItsBounds) {
  Tensor x = iota(10);
  EXPECT_THAT(values(untracked::slice(x, 0, 5, 100)), ElementsAre(5, 6, 7, 8, 9));
  EXPECT_THAT(values(untracked::slice(x, 0, -100, 2)), ElementsAre(0, 1));
  EXPECT_EQ(untracked::slice(x, 0, 12, 20).numel(), 0);
  EXPECT_EQ(untracked::slice(x, 0, 6, 3).numel(), 0);
  EXPECT_EQ(untracked::slice(x, 0, 6, 3).sizes(), Shape{0});
}

TEST(Views, SliceSharesStorage) {
  Tensor m = untracked::view(iota(12), {3, 4});
  Tensor odd_columns = untracked::slice(m, 1, 1, 4, 2);
  EXPECT_EQ(odd_columns.sizes(), (Shape{3, 2}));
  EXPECT_EQ(odd_columns.strides(), (Shape{4, 2}));
  EXPECT_THAT(values(odd_columns), ElementsAre(1, 3, 5, 7, 9, 11));
  untracked::fill_(odd_columns, 0);
  EXPECT_THAT(values(m), ElementsAre(0, 0, 2, 0, 4, 0, 6, 0, 8, 0, 10, 0));
}

TEST(Views, SliceRejectsBadArguments) {
  EXPECT_ERROR_CONTAINS(untracked::slice(iota(4), 0, 0, 4, 0), "slice: expected a positive step, found 0");
  EXPECT_ERROR_CONTAINS(untracked::slice(iota(4), 0, 0, 4, -1), "slice: expected a positive step, found -1");
  EXPECT_ERROR_CONTAINS(untracked::slice(scalar_tensor(1), 0, 0, 1), "slice: cannot slice a 0-dim tensor");
  EXPECT_ERROR_CONTAINS(untracked::slice(iota(4), 1, 0, 1), "slice: dimension 1 is out of range for a 1-D tensor");
}

TEST(Views, NarrowTakesLengthElements) {
  Tensor x = iota(10);
  EXPECT_THAT(values(untracked::narrow(x, 0, 2, 3)), ElementsAre(2, 3, 4));
  EXPECT_THAT(values(untracked::narrow(x, 0, -3, 2)), ElementsAre(7, 8));
  EXPECT_EQ(untracked::narrow(x, 0, 10, 0).numel(), 0);
  Tensor m = untracked::view(iota(12), {3, 4});
  Tensor middle = untracked::narrow(m, 1, 1, 2);
  EXPECT_THAT(values(middle), ElementsAre(1, 2, 5, 6, 9, 10));
  EXPECT_TRUE(shares_storage(middle, m));
}

TEST(Views, NarrowMustFit) {
  Tensor x = iota(10);
  EXPECT_ERROR_CONTAINS(untracked::narrow(x, 0, 8, 3),
                        "narrow: start 8 and length 3 do not fit dimension 0 of size 10");
  EXPECT_ERROR_CONTAINS(untracked::narrow(x, 0, -11, 1), "narrow: start -11 and length 1 do not fit");
  EXPECT_ERROR_CONTAINS(untracked::narrow(x, 0, 0, -1), "narrow: start 0 and length -1 do not fit");
  EXPECT_ERROR_CONTAINS(untracked::narrow(scalar_tensor(1), 0, 0, 1), "narrow: cannot narrow a 0-dim tensor");
}

TEST(Views, SelectRemovesTheDim) {
  Tensor m = untracked::view(iota(6), {2, 3});
  Tensor row = untracked::select(m, 0, 1);
  EXPECT_EQ(row.sizes(), Shape{3});
  EXPECT_THAT(values(row), ElementsAre(3, 4, 5));
  EXPECT_THAT(values(untracked::select(m, 1, -1)), ElementsAre(2, 5));
  EXPECT_THAT(values(untracked::select(m, -1, 0)), ElementsAre(0, 3));
  Tensor element = untracked::select(row, 0, 2);
  EXPECT_EQ(element.dim(), 0);
  untracked::fill_(element, 50);
  EXPECT_EQ(m.at<double>({1, 2}), 50);
}

TEST(Views, SelectRejectsBadIndices) {
  Tensor m = untracked::view(iota(6), {2, 3});
  EXPECT_ERROR_CONTAINS(untracked::select(m, 1, 3), "select: index 3 is out of range for dimension 1 of size 3");
  EXPECT_ERROR_CONTAINS(untracked::select(m, 1, -4), "select: index -4 is out of range for dimension 1 of size 3");
  EXPECT_ERROR_CONTAINS(untracked::select(m, 2, 0), "select: dimension 2 is out of range for a 2-D tensor");
  EXPECT_ERROR_CONTAINS(untracked::select(scalar_tensor(1), 0, 0), "select: cannot select from a 0-dim tensor");
}

TEST(Views, UnbindReturnsEverySelection) {
  Tensor m = untracked::view(iota(6), {2, 3});
  std::vector<Tensor> rows = untracked::unbind(m);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_THAT(values(rows[0]), ElementsAre(0, 1, 2));
  EXPECT_THAT(values(rows[1]), ElementsAre(3, 4, 5));
  std::vector<Tensor> columns = untracked::unbind(m, -1);
  ASSERT_EQ(columns.size(), 3u);
  EXPECT_THAT(values(columns[2]), ElementsAre(2, 5));
  untracked::fill_(columns[1], -1);
  EXPECT_THAT(values(m), ElementsAre(0, -1, 2, 3, -1, 5));
  EXPECT_ERROR_CONTAINS(untracked::unbind(scalar_tensor(1)), "unbind", "0-dim");
}

TEST(Views, SplitCutsPiecesOfOneSize) {
  Tensor x = iota(10);
  std::vector<Tensor> pieces = untracked::split(x, 4);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_THAT(values(pieces[0]), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(values(pieces[1]), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(values(pieces[2]), ElementsAre(8, 9));
  EXPECT_EQ(untracked::split(x, 20).size(), 1u);
  EXPECT_EQ(untracked::split(x, 5).size(), 2u);
  Tensor m = untracked::view(iota(12), {2, 6});
  std::vector<Tensor> halves = untracked::split(m, 3, 1);
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_THAT(values(halves[1]), ElementsAre(3, 4, 5, 9, 10, 11));
  untracked::fill_(halves[1], 0);
  EXPECT_THAT(values(m), ElementsAre(0, 1, 2, 0, 0, 0, 6, 7, 8, 0, 0, 0));
  EXPECT_ERROR_CONTAINS(untracked::split(x, 0), "split: expected a positive split_size, found 0");
  EXPECT_ERROR_CONTAINS(untracked::split(scalar_tensor(1), 1), "split", "0-dim");
}

TEST(Views, SplitWithSizesCutsTheGivenSizes) {
  Tensor x = iota(10);
  std::vector<Tensor> pieces = untracked::split_with_sizes(x, {2, 5, 0, 3});
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_THAT(values(pieces[0]), ElementsAre(0, 1));
  EXPECT_THAT(values(pieces[1]), ElementsAre(2, 3, 4, 5, 6));
  EXPECT_EQ(pieces[2].numel(), 0);
  EXPECT_THAT(values(pieces[3]), ElementsAre(7, 8, 9));
  untracked::fill_(pieces[3], -1);
  EXPECT_EQ(x.at<double>({9}), -1);
  EXPECT_ERROR_CONTAINS(untracked::split_with_sizes(x, {2, 5}),
                        "split_with_sizes: sizes [2, 5] add up to 7 but dimension 0 has size 10");
  EXPECT_ERROR_CONTAINS(untracked::split_with_sizes(x, {-1, 11}), "split_with_sizes: negative size in [-1, 11]");
}

TEST(Views, ChunkCutsAtMostTheGivenNumberOfPieces) {
  Tensor x = iota(10);
  std::vector<Tensor> thirds = untracked::chunk(x, 3);
  ASSERT_EQ(thirds.size(), 3u);
  EXPECT_EQ(thirds[0].numel(), 4);
  EXPECT_EQ(thirds[1].numel(), 4);
  EXPECT_THAT(values(thirds[2]), ElementsAre(8, 9));
  EXPECT_EQ(untracked::chunk(x, 5).size(), 5u);
  EXPECT_EQ(untracked::chunk(iota(6), 4).size(), 3u);  // pieces of ceil(6 / 4) = 2, as in PyTorch
  std::vector<Tensor> columns = untracked::chunk(untracked::view(iota(6), {2, 3}), 3, 1);
  ASSERT_EQ(columns.size(), 3u);
  EXPECT_THAT(values(columns[1]), ElementsAre(1, 4));
  untracked::fill_(thirds[1], 0);
  EXPECT_THAT(values(x), ElementsAre(0, 1, 2, 3, 0, 0, 0, 0, 8, 9));
  EXPECT_ERROR_CONTAINS(untracked::chunk(x, 0), "chunk: expected a positive number of chunks, found 0");
}

TEST(Views, AsStridedReadsAnyWindowOfTheStorage) {
  Tensor x = iota(10);
  Tensor windows = untracked::as_strided(x, {3, 4}, {2, 1}, 1);
  EXPECT_THAT(values(windows), ElementsAre(1, 2, 3, 4, 3, 4, 5, 6, 5, 6, 7, 8));
  EXPECT_ERROR_CONTAINS(untracked::as_strided(x, {3, 4}, {3, 1}, 1), "needs 88 bytes but the storage holds 80");
}

}  // namespace
}  // namespace distgrad
