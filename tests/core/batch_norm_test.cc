// The fused batch normalisation (core/batch_norm.h) against plain loops over [N, C, L] in float64:
// the statistics, the output, the gradients and their own gradients; float32 against float64; the
// arguments it rejects. Its gradients against finite differences are in the autograd tests
// (tests/autograd/gradcheck_test.cc, batch_norm cases; higher_order_test.cc, third order).
#include "core/batch_norm.h"

#include <cmath>
#include <vector>

#include "core/random.h"
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using testing::values;

// Flat positions in an [N, C, L] tensor held as a vector.
struct Layout {
  int64_t batch, channels, inner;
  int64_t at(int64_t n, int64_t c, int64_t l) const { return (n * channels + c) * inner + l; }
  int64_t count() const { return batch * inner; }
};

Layout layout_of(const Shape& sizes) {
  int64_t inner = 1;
  for (size_t d = 2; d < sizes.size(); ++d) inner *= sizes[d];
  return {sizes[0], sizes[1], inner};
}

// Sum over channel c of f(k), k the flat position.
template <typename F>
double channel_sum(const Layout& layout, int64_t c, F f) {
  double total = 0;
  for (int64_t n = 0; n < layout.batch; ++n) {
    for (int64_t l = 0; l < layout.inner; ++l) total += f(layout.at(n, c, l));
  }
  return total;
}

// What untracked::batch_norm and its two backwards compute, written out per channel in float64 (the
// formulas of Note [Fused batch normalisation] in core/batch_norm.cc).
struct Reference {
  std::vector<double> output, mean, var, invstd;
  std::vector<double> grad_input, grad_weight, grad_bias;
  std::vector<double> d_grad_output, d_input, d_weight;
};

Reference reference(const Shape& sizes, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& b, const std::vector<double>& g, const std::vector<double>& ggx,
                    const std::vector<double>& ggw, const std::vector<double>& ggb, double eps) {
  const Layout layout = layout_of(sizes);
  const double count = static_cast<double>(layout.count());
  Reference r;
  r.output = r.grad_input = r.d_grad_output = r.d_input = std::vector<double>(x.size());
  for (int64_t c = 0; c < layout.channels; ++c) {
    const double mean = channel_sum(layout, c, [&](int64_t k) { return x[k]; }) / count;
    const double var = channel_sum(layout, c, [&](int64_t k) { return (x[k] - mean) * (x[k] - mean); }) / count;
    const double invstd = 1 / std::sqrt(var + eps);
    r.mean.push_back(mean), r.var.push_back(var), r.invstd.push_back(invstd);
    const auto xhat = [&](int64_t k) { return (x[k] - mean) * invstd; };
    const double mean_g = channel_sum(layout, c, [&](int64_t k) { return g[k]; }) / count;
    const double mean_g_xhat = channel_sum(layout, c, [&](int64_t k) { return g[k] * xhat(k); }) / count;
    const double mean_gg = channel_sum(layout, c, [&](int64_t k) { return ggx[k]; }) / count;
    const double q = channel_sum(layout, c, [&](int64_t k) { return ggx[k] * xhat(k); }) / count;
    const double p = channel_sum(layout, c, [&](int64_t k) { return ggx[k] * (g[k] - mean_g); }) / count;
    const double a = w[c] * invstd;
    r.grad_bias.push_back(mean_g * count);
    r.grad_weight.push_back(mean_g_xhat * count);
    r.d_weight.push_back(invstd * count * (p - mean_g_xhat * q));
    for (int64_t n = 0; n < layout.batch; ++n) {
      for (int64_t l = 0; l < layout.inner; ++l) {
        const int64_t k = layout.at(n, c, l);
        const double gc = g[k] - mean_g, ggc = ggx[k] - mean_gg;
        r.output[k] = xhat(k) * w[c] + b[c];
        r.grad_input[k] = a * (gc - xhat(k) * mean_g_xhat);
        r.d_grad_output[k] = a * (ggc - xhat(k) * q) + ggw[c] * xhat(k) + ggb[c];
        r.d_input[k] = a * invstd * (xhat(k) * (3 * mean_g_xhat * q - p) - q * gc - mean_g_xhat * ggc) +
                       ggw[c] * invstd * (gc - xhat(k) * mean_g_xhat);
      }
    }
  }
  return r;
}

void expect_near(const std::vector<double>& actual, const std::vector<double>& expected, double tolerance,
                 const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tolerance * (1 + std::abs(expected[i]))) << what << " at " << i;
  }
}

Tensor random_of(const Shape& sizes) { return randn(sizes, {.dtype = kFloat64}); }

// [N, C], [N, C, L], [N, C, H, W], one large enough to run channels in parallel, one with an
// offset mean (the variance from centred values stays exact).
TEST(BatchNorm, MatchesPlainLoopsWithEveryGradient) {
  manual_seed(11);
  const double eps = 1e-5;
  for (const Shape& sizes : {Shape{5, 3}, Shape{2, 3, 4}, Shape{3, 2, 4, 5}, Shape{16, 8, 32, 32}}) {
    const int64_t channels = sizes[1];
    const Tensor x = untracked::add(random_of(sizes), 3.0), g = random_of(sizes), ggx = random_of(sizes);
    const Tensor w = random_of({channels}), b = random_of({channels});
    const Tensor ggw = random_of({channels}), ggb = random_of({channels});
    const Reference r =
        reference(sizes, values(x), values(w), values(b), values(g), values(ggx), values(ggw), values(ggb), eps);
    const BatchNormOutputs out = untracked::batch_norm(x, w, b, eps);
    const std::string shape = shape_str(sizes);
    SCOPED_TRACE(shape);
    expect_near(values(out.output), r.output, 1e-12, "output");
    expect_near(values(out.mean), r.mean, 1e-12, "mean");
    expect_near(values(out.var), r.var, 1e-12, "var");
    expect_near(values(out.invstd), r.invstd, 1e-12, "invstd");
    const BatchNormGrads grads = untracked::batch_norm_backward(g, x, w, out.mean, out.invstd);
    expect_near(values(grads.input), r.grad_input, 1e-11, "grad_input");
    expect_near(values(grads.weight), r.grad_weight, 1e-11, "grad_weight");
    expect_near(values(grads.bias), r.grad_bias, 1e-11, "grad_bias");
    const BatchNormDoubleGrads second =
        untracked::batch_norm_double_backward(ggx, ggw, ggb, g, x, w, out.mean, out.invstd);
    expect_near(values(second.grad_output), r.d_grad_output, 1e-11, "d_grad_output");
    expect_near(values(second.input), r.d_input, 1e-10, "d_input");
    expect_near(values(second.weight), r.d_weight, 1e-10, "d_weight");
  }
}

TEST(BatchNorm, BackwardInPlaceWritesTheSameIntoTheOutputsGradient) {
  manual_seed(14);
  for (const Shape& sizes : {Shape{4, 3, 5}, Shape{16, 8, 32, 32}}) {
    const Tensor x = random_of(sizes), g = random_of(sizes), w = random_of({sizes[1]});
    const BatchNormOutputs out = untracked::batch_norm(x, w, {}, 1e-5);
    const BatchNormGrads expected = untracked::batch_norm_backward(g, x, w, out.mean, out.invstd);
    const BatchNormGrads in_place = untracked::batch_norm_backward_(g, x, w, out.mean, out.invstd);
    EXPECT_TRUE(in_place.input.is_same(g));
    EXPECT_EQ(values(g), values(expected.input));
    EXPECT_EQ(values(in_place.weight), values(expected.weight));
    EXPECT_EQ(values(in_place.bias), values(expected.bias));
  }
  const Tensor x = random_of({4, 3}), w = random_of({3});
  const BatchNormOutputs out = untracked::batch_norm(x, w, {}, 1e-5);
  EXPECT_ERROR_CONTAINS(untracked::batch_norm_backward_(untracked::t(random_of({3, 4})), x, w, out.mean, out.invstd),
                        "batch_norm_backward_: expected a contiguous grad_output");
}

TEST(BatchNorm, UndefinedWeightBiasAndGradientsReadAsOnesAndZeros) {
  manual_seed(12);
  const Shape sizes{4, 3, 5};
  const Tensor x = random_of(sizes), g = random_of(sizes), gg = random_of(sizes);
  const Tensor one = distgrad::ones({3}, {.dtype = kFloat64}), zero = distgrad::zeros({3}, {.dtype = kFloat64});
  const BatchNormOutputs bare = untracked::batch_norm(x, {}, {}, 1e-3),
                         affine = untracked::batch_norm(x, one, zero, 1e-3);
  EXPECT_EQ(values(bare.output), values(affine.output));
  const BatchNormGrads bare_grads = untracked::batch_norm_backward(g, x, {}, bare.mean, bare.invstd);
  EXPECT_EQ(values(bare_grads.input),
            values(untracked::batch_norm_backward(g, x, one, bare.mean, bare.invstd, {.weight = false}).input));
  EXPECT_FALSE(bare_grads.weight.defined());  // no weight, no gradient for it
  EXPECT_TRUE(bare_grads.bias.defined());
  const BatchNormDoubleGrads only_input =
      untracked::batch_norm_double_backward(gg, {}, {}, g, x, one, bare.mean, bare.invstd);
  const BatchNormDoubleGrads with_zeros =
      untracked::batch_norm_double_backward(gg, zero, zero, g, x, one, bare.mean, bare.invstd);
  EXPECT_EQ(values(only_input.grad_output), values(with_zeros.grad_output));
  EXPECT_EQ(values(only_input.input), values(with_zeros.input));
  const BatchNormDoubleGrads none =
      untracked::batch_norm_double_backward({}, {}, {}, g, x, one, bare.mean, bare.invstd);
  EXPECT_EQ(values(none.input), std::vector<double>(x.numel(), 0.0));
  EXPECT_EQ(values(none.weight), std::vector<double>(3, 0.0));
  const BatchNormDoubleGrads nothing_needed = untracked::batch_norm_double_backward(
      gg, {}, {}, g, x, one, bare.mean, bare.invstd, {.grad_output = false, .input = false, .weight = false});
  EXPECT_FALSE(nothing_needed.grad_output.defined() || nothing_needed.input.defined() ||
               nothing_needed.weight.defined());
}

TEST(BatchNorm, Float32AgreesWithFloat64AndNonContiguousInputWithContiguous) {
  manual_seed(13);
  const Tensor x = untracked::add(random_of({8, 4, 6, 6}), 10.0), w = random_of({4}), b = random_of({4});
  const BatchNormOutputs exact = untracked::batch_norm(x, w, b, 1e-5);
  const BatchNormOutputs single =
      untracked::batch_norm(untracked::to(x, kFloat32), untracked::to(w, kFloat32), untracked::to(b, kFloat32), 1e-5);
  EXPECT_EQ(single.output.dtype(), kFloat32);
  expect_near(values(single.output), values(exact.output), 1e-5, "float32 output");
  expect_near(values(single.invstd), values(exact.invstd), 1e-5, "float32 invstd");
  // The same values laid out channels-first, seen through a permuted view.
  const Tensor permuted = untracked::permute(untracked::contiguous(untracked::permute(x, {1, 0, 2, 3})), {1, 0, 2, 3});
  ASSERT_FALSE(permuted.is_contiguous());
  EXPECT_EQ(values(untracked::batch_norm(permuted, w, b, 1e-5).output), values(exact.output));
}

TEST(BatchNorm, RejectsWhatItCannotNormalise) {
  const Tensor x = random_of({4, 3}), w = random_of({3});
  EXPECT_ERROR_CONTAINS(untracked::batch_norm(random_of({3}), {}, {}, 1e-5),
                        "batch_norm: expected input of shape [N, C, ...], found [3]");
  EXPECT_ERROR_CONTAINS(untracked::batch_norm(distgrad::zeros({4, 3}, {.dtype = kInt64}), {}, {}, 1e-5), "batch_norm",
                        "int64");
  EXPECT_ERROR_CONTAINS(untracked::batch_norm(x, random_of({4}), {}, 1e-5),
                        "batch_norm: expected weight of shape [3] for input of shape [4, 3], found [4]");
  EXPECT_ERROR_CONTAINS(untracked::batch_norm(x, w, untracked::to(w, kFloat32), 1e-5), "batch_norm");
  EXPECT_ERROR_CONTAINS(untracked::batch_norm(x, w, {}, -1), "batch_norm: expected a non-negative eps, found -1");
  const BatchNormOutputs out = untracked::batch_norm(x, w, {}, 1e-5);
  EXPECT_ERROR_CONTAINS(untracked::batch_norm_backward(random_of({4, 2}), x, w, out.mean, out.invstd),
                        "batch_norm_backward: expected grad_output of the input's shape [4, 3], found [4, 2]");
  EXPECT_ERROR_CONTAINS(untracked::batch_norm_backward({}, x, w, out.mean, out.invstd),
                        "batch_norm_backward: expected a defined grad_output");
  EXPECT_ERROR_CONTAINS(
      untracked::batch_norm_backward(untracked::to(random_of({4, 3}), kFloat32), x, w, out.mean, out.invstd),
      "batch_norm_backward", "float32");
  EXPECT_ERROR_CONTAINS(untracked::batch_norm_backward(random_of({4, 3}), x, w, {}, out.invstd),
                        "batch_norm_backward: expected a defined mean");
  EXPECT_ERROR_CONTAINS(untracked::batch_norm_backward(random_of({4, 3}), x, w, out.mean, random_of({2})),
                        "batch_norm_backward: expected invstd of shape [3] for input of shape [4, 3], found [2]");
  EXPECT_ERROR_CONTAINS(
      untracked::batch_norm_double_backward(random_of({3, 4}), {}, {}, random_of({4, 3}), x, w, out.mean, out.invstd),
      "batch_norm_double_backward: expected gg_input of the input's shape [4, 3], found [3, 4]");
  EXPECT_ERROR_CONTAINS(
      untracked::batch_norm_double_backward({}, random_of({5}), {}, random_of({4, 3}), x, w, out.mean, out.invstd),
      "batch_norm_double_backward: expected gg_weight of shape [3] for input of shape [4, 3], found [5]");
}

}  // namespace
}  // namespace distgrad
