// Tests of conv2d and the 2-D pooling ops against direct loops written here, and of im2col
// and col2im against hand-computed values and each other (col2im is im2col's adjoint).
#include <array>
#include <cmath>
#include <limits>
#include <random>

#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using testing::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = uniform(engine);
  return v;
}

// The geometry of one 2-D sliding window over NCHW input, given like the ops' options.
struct Geometry {
  Geometry(const Shape& input, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {1, 1},
           std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1})
      : batch(input[0]),
        channels(input[1]),
        height(input[2]),
        width(input[3]),
        kernel_h(kernel[0]),
        kernel_w(kernel[1]),
        stride_h(stride[0]),
        stride_w(stride[1]),
        pad_h(padding[0]),
        pad_w(padding[1]),
        dilation_h(dilation[0]),
        dilation_w(dilation[1]) {}

  int64_t batch, channels, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;

  int64_t out_h() const { return (height + 2 * pad_h - dilation_h * (kernel_h - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (width + 2 * pad_w - dilation_w * (kernel_w - 1) - 1) / stride_w + 1; }
  Shape input_shape() const { return {batch, channels, height, width}; }
  int64_t input_numel() const { return batch * channels * height * width; }
};

// Calls visit(output, input, weight) with the flat positions of every product of a direct
// convolution, out[n][o][y][x] += in[n][c][y*s - p + i*d][x*s - p + j*d] * w[o][c][i][j], in
// output order.
template <typename Visit>
void for_each_conv_product(const Geometry& g, int64_t out_channels, Visit visit) {
  int64_t output = 0;
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t o = 0; o < out_channels; ++o) {
      for (int64_t y = 0; y < g.out_h(); ++y) {
        for (int64_t x = 0; x < g.out_w(); ++x, ++output) {
          for (int64_t c = 0; c < g.channels; ++c) {
            for (int64_t i = 0; i < g.kernel_h; ++i) {
              for (int64_t j = 0; j < g.kernel_w; ++j) {
                const int64_t h = y * g.stride_h - g.pad_h + i * g.dilation_h;
                const int64_t w = x * g.stride_w - g.pad_w + j * g.dilation_w;
                if (h < 0 || h >= g.height || w < 0 || w >= g.width) continue;
                visit(output, ((n * g.channels + c) * g.height + h) * g.width + w,
                      ((o * g.channels + c) * g.kernel_h + i) * g.kernel_w + j);
              }
            }
          }
        }
      }
    }
  }
}

// Direct convolution, with bias[o] added to every output of channel o.
std::vector<double> naive_conv2d(const std::vector<double>& input, const std::vector<double>& weight,
                                 const std::vector<double>& bias, const Geometry& g, int64_t out_channels) {
  const int64_t plane = g.out_h() * g.out_w();
  std::vector<double> out(g.batch * out_channels * plane);
  for (size_t k = 0; k < out.size(); ++k) out[k] = bias.empty() ? 0 : bias[k / plane % out_channels];
  for_each_conv_product(g, out_channels, [&](int64_t o, int64_t in, int64_t w) { out[o] += input[in] * weight[w]; });
  return out;
}

struct ConvGradients {
  std::vector<double> input, weight;
};

// conv2d's gradients by the same direct loop: every product input * weight adds grad * weight to
// the input's gradient and grad * input to the weight's.
ConvGradients naive_conv2d_backward(const std::vector<double>& grad, const std::vector<double>& input,
                                    const std::vector<double>& weight, const Geometry& g, int64_t out_channels) {
  ConvGradients out{std::vector<double>(input.size()), std::vector<double>(weight.size())};
  for_each_conv_product(g, out_channels, [&](int64_t o, int64_t in, int64_t w) {
    out.input[in] += grad[o] * weight[w];
    out.weight[w] += grad[o] * input[in];
  });
  return out;
}

struct Pooled {
  std::vector<double> values;
  std::vector<int64_t> indices;
};

// Max over each window's in-bounds positions, with the flat h * W + w index of the first maximum
// (the first NaN, when the window holds one).
Pooled naive_max_pool2d(const std::vector<double>& input, const Geometry& g) {
  Pooled out;
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane) {
    for (int64_t y = 0; y < g.out_h(); ++y) {
      for (int64_t x = 0; x < g.out_w(); ++x) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_index = -1;
        for (int64_t i = 0; i < g.kernel_h; ++i) {
          for (int64_t j = 0; j < g.kernel_w; ++j) {
            const int64_t h = y * g.stride_h - g.pad_h + i * g.dilation_h;
            const int64_t w = x * g.stride_w - g.pad_w + j * g.dilation_w;
            if (h < 0 || h >= g.height || w < 0 || w >= g.width) continue;
            const double v = input[(plane * g.height + h) * g.width + w];
            if (best_index < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
              best = v;
              best_index = h * g.width + w;
            }
          }
        }
        out.values.push_back(best);
        out.indices.push_back(best_index);
      }
    }
  }
  return out;
}

// Mean over each window; with count_include_pad the divisor counts the window's positions that
// lie in the padded input, else only those in the input itself.
std::vector<double> naive_avg_pool2d(const std::vector<double>& input, const Geometry& g, bool count_include_pad) {
  std::vector<double> out;
  for (int64_t plane = 0; plane < g.batch * g.channels; ++plane) {
    for (int64_t y = 0; y < g.out_h(); ++y) {
      for (int64_t x = 0; x < g.out_w(); ++x) {
        double total = 0;
        int64_t inside = 0, inside_padded = 0;
        for (int64_t i = 0; i < g.kernel_h; ++i) {
          for (int64_t j = 0; j < g.kernel_w; ++j) {
            const int64_t h = y * g.stride_h - g.pad_h + i;
            const int64_t w = x * g.stride_w - g.pad_w + j;
            if (h < g.height + g.pad_h && w < g.width + g.pad_w) ++inside_padded;
            if (h < 0 || h >= g.height || w < 0 || w >= g.width) continue;
            total += input[(plane * g.height + h) * g.width + w];
            ++inside;
          }
        }
        out.push_back(total / static_cast<double>(count_include_pad ? inside_padded : inside));
      }
    }
  }
  return out;
}

void expect_close(const Tensor& actual, const std::vector<double>& expected, double tolerance = 1e-13) {
  const std::vector<double> got = values(actual);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tolerance) << "element " << i;
}

TEST(Conv2d, SumsEachWindow) {
  // An all-ones 3 x 3 filter over 0..15 in a 4 x 4 image: each output is its window's sum.
  Tensor image = untracked::view(arange(16, {.dtype = kFloat64}), {1, 1, 4, 4});
  Tensor out = untracked::conv2d(image, ones({1, 1, 3, 3}, {.dtype = kFloat64}));
  EXPECT_EQ(out.sizes(), (Shape{1, 1, 2, 2}));
  EXPECT_THAT(values(out), ElementsAre(45, 54, 81, 90));
}

TEST(Conv2d, MatchesADirectLoop) {
  const Geometry g({2, 3, 7, 6}, {3, 2}, {2, 1}, {1, 2}, {2, 1});
  const int64_t out_channels = 4;
  const std::vector<double> input = random_values(g.input_numel(), 1);
  const std::vector<double> weight = random_values(out_channels * 3 * 3 * 2, 2);
  const std::vector<double> bias = random_values(out_channels, 3);
  Tensor out = untracked::conv2d(from_vector(input, g.input_shape()), from_vector(weight, {out_channels, 3, 3, 2}),
                                 from_vector(bias), {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}});
  EXPECT_EQ(out.sizes(), (Shape{2, out_channels, g.out_h(), g.out_w()}));
  expect_close(out, naive_conv2d(input, weight, bias, g, out_channels));
}

// Stride 1 along the width takes im2col's row-copy path: dilation and wide padding there.
TEST(Conv2d, MatchesADirectLoopWithUnitWidthStrideDilationAndWidePadding) {
  const Geometry g({2, 2, 6, 7}, {2, 3}, {1, 1}, {1, 3}, {1, 2});
  const int64_t out_channels = 3;
  const std::vector<double> input = random_values(g.input_numel(), 4);
  const std::vector<double> weight = random_values(out_channels * 2 * 2 * 3, 5);
  const std::vector<double> bias = random_values(out_channels, 6);
  Tensor out = untracked::conv2d(from_vector(input, g.input_shape()), from_vector(weight, {out_channels, 2, 2, 3}),
                                 from_vector(bias), {.stride = {1, 1}, .padding = {1, 3}, .dilation = {1, 2}});
  EXPECT_EQ(out.sizes(), (Shape{2, out_channels, g.out_h(), g.out_w()}));
  expect_close(out, naive_conv2d(input, weight, bias, g, out_channels));
}

// Batches whose columns (72 rows of 676 windows in float64, 389 KB an image) the CPU makes two
// images at a time (Note [Convolution in chunks of images]): chunks of 2, 2 and 1.
TEST(Conv2d, ABatchInChunksMatchesADirectLoop) {
  const Geometry g({5, 8, 26, 26}, {3, 3}, {1, 1}, {1, 1});
  const int64_t out_channels = 4;
  const std::vector<double> input = random_values(g.input_numel(), 41);
  const std::vector<double> weight = random_values(out_channels * 8 * 9, 42);
  const std::vector<double> bias = random_values(out_channels, 43);
  const Tensor out =
      untracked::conv2d(from_vector(input, g.input_shape()), from_vector(weight, {out_channels, 8, 3, 3}),
                        from_vector(bias), {.padding = {1, 1}});
  expect_close(out, naive_conv2d(input, weight, bias, g, out_channels));
}

// conv2d's input and weight gradients against the direct loop: strides, padding and dilation;
// a batch in chunks of images; unbatched input.
TEST(Conv2dGradients, MatchTheDirectLoop) {
  struct Case {
    Shape input;
    std::array<int64_t, 2> kernel, stride, padding, dilation;
  };
  const Case cases[] = {{{2, 2, 6, 7}, {2, 3}, {2, 1}, {1, 3}, {1, 2}},
                        {{5, 8, 26, 26}, {3, 3}, {1, 1}, {1, 1}, {1, 1}}};
  const int64_t out_channels = 3;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.input));
    const Geometry g(c.input, c.kernel, c.stride, c.padding, c.dilation);
    const Shape weight_shape{out_channels, g.channels, c.kernel[0], c.kernel[1]};
    const std::vector<double> input = random_values(g.input_numel(), 44);
    const std::vector<double> weight = random_values(shape_numel(weight_shape), 45);
    const std::vector<double> grad = random_values(g.batch * out_channels * g.out_h() * g.out_w(), 46);
    const Conv2dOptions options{.stride = c.stride, .padding = c.padding, .dilation = c.dilation};
    const Tensor grad_output = from_vector(grad, {g.batch, out_channels, g.out_h(), g.out_w()});
    const Tensor input_grad =
        untracked::conv2d_input_grad(grad_output, from_vector(weight, weight_shape), c.input, options);
    const Tensor weight_grad =
        untracked::conv2d_weight_grad(grad_output, from_vector(input, g.input_shape()), weight_shape, options);
    const ConvGradients expected = naive_conv2d_backward(grad, input, weight, g, out_channels);
    EXPECT_EQ(input_grad.sizes(), g.input_shape());
    EXPECT_EQ(weight_grad.sizes(), weight_shape);
    // Sums of up to 3380 products: the order differs from the loop's.
    expect_close(input_grad, expected.input, 1e-12);
    expect_close(weight_grad, expected.weight, 1e-12);
  }
  // Unbatched.
  const Geometry g({1, 2, 5, 4}, {3, 3}, {1, 1}, {1, 1});
  const std::vector<double> input = random_values(g.input_numel(), 47), weight = random_values(2 * 2 * 9, 48);
  const std::vector<double> grad = random_values(2 * g.out_h() * g.out_w(), 49);
  const Tensor grad_output = from_vector(grad, {2, g.out_h(), g.out_w()});
  const ConvGradients expected = naive_conv2d_backward(grad, input, weight, g, 2);
  const Tensor input_grad =
      untracked::conv2d_input_grad(grad_output, from_vector(weight, {2, 2, 3, 3}), {2, 5, 4}, {.padding = {1, 1}});
  EXPECT_EQ(input_grad.sizes(), (Shape{2, 5, 4}));
  expect_close(input_grad, expected.input, 1e-12);
  expect_close(
      untracked::conv2d_weight_grad(grad_output, from_vector(input, {2, 5, 4}), {2, 2, 3, 3}, {.padding = {1, 1}}),
      expected.weight, 1e-12);
}

// 3 x 3 convolutions with stride 1, at least 8 channels in and out and outputs at least 7 wide
// take the CPU's Winograd path (Note [Winograd convolution]), forward and both gradients: rows
// of tiles that fill whole groups of four or end with an overlapping group, odd output widths
// and heights (the last group and row cut to the plane), a single row of tiles, padding 0 to 3,
// input rows narrower than 8, a batch in chunks; and a 3 x 3 output, which goes through im2col.
TEST(Conv2dWinograd, MatchesTheDirectLoop) {
  struct Case {
    Shape input;
    int64_t out_channels;
    std::array<int64_t, 2> padding;
  };
  const Case cases[] = {{{2, 8, 14, 14}, 8, {1, 1}}, {{2, 9, 5, 9}, 10, {0, 2}}, {{1, 8, 9, 30}, 8, {3, 1}},
                        {{2, 8, 16, 9}, 9, {2, 0}},  {{1, 12, 3, 9}, 8, {0, 0}}, {{2, 8, 5, 5}, 8, {0, 0}},
                        {{1, 8, 6, 5}, 8, {1, 2}},     // rows of 5: fewer than four pairs of columns
                        {{5, 8, 30, 30}, 8, {1, 1}}};  // 460 KB of tiles and products an image: chunks of 2, 2, 1
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.input) + " padding " + std::to_string(c.padding[0]) + ", " + std::to_string(c.padding[1]));
    const Geometry g(c.input, {3, 3}, {1, 1}, c.padding);
    const Shape weight_shape{c.out_channels, g.channels, 3, 3};
    const std::vector<double> input = random_values(g.input_numel(), 50);
    const std::vector<double> weight = random_values(shape_numel(weight_shape), 51);
    const std::vector<double> bias = random_values(c.out_channels, 52);
    const std::vector<double> grad = random_values(g.batch * c.out_channels * g.out_h() * g.out_w(), 53);
    const Tensor out = untracked::conv2d(from_vector(input, g.input_shape()), from_vector(weight, weight_shape),
                                         from_vector(bias), {.padding = c.padding});
    EXPECT_EQ(out.sizes(), (Shape{g.batch, c.out_channels, g.out_h(), g.out_w()}));
    expect_close(out, naive_conv2d(input, weight, bias, g, c.out_channels), 1e-12);
    const Tensor input_grad =
        untracked::conv2d_input_grad(from_vector(grad, {g.batch, c.out_channels, g.out_h(), g.out_w()}),
                                     from_vector(weight, weight_shape), g.input_shape(), {.padding = c.padding});
    const ConvGradients expected = naive_conv2d_backward(grad, input, weight, g, c.out_channels);
    expect_close(input_grad, expected.input, 1e-12);
    const Tensor weight_grad =
        untracked::conv2d_weight_grad(from_vector(grad, {g.batch, c.out_channels, g.out_h(), g.out_w()}),
                                      from_vector(input, g.input_shape()), weight_shape, {.padding = c.padding});
    expect_close(weight_grad, expected.weight, 1e-11);  // sums of up to 4500 products
  }
}

// The CNN's second conv in float32: Winograd's transforms add a few roundings to im2col's.
TEST(Conv2dWinograd, Float32StaysCloseToFloat64) {
  const Shape input_shape{2, 32, 14, 14}, weight_shape{64, 32, 3, 3}, out_shape{2, 64, 14, 14};
  const Tensor x = from_vector(random_values(shape_numel(input_shape), 54), input_shape);
  const Tensor w = from_vector(random_values(shape_numel(weight_shape), 55), weight_shape);
  const Tensor b = from_vector(random_values(64, 56));
  const Tensor g = from_vector(random_values(shape_numel(out_shape), 57), out_shape);
  const auto single = [](const Tensor& t) { return untracked::to(t, kFloat32); };
  const Tensor out = untracked::conv2d(x, w, b, {.padding = {1, 1}});
  expect_close(untracked::conv2d(single(x), single(w), single(b), {.padding = {1, 1}}), values(out), 2e-5);
  const Tensor input_grad = untracked::conv2d_input_grad(g, w, input_shape, {.padding = {1, 1}});
  expect_close(untracked::conv2d_input_grad(single(g), single(w), input_shape, {.padding = {1, 1}}), values(input_grad),
               2e-5);
  const Tensor weight_grad = untracked::conv2d_weight_grad(g, x, weight_shape, {.padding = {1, 1}});
  expect_close(untracked::conv2d_weight_grad(single(g), single(x), weight_shape, {.padding = {1, 1}}),
               values(weight_grad),
               1e-4);  // sums of 392 products of magnitude up to 1
  const Conv2dGrads grads = untracked::conv2d_backward(single(g), single(x), single(w), {}, {.padding = {1, 1}});
  expect_close(grads.input, values(input_grad), 2e-5);
  expect_close(grads.weight, values(weight_grad), 1e-4);
  expect_close(grads.bias, values(untracked::sum(g, {0, 2, 3})), 1e-4);
}

// conv2d_backward gives each gradient alone or with any of the others, as the direct loop does:
// on the Winograd path (one set of output gradient tiles for the three, a batch in chunks), on
// im2col's (the bias summed by the weight gradient's product; a chunked batch, a 2 x 3 kernel
// with stride 2), and for unbatched input. Those not needed stay undefined.
TEST(Conv2dBackward, MatchesTheDirectLoop) {
  struct Case {
    Shape input;
    int64_t out_channels;
    std::array<int64_t, 2> kernel, stride, padding;
  };
  const Case cases[] = {{{3, 8, 9, 14}, 9, {3, 3}, {1, 1}, {1, 1}},
                        {{5, 8, 30, 30}, 8, {3, 3}, {1, 1}, {2, 0}},
                        {{5, 8, 26, 26}, 3, {3, 3}, {1, 1}, {1, 1}},
                        {{2, 1, 6, 7}, 4, {2, 3}, {2, 1}, {0, 1}},
                        {{1, 2, 5, 4}, 2, {3, 3}, {1, 1}, {1, 1}}};
  for (const Case& c : cases) {
    const bool unbatched = c.input[0] == 1;
    const Geometry g(c.input, c.kernel, c.stride, c.padding);
    const Shape weight_shape{c.out_channels, g.channels, c.kernel[0], c.kernel[1]};
    const Shape input_shape = unbatched ? Shape{g.channels, g.height, g.width} : g.input_shape();
    const Shape output_shape =
        unbatched ? Shape{c.out_channels, g.out_h(), g.out_w()} : Shape{g.batch, c.out_channels, g.out_h(), g.out_w()};
    const std::vector<double> input = random_values(g.input_numel(), 60);
    const std::vector<double> weight = random_values(shape_numel(weight_shape), 61);
    const std::vector<double> grad = random_values(shape_numel(output_shape), 62);
    const ConvGradients expected = naive_conv2d_backward(grad, input, weight, g, c.out_channels);
    std::vector<double> expected_bias(c.out_channels, 0.0);
    for (size_t k = 0; k < grad.size(); ++k) expected_bias[k / (g.out_h() * g.out_w()) % c.out_channels] += grad[k];
    for (int mask = 1; mask < 8; ++mask) {
      const Conv2dGradsNeeded needed{.input = (mask & 1) != 0, .weight = (mask & 2) != 0, .bias = (mask & 4) != 0};
      SCOPED_TRACE(shape_str(c.input) + " needing input " + std::to_string(needed.input) + ", weight " +
                   std::to_string(needed.weight) + ", bias " + std::to_string(needed.bias));
      const Conv2dGrads grads = untracked::conv2d_backward(
          from_vector(grad, output_shape), from_vector(input, input_shape), from_vector(weight, weight_shape), needed,
          {.stride = c.stride, .padding = c.padding});
      ASSERT_EQ(grads.input.defined(), needed.input);
      ASSERT_EQ(grads.weight.defined(), needed.weight);
      ASSERT_EQ(grads.bias.defined(), needed.bias);
      if (needed.input) {
        EXPECT_EQ(grads.input.sizes(), input_shape);
        expect_close(grads.input, expected.input, 1e-12);
      }
      if (needed.weight) {
        EXPECT_EQ(grads.weight.sizes(), weight_shape);
        expect_close(grads.weight, expected.weight, 1e-11);  // sums of up to 4500 products
      }
      if (needed.bias) {
        EXPECT_EQ(grads.bias.sizes(), (Shape{c.out_channels}));
        expect_close(grads.bias, expected_bias, 1e-11);
      }
    }
  }
}

TEST(Conv2dGradients, CheckTheirArguments) {
  const Tensor x = zeros({2, 3, 6, 6}), w = zeros({4, 3, 3, 3});
  EXPECT_ERROR_CONTAINS(untracked::conv2d_weight_grad(zeros({2, 4, 6, 6}), x, w.sizes()),
                        "conv2d_weight_grad: expected grad_output of shape [2, 4, 4, 4] (conv2d's output for input "
                        "[2, 3, 6, 6] and weight [4, 3, 3, 3]), found [2, 4, 6, 6]");
  EXPECT_ERROR_CONTAINS(untracked::conv2d_input_grad(zeros({2, 4, 4, 4}), zeros({4, 2, 3, 3}), x.sizes()),
                        "conv2d_input_grad: expected weight of shape [O, 3, kh, kw] for input of shape [2, 3, 6, 6], "
                        "found [4, 2, 3, 3]");
  EXPECT_ERROR_CONTAINS(untracked::conv2d_input_grad(zeros({2, 4, 4, 4}, {.dtype = kFloat64}), w, x.sizes()),
                        "conv2d_input_grad: expected tensors of one dtype");
  EXPECT_ERROR_CONTAINS(untracked::conv2d_input_grad(zeros({2, 4, 4, 4}), w, {3, 6, 6, 1, 1}),
                        "conv2d_input_grad: expected an input shape [N, C, H, W] or [C, H, W], found [3, 6, 6, 1, 1]");
  EXPECT_ERROR_CONTAINS(untracked::conv2d_weight_grad(zeros({2, 4, 4, 4}), x, {4, 3, 3}),
                        "conv2d_weight_grad: expected weight of shape [O, 3, kh, kw]");
  EXPECT_ERROR_CONTAINS(untracked::conv2d_backward(zeros({2, 4, 6, 6}), x, w, {}),
                        "conv2d_backward: expected grad_output of shape [2, 4, 4, 4] (conv2d's output for input "
                        "[2, 3, 6, 6] and weight [4, 3, 3, 3]), found [2, 4, 6, 6]");
  EXPECT_ERROR_CONTAINS(
      untracked::conv2d_backward(zeros({2, 4, 4, 4}), x, zeros({4, 3, 3, 3}, {.dtype = kFloat64}), {}),
      "conv2d_backward: expected tensors of one dtype");
}

TEST(Conv2d, WithoutBias) {
  const Geometry g({3, 2, 5, 5}, {2, 3});
  const std::vector<double> input = random_values(g.input_numel(), 4);
  const std::vector<double> weight = random_values(5 * 2 * 2 * 3, 5);
  Tensor out = untracked::conv2d(from_vector(input, g.input_shape()), from_vector(weight, {5, 2, 2, 3}));
  EXPECT_EQ(out.sizes(), (Shape{3, 5, 4, 3}));
  expect_close(out, naive_conv2d(input, weight, {}, g, 5));
}

// The bias rides in the product (a row of ones in the columns): with no input channels the
// output is the bias alone.
TEST(Conv2d, NoInputChannelsGiveTheBias) {
  const Tensor out =
      untracked::conv2d(zeros({2, 0, 4, 4}, {.dtype = kFloat64}), zeros({3, 0, 3, 3}, {.dtype = kFloat64}),
                        from_vector(std::vector<double>{0.5, -1, 2}), {.padding = {1, 1}});
  EXPECT_EQ(out.sizes(), (Shape{2, 3, 4, 4}));
  std::vector<double> expected;
  for (int64_t k = 0; k < out.numel(); ++k) expected.push_back(std::vector<double>{0.5, -1, 2}[k / 16 % 3]);
  expect_close(out, expected);
}

TEST(Conv2d, UnbatchedInputGivesUnbatchedOutput) {
  const Geometry g({1, 2, 6, 5}, {3, 3}, {2, 2}, {1, 1});
  const std::vector<double> input = random_values(g.input_numel(), 6);
  const std::vector<double> weight = random_values(3 * 2 * 3 * 3, 7);
  const std::vector<double> bias = {0.5, -1, 2};
  Tensor out = untracked::conv2d(from_vector(input, {2, 6, 5}), from_vector(weight, {3, 2, 3, 3}), from_vector(bias),
                                 {.stride = {2, 2}, .padding = {1, 1}});
  EXPECT_EQ(out.sizes(), (Shape{3, 3, 3}));
  expect_close(out, naive_conv2d(input, weight, bias, g, 3));
}

TEST(Conv2d, NonContiguousInputAndWeight) {
  // The input stored as [N, C, W, H] and transposed; the weight stored as [C, O, kh, kw] and permuted.
  const Geometry g({2, 2, 4, 5}, {2, 2}, {1, 1}, {1, 0});
  const std::vector<double> input = random_values(g.input_numel(), 8);
  const std::vector<double> weight = random_values(3 * 2 * 2 * 2, 9);
  std::vector<double> input_stored(input.size()), weight_stored(weight.size());
  for (int64_t p = 0; p < 4; ++p) {
    for (int64_t h = 0; h < 4; ++h) {
      for (int64_t w = 0; w < 5; ++w) input_stored[(p * 5 + w) * 4 + h] = input[(p * 4 + h) * 5 + w];
    }
  }
  for (int64_t o = 0; o < 3; ++o) {
    for (int64_t c = 0; c < 2; ++c) {
      for (int64_t k = 0; k < 4; ++k) weight_stored[(c * 3 + o) * 4 + k] = weight[(o * 2 + c) * 4 + k];
    }
  }
  Tensor x = untracked::transpose(from_vector(input_stored, {2, 2, 5, 4}), 2, 3);
  Tensor w = untracked::permute(from_vector(weight_stored, {2, 3, 2, 2}), {1, 0, 2, 3});
  ASSERT_FALSE(x.is_contiguous());
  ASSERT_FALSE(w.is_contiguous());
  expect_close(untracked::conv2d(x, w, {}, {.padding = {1, 0}}), naive_conv2d(input, weight, {}, g, 3));
}

TEST(Conv2d, Float32AgreesWithTheFloat64Reference) {
  const Geometry g({2, 3, 6, 6}, {3, 3}, {1, 1}, {1, 1});
  const std::vector<double> input = random_values(g.input_numel(), 10);
  const std::vector<double> weight = random_values(4 * 3 * 3 * 3, 11);
  std::vector<float> input_f(input.begin(), input.end()), weight_f(weight.begin(), weight.end());
  Tensor out = untracked::conv2d(from_vector(input_f, g.input_shape()), from_vector(weight_f, {4, 3, 3, 3}), {},
                                 {.padding = {1, 1}});
  EXPECT_EQ(out.dtype(), kFloat32);
  expect_close(out,
               naive_conv2d(std::vector<double>(input_f.begin(), input_f.end()),
                            std::vector<double>(weight_f.begin(), weight_f.end()), {}, g, 4),
               1e-5);
}

TEST(Conv2d, ChecksChannelsAndShapes) {
  Tensor input = zeros({1, 3, 5, 5});
  EXPECT_ERROR_CONTAINS(
      untracked::conv2d(input, zeros({2, 2, 3, 3})),
      "conv2d: expected weight of shape [O, 3, kh, kw] for input of shape [1, 3, 5, 5], found [2, 2, 3, 3]");
  EXPECT_ERROR_CONTAINS(untracked::conv2d(input, zeros({2, 3, 3})), "conv2d: expected weight of shape [O, 3, kh, kw]");
  EXPECT_ERROR_CONTAINS(untracked::conv2d(input, zeros({2, 3, 3, 3}), zeros({3})),
                        "conv2d: expected bias of shape [2], found [3]");
  EXPECT_ERROR_CONTAINS(untracked::conv2d(zeros({5, 5}), zeros({1, 1, 3, 3})),
                        "conv2d: expected input of shape [N, C, H, W] or [C, H, W], found [5, 5]");
  EXPECT_ERROR_CONTAINS(
      untracked::conv2d(zeros({1, 1, 3, 3}, {.dtype = kInt64}), zeros({1, 1, 1, 1}, {.dtype = kInt64})),
      "conv2d: expected a floating tensor, found a int64 tensor");
  EXPECT_ERROR_CONTAINS(untracked::conv2d(input, zeros({2, 3, 3, 3}, {.dtype = kFloat64})),
                        "conv2d: expected tensors of one dtype");
}

TEST(Conv2d, ChecksTheWindow) {
  EXPECT_ERROR_CONTAINS(untracked::conv2d(zeros({1, 1, 3, 3}), zeros({1, 1, 5, 5})),
                        "conv2d: the window (kernel [5, 5], dilation [1, 1]) does not fit the padded input of shape "
                        "[1, 1, 3, 3]");
  EXPECT_ERROR_CONTAINS(untracked::conv2d(zeros({1, 1, 5, 5}), zeros({1, 1, 3, 3}), {}, {.dilation = {3, 1}}),
                        "the window (kernel [3, 3], dilation [3, 1]) does not fit");
  EXPECT_EQ(untracked::conv2d(zeros({1, 1, 3, 3}), zeros({1, 1, 5, 5}), {}, {.padding = {1, 1}}).sizes(),
            (Shape{1, 1, 1, 1}));
  EXPECT_ERROR_CONTAINS(untracked::conv2d(zeros({1, 1, 5, 5}), zeros({1, 1, 3, 3}), {}, {.stride = {0, 1}}),
                        "conv2d: expected positive kernel size, stride and dilation and non-negative padding",
                        "stride [0, 1]");
}

// Channel c of a [1, 2, 3, 4] image holds 12c + 4h + w at (h, w). Kernel [2, 2], stride [1, 2],
// padding [1, 0] and dilation [2, 1] give 3 x 2 windows: window (y, x) reads rows y - 1 + 2i and
// columns 2x + j, and row -1 and row 3 are padding.
const Im2colOptions kHandOptions{.kernel_size = {2, 2}, .stride = {1, 2}, .padding = {1, 0}, .dilation = {2, 1}};
const std::vector<double> kHandColumns = {
    0,  0,  0,  2,  4,  6,   // c 0, (i, j) = (0, 0)
    0,  0,  1,  3,  5,  7,   // c 0, (0, 1)
    4,  6,  8,  10, 0,  0,   // c 0, (1, 0)
    5,  7,  9,  11, 0,  0,   // c 0, (1, 1)
    0,  0,  12, 14, 16, 18,  // c 1, (0, 0)
    0,  0,  13, 15, 17, 19,  // c 1, (0, 1)
    16, 18, 20, 22, 0,  0,   // c 1, (1, 0)
    17, 19, 21, 23, 0,  0,   // c 1, (1, 1)
};

TEST(Im2col, MatchesHandComputedColumns) {
  Tensor columns = untracked::im2col(untracked::view(arange(24, {.dtype = kFloat64}), {1, 2, 3, 4}), kHandOptions);
  EXPECT_EQ(columns.sizes(), (Shape{1, 8, 6}));
  EXPECT_EQ(values(columns), kHandColumns);
}

TEST(Im2col, UnbatchedInputGivesUnbatchedColumns) {
  Tensor columns = untracked::im2col(untracked::view(arange(24, {.dtype = kFloat64}), {2, 3, 4}), kHandOptions);
  EXPECT_EQ(columns.sizes(), (Shape{8, 6}));
  EXPECT_EQ(values(columns), kHandColumns);
}

TEST(Im2col, NonContiguousInput) {
  // The image stored as [C, W, H] and transposed back.
  Tensor image = untracked::transpose(
      untracked::contiguous(untracked::transpose(untracked::view(arange(24, {.dtype = kFloat64}), {2, 3, 4}), 1, 2)), 1,
      2);
  ASSERT_FALSE(image.is_contiguous());
  EXPECT_EQ(values(untracked::im2col(image, kHandOptions)), kHandColumns);
}

TEST(Im2col, DefaultOptionsGiveOneColumnPerPixel) {
  Tensor image = from_vector(random_values(2 * 3 * 4 * 5, 20), {2, 3, 4, 5});
  Tensor columns = untracked::im2col(image, {});
  EXPECT_EQ(columns.sizes(), (Shape{2, 3, 20}));
  EXPECT_EQ(values(columns), values(image));
  EXPECT_EQ(values(untracked::col2im(columns, {4, 5}, {})), values(image));
}

TEST(Im2col, ConvolutionIsAMatmulOfTheColumns) {
  const Geometry g({2, 3, 7, 6}, {3, 2}, {2, 1}, {1, 2}, {2, 1});
  const std::vector<double> input = random_values(g.input_numel(), 21);
  const std::vector<double> weight = random_values(4 * 3 * 3 * 2, 22);
  Tensor columns = untracked::im2col(from_vector(input, g.input_shape()),
                                     {.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}});
  expect_close(untracked::matmul(from_vector(weight, {4, 18}), columns), naive_conv2d(input, weight, {}, g, 4));
}

// Windows whose rows are as wide as the image (stride 1, "same" padding) are copied a block per
// kernel position on the CPU: padding on every side, dilation, a kernel wider than the image.
TEST(Im2col, SameWidthWindowsMatchADirectLoop) {
  const Geometry cases[] = {
      Geometry({2, 3, 7, 6}, {3, 3}, {1, 1}, {1, 1}),         Geometry({1, 2, 5, 4}, {5, 3}, {1, 1}, {2, 1}),
      Geometry({1, 2, 6, 5}, {3, 3}, {1, 1}, {2, 2}, {2, 2}), Geometry({1, 1, 3, 3}, {5, 5}, {1, 1}, {2, 2}),
      Geometry({2, 2, 4, 5}, {3, 1}, {1, 1}, {1, 0}),
  };
  for (const Geometry& g : cases) {
    SCOPED_TRACE(shape_str(g.input_shape()) + " kernel " + std::to_string(g.kernel_h) + "x" +
                 std::to_string(g.kernel_w));
    ASSERT_EQ(g.out_w(), g.width);
    const int64_t patch = g.channels * g.kernel_h * g.kernel_w;
    const std::vector<double> input = random_values(g.input_numel(), 23);
    const std::vector<double> weight = random_values(2 * patch, 24);
    const Tensor columns =
        untracked::im2col(from_vector(input, g.input_shape()), {.kernel_size = {g.kernel_h, g.kernel_w},
                                                                .padding = {g.pad_h, g.pad_w},
                                                                .dilation = {g.dilation_h, g.dilation_w}});
    expect_close(untracked::matmul(from_vector(weight, {2, patch}), columns), naive_conv2d(input, weight, {}, g, 2));
  }
}

// <im2col(x), y> == <x, col2im(y)> for random x and y: col2im is im2col's adjoint, which is
// what lets each serve as the other's gradient.
TEST(Col2im, IsTheAdjointOfIm2col) {
  const std::vector<Im2colOptions> cases = {
      {.kernel_size = {3, 3}},
      {.kernel_size = {3, 3}, .stride = {2, 2}},
      {.kernel_size = {3, 3}, .padding = {1, 1}},
      {.kernel_size = {2, 2}, .dilation = {2, 2}},
      {.kernel_size = {2, 3}, .stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}},
      {.kernel_size = {1, 4}, .stride = {3, 2}, .padding = {0, 2}},
      {.kernel_size = {3, 2}, .stride = {2, 3}, .padding = {1, 1}, .dilation = {2, 2}},
      {.kernel_size = {3, 2}, .padding = {2, 1}, .dilation = {2, 3}},  // stride 1: col2im's run-wise path
  };
  uint64_t seed = 30;
  for (const Im2colOptions& options : cases) {
    SCOPED_TRACE(::testing::Message() << "kernel [" << options.kernel_size[0] << ", " << options.kernel_size[1]
                                      << "], stride [" << options.stride[0] << ", " << options.stride[1]
                                      << "], padding [" << options.padding[0] << ", " << options.padding[1]
                                      << "], dilation [" << options.dilation[0] << ", " << options.dilation[1] << "]");
    const Shape shape{2, 3, 7, 8};
    Tensor x = from_vector(random_values(2 * 3 * 7 * 8, seed++), shape);
    Tensor columns = untracked::im2col(x, options);
    Tensor y = from_vector(random_values(columns.numel(), seed++), columns.sizes());
    Tensor image = untracked::col2im(y, {7, 8}, options);
    EXPECT_EQ(image.sizes(), shape);
    const double lhs = untracked::sum(untracked::mul(columns, y)).item<double>();
    const double rhs = untracked::sum(untracked::mul(x, image)).item<double>();
    EXPECT_NEAR(lhs, rhs, 1e-12 * (1 + std::abs(lhs)));
  }
}

TEST(Col2im, CountsTheWindowsCoveringEachPixel) {
  // Rows: kernel 3, stride 2, padding 1 over 5 rows -> windows read rows {-1, 0, 1}, {1, 2, 3}, {3, 4, 5},
  // so rows are covered [1, 2, 1, 2, 1] times. Columns: kernel 2, stride 3, dilation 2 over 7 columns
  // -> windows read columns {0, 2} and {3, 5}, so columns are covered [1, 0, 1, 1, 0, 1, 0] times.
  const Im2colOptions options{.kernel_size = {3, 2}, .stride = {2, 3}, .padding = {1, 0}, .dilation = {1, 2}};
  const std::vector<double> counts = {
      1, 0, 1, 1, 0, 1, 0,  //
      2, 0, 2, 2, 0, 2, 0,  //
      1, 0, 1, 1, 0, 1, 0,  //
      2, 0, 2, 2, 0, 2, 0,  //
      1, 0, 1, 1, 0, 1, 0,  //
  };
  Tensor covered =
      untracked::col2im(untracked::im2col(ones({2, 3, 5, 7}, {.dtype = kFloat64}), options), {5, 7}, options);
  EXPECT_EQ(covered.sizes(), (Shape{2, 3, 5, 7}));
  const std::vector<double> got = values(covered);
  for (int64_t plane = 0; plane < 6; ++plane) {
    EXPECT_EQ(std::vector<double>(got.begin() + plane * 35, got.begin() + (plane + 1) * 35), counts)
        << "plane " << plane;
  }
  // Unbatched and float32 columns give the same counts.
  Tensor unbatched = untracked::col2im(untracked::im2col(ones({1, 5, 7}), options), {5, 7}, options);
  EXPECT_EQ(unbatched.sizes(), (Shape{1, 5, 7}));
  EXPECT_EQ(unbatched.dtype(), kFloat32);
  EXPECT_EQ(values(unbatched), counts);
}

TEST(Col2im, SumsOverlappingWindows) {
  // A 3 x 3 image and 2 x 2 windows at stride 1: the centre is read by all four windows.
  Tensor columns = from_vector<double>({1, 2, 3, 4,      // (i, j) = (0, 0) in windows (0, 0), (0, 1), (1, 0), (1, 1)
                                        10, 20, 30, 40,  // (0, 1)
                                        100, 200, 300, 400,       // (1, 0)
                                        1000, 2000, 3000, 4000},  // (1, 1)
                                       {4, 4});
  Tensor image = untracked::col2im(columns, {3, 3}, {.kernel_size = {2, 2}});
  EXPECT_EQ(image.sizes(), (Shape{1, 3, 3}));
  EXPECT_THAT(values(image), ElementsAre(1, 2 + 10, 20,                            //
                                         3 + 100, 4 + 30 + 200 + 1000, 40 + 2000,  //
                                         300, 400 + 3000, 4000));
}

TEST(Col2im, NonContiguousColumns) {
  const Im2colOptions options{.kernel_size = {2, 2}, .stride = {2, 1}, .padding = {1, 1}};
  const std::vector<double> data = random_values(8 * 12, 40);  // [C * 4 = 8, L = 3 * 4 = 12]
  Tensor contiguous_columns = from_vector(data, {8, 12});
  Tensor strided = testing::transposed_copy_of(data, 8, 12);
  ASSERT_FALSE(strided.is_contiguous());
  EXPECT_EQ(values(untracked::col2im(strided, {4, 3}, options)),
            values(untracked::col2im(contiguous_columns, {4, 3}, options)));
}

TEST(Im2col, ChecksItsArguments) {
  EXPECT_ERROR_CONTAINS(untracked::im2col(zeros({4, 4}), {.kernel_size = {2, 2}}),
                        "im2col: expected input of shape [N, C, H, W] or [C, H, W], found [4, 4]");
  EXPECT_ERROR_CONTAINS(untracked::im2col(zeros({1, 4, 4}, {.dtype = kInt64}), {.kernel_size = {2, 2}}),
                        "im2col: expected a floating tensor, found a int64 tensor");
  EXPECT_ERROR_CONTAINS(untracked::im2col(zeros({1, 4, 4}), {.kernel_size = {0, 2}}),
                        "im2col: expected positive kernel size, stride and dilation and non-negative padding, found "
                        "kernel [0, 2], stride [1, 1], padding [0, 0], dilation [1, 1]");
  EXPECT_ERROR_CONTAINS(untracked::im2col(zeros({1, 4, 4}), {.kernel_size = {2, 2}, .stride = {1, -1}}),
                        "stride [1, -1]");
  EXPECT_ERROR_CONTAINS(untracked::im2col(zeros({1, 4, 4}), {.kernel_size = {2, 2}, .padding = {-1, 0}}),
                        "padding [-1, 0]");
  EXPECT_ERROR_CONTAINS(untracked::im2col(zeros({1, 4, 4}), {.kernel_size = {2, 2}, .dilation = {0, 1}}),
                        "dilation [0, 1]");
  EXPECT_ERROR_CONTAINS(untracked::im2col(zeros({2, 1, 3, 3}), {.kernel_size = {2, 2}, .dilation = {3, 1}}),
                        "im2col: the window (kernel [2, 2], dilation [3, 1]) does not fit the padded input of shape "
                        "[2, 1, 3, 3]");
  EXPECT_EQ(
      untracked::im2col(zeros({2, 1, 3, 3}), {.kernel_size = {2, 2}, .padding = {1, 0}, .dilation = {3, 1}}).sizes(),
      (Shape{2, 4, 4}));
}

TEST(Col2im, ChecksItsArguments) {
  const Im2colOptions kernel_2x2{.kernel_size = {2, 2}};
  EXPECT_ERROR_CONTAINS(
      untracked::col2im(zeros({1, 4, 2, 10}), {3, 6}, kernel_2x2),
      "col2im: expected columns of shape [N, C * kh * kw, L] or [C * kh * kw, L], found [1, 4, 2, 10]");
  EXPECT_ERROR_CONTAINS(untracked::col2im(zeros({4, 10}, {.dtype = kInt64}), {3, 6}, kernel_2x2),
                        "col2im: expected a floating tensor, found a int64 tensor");
  EXPECT_ERROR_CONTAINS(untracked::col2im(zeros({4, 10}), {3, 6}, {.kernel_size = {2, 2}, .stride = {0, 1}}),
                        "col2im: expected positive kernel size, stride and dilation and non-negative padding",
                        "stride [0, 1]");
  EXPECT_ERROR_CONTAINS(untracked::col2im(zeros({4, 10}), {3, -6}, kernel_2x2),
                        "col2im: expected a non-negative output size, found [3, -6]");
  EXPECT_ERROR_CONTAINS(untracked::col2im(zeros({1, 6, 10}), {3, 6}, kernel_2x2),
                        "col2im: expected dim 1 of columns to be a multiple of kh * kw = 4 for kernel [2, 2], found "
                        "columns of shape [1, 6, 10]");
  // Output [5, 6] with kernel [2, 2], stride [1, 2] has 4 x 3 windows.
  EXPECT_ERROR_CONTAINS(untracked::col2im(zeros({1, 8, 20}), {5, 6}, {.kernel_size = {2, 2}, .stride = {1, 2}}),
                        "col2im: expected 12 columns (4 x 3 windows) for output size [5, 6] with kernel [2, 2], stride "
                        "[1, 2], padding [0, 0] and dilation [1, 1], found 20 in columns of shape [1, 8, 20]");
  EXPECT_ERROR_CONTAINS(untracked::col2im(zeros({4, 1}), {1, 6}, kernel_2x2),
                        "col2im: the window (kernel [2, 2], dilation [1, 1]) does not fit the padded output of shape "
                        "[1, 1, 1, 6]");
  EXPECT_EQ(untracked::col2im(zeros({1, 8, 12}), {5, 6}, {.kernel_size = {2, 2}, .stride = {1, 2}}).sizes(),
            (Shape{1, 2, 5, 6}));
}

TEST(MaxPool2d, DefaultStrideIsTheKernelSize) {
  const std::vector<double> data = {1,  5, 2, 0,  //
                                    3,  4, 8, 8,  //
                                    -1, 0, 6, 7,  //
                                    9,  2, 7, 6};
  auto [pooled, indices] = untracked::max_pool2d(from_vector(data, {1, 1, 4, 4}), {.kernel_size = {2, 2}});
  EXPECT_EQ(pooled.sizes(), (Shape{1, 1, 2, 2}));
  EXPECT_THAT(values(pooled), ElementsAre(5, 8, 9, 7));
  // Flat positions in the 4 x 4 plane; the tie of two 8s goes to the first.
  EXPECT_EQ(indices.dtype(), kInt64);
  EXPECT_THAT(indices.to_vector<int64_t>(), ElementsAre(1, 6, 12, 11));
}

TEST(MaxPool2d, MatchesADirectLoop) {
  const Geometry g({2, 3, 7, 8}, {3, 2}, {2, 1}, {1, 1}, {1, 2});
  const std::vector<double> input = random_values(g.input_numel(), 12);
  auto [pooled, indices] =
      untracked::max_pool2d(from_vector(input, g.input_shape()),
                            {.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}});
  const Pooled expected = naive_max_pool2d(input, g);
  EXPECT_EQ(pooled.sizes(), (Shape{2, 3, g.out_h(), g.out_w()}));
  expect_close(pooled, expected.values, 0);
  EXPECT_EQ(indices.to_vector<int64_t>(), expected.indices);
}

TEST(MaxPool2d, PaddingNeverWins) {
  // Every input is negative: a padded zero must not be the maximum.
  const Geometry g({1, 2, 3, 3}, {2, 2}, {2, 2}, {1, 1});
  std::vector<double> input = random_values(g.input_numel(), 13);
  for (double& v : input) v = -1 - std::abs(v);
  auto [pooled, indices] =
      untracked::max_pool2d(from_vector(input, g.input_shape()), {.kernel_size = {2, 2}, .padding = {1, 1}});
  const Pooled expected = naive_max_pool2d(input, g);
  expect_close(pooled, expected.values, 0);
  EXPECT_EQ(indices.to_vector<int64_t>(), expected.indices);
  for (double v : values(pooled)) EXPECT_LT(v, 0);
}

TEST(MaxPool2d, NaNWinsItsWindow) {
  auto [pooled, indices] =
      untracked::max_pool2d(from_vector<double>({1, kNaN, 3, 4, 5, 6, 7, 8}, {1, 2, 4}), {.kernel_size = {2, 2}});
  EXPECT_EQ(pooled.sizes(), (Shape{1, 1, 2}));
  EXPECT_TRUE(std::isnan(pooled.at<double>({0, 0, 0})));
  EXPECT_EQ(pooled.at<double>({0, 0, 1}), 8);
  EXPECT_THAT(indices.to_vector<int64_t>(), ElementsAre(1, 7));
}

// Values and indices equal to naive_max_pool2d's, NaN where it has NaN.
void expect_max_pool_matches(const ValuesIndices& pooled, const Pooled& expected) {
  EXPECT_EQ(pooled.indices.to_vector<int64_t>(), expected.indices);
  const std::vector<double> got = values(pooled.values);
  ASSERT_EQ(got.size(), expected.values.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected.values[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "output " << i;
    } else {
      EXPECT_EQ(got[i], expected.values[i]) << "output " << i;
    }
  }
}

// The 2 x 2, stride 2 windows take a vectorized path on the CPU: rows of 9 and 3 windows (a
// vector of 4 floats or 2 doubles, then the rest one by one), an odd last column and row left
// out, ties (values on a coarse grid) and NaNs, in float32 and float64.
TEST(MaxPool2d, TwoByTwoWindowsMatchADirectLoop) {
  for (const Shape& shape : {Shape{2, 3, 7, 19}, Shape{1, 2, 6, 6}}) {
    const Geometry g(shape, {2, 2}, {2, 2});
    std::vector<double> input = random_values(g.input_numel(), 21);
    for (size_t i = 0; i < input.size(); ++i) input[i] = i % 23 == 5 ? kNaN : std::round(input[i] * 3);
    for (DType dtype : {kFloat32, kFloat64}) {
      SCOPED_TRACE(dtype_name(dtype) + std::string(" ") + shape_str(shape));
      const ValuesIndices pooled =
          untracked::max_pool2d(untracked::to(from_vector(input, g.input_shape()), dtype), {.kernel_size = {2, 2}});
      expect_max_pool_matches(pooled, naive_max_pool2d(input, g));
    }
  }
}

TEST(MaxPool2d, UnbatchedInput) {
  const Geometry g({1, 2, 5, 4}, {3, 3});
  const std::vector<double> input = random_values(g.input_numel(), 14);
  auto [pooled, indices] =
      untracked::max_pool2d(from_vector(input, {2, 5, 4}), {.kernel_size = {3, 3}, .stride = {1, 1}});
  EXPECT_EQ(pooled.sizes(), (Shape{2, 3, 2}));
  EXPECT_EQ(indices.sizes(), (Shape{2, 3, 2}));
  const Pooled expected = naive_max_pool2d(input, g);
  expect_close(pooled, expected.values, 0);
  EXPECT_EQ(indices.to_vector<int64_t>(), expected.indices);
}

TEST(AvgPool2d, AveragesEachWindow) {
  Tensor input = untracked::view(arange(16, {.dtype = kFloat64}), {1, 1, 4, 4});
  Tensor out = untracked::avg_pool2d(input, {.kernel_size = {2, 2}});
  EXPECT_EQ(out.sizes(), (Shape{1, 1, 2, 2}));
  EXPECT_THAT(values(out), ElementsAre(2.5, 4.5, 10.5, 12.5));
}

TEST(AvgPool2d, PaddingCountsOnlyWhenIncluded) {
  const Geometry g({2, 2, 5, 6}, {3, 3}, {2, 2}, {1, 1});
  const std::vector<double> input = random_values(g.input_numel(), 15);
  const Tensor x = from_vector(input, g.input_shape());
  Tensor included = untracked::avg_pool2d(x, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  Tensor excluded = untracked::avg_pool2d(
      x, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false});
  EXPECT_EQ(included.sizes(), (Shape{2, 2, 3, 3}));
  expect_close(included, naive_avg_pool2d(input, g, true));
  expect_close(excluded, naive_avg_pool2d(input, g, false));
  // The corner window covers 4 inputs and 5 padded zeros.
  const double corner = input[0] + input[1] + input[6] + input[7];
  EXPECT_NEAR(included.at<double>({0, 0, 0, 0}), corner / 9, 1e-15);
  EXPECT_NEAR(excluded.at<double>({0, 0, 0, 0}), corner / 4, 1e-15);
}

TEST(AvgPool2d, UnbatchedInput) {
  const Geometry g({1, 1, 4, 4}, {3, 3}, {2, 2}, {1, 1});
  const std::vector<double> input = random_values(g.input_numel(), 16);
  Tensor out =
      untracked::avg_pool2d(from_vector(input, {1, 4, 4}),
                            {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false});
  EXPECT_EQ(out.sizes(), (Shape{1, 2, 2}));
  expect_close(out, naive_avg_pool2d(input, g, false));
}

TEST(Pool2d, PaddingMustBeAtMostHalfTheKernel) {
  EXPECT_ERROR_CONTAINS(untracked::max_pool2d(zeros({1, 1, 8, 8}), {.kernel_size = {3, 3}, .padding = {2, 2}}),
                        "max_pool2d: padding [2, 2] must be at most half the kernel size [3, 3]");
  EXPECT_ERROR_CONTAINS(untracked::avg_pool2d(zeros({1, 1, 8, 8}), {.kernel_size = {4, 2}, .padding = {2, 2}}),
                        "avg_pool2d: padding [2, 2] must be at most half the kernel size [4, 2]");
}

TEST(Pool2d, ChecksItsInput) {
  EXPECT_ERROR_CONTAINS(untracked::max_pool2d(zeros({1, 1, 3, 3}), {.kernel_size = {4, 4}}),
                        "max_pool2d: the window (kernel [4, 4], dilation [1, 1]) does not fit the padded input of "
                        "shape [1, 1, 3, 3]");
  EXPECT_ERROR_CONTAINS(untracked::avg_pool2d(zeros({1, 1, 4, 4}), {.kernel_size = {2, 2}, .dilation = {2, 2}}),
                        "avg_pool2d: dilation is not supported");
  EXPECT_ERROR_CONTAINS(untracked::max_pool2d(zeros({4, 4}), {.kernel_size = {2, 2}}),
                        "max_pool2d: expected input of shape [N, C, H, W] or [C, H, W], found [4, 4]");
  EXPECT_ERROR_CONTAINS(untracked::avg_pool2d(zeros({1, 4, 4}, {.dtype = kInt64}), {.kernel_size = {2, 2}}),
                        "avg_pool2d: expected a floating tensor, found a int64 tensor");
  EXPECT_ERROR_CONTAINS(untracked::max_pool2d(zeros({1, 4, 4}), {.kernel_size = {0, 2}}),
                        "max_pool2d: expected positive kernel size");
}

// Each plane of `grad` added up at the flat plane positions `indices` of zeros of `input_sizes`.
Tensor scatter_into_planes(const Tensor& grad, const Tensor& indices, const Shape& input_sizes) {
  const int64_t plane = input_sizes[input_sizes.size() - 2] * input_sizes[input_sizes.size() - 1];
  const int64_t planes = shape_numel(input_sizes) / plane;
  return untracked::scatter_add(zeros({planes, plane}, {.dtype = kFloat64}), 1,
                                untracked::reshape(indices, {planes, -1}), untracked::reshape(grad, {planes, -1}));
}

// max_pool2d_backward against the gradient added up at each window's index, by scatter_add into
// zeros: overlapping windows (an input taken by several outputs), padding and dilation, the 2 x 2
// stride-2 windows, and unbatched input.
TEST(MaxPool2dBackward, AddsEachOutputsGradientWhereItsMaximumCameFrom) {
  struct Case {
    Shape input;
    Pool2dOptions options;
  };
  const Case cases[] = {
      {{2, 3, 7, 8}, {.kernel_size = {3, 2}, .stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 2}}},
      {{2, 3, 7, 19}, {.kernel_size = {2, 2}}},
      {{3, 6, 5}, {.kernel_size = {3, 3}, .stride = {2, 1}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.input));
    // A coarse grid makes ties, so that inputs are taken by more than one window.
    std::vector<double> input = random_values(shape_numel(c.input), 31);
    for (double& v : input) v = std::round(v * 2);
    const ValuesIndices pooled = untracked::max_pool2d(from_vector(input, c.input), c.options);
    const Tensor grad = from_vector(random_values(pooled.values.numel(), 32), pooled.values.sizes());
    const Tensor expected = scatter_into_planes(grad, pooled.indices, c.input);
    for (DType dtype : {kFloat64, kFloat32}) {  // 2 x 2 windows: vectors of 2 doubles, of 4 floats
      const Tensor got = untracked::max_pool2d_backward(untracked::to(grad, dtype), pooled.indices, c.input, c.options);
      EXPECT_EQ(got.sizes(), c.input);
      expect_close(got, values(expected), dtype == kFloat64 ? 1e-15 : 1e-6);
    }
  }
}

// Indices are any flat positions in the plane: one naming another window's position (here the
// same as that window's own, so two gradients add up there) still lands where it points, with 2 x 2
// windows too, whose backward otherwise writes each window's four positions once.
TEST(MaxPool2dBackward, AnIndexOutsideItsWindowStillAddsWhereItPoints) {
  const Shape input{1, 2, 4, 10};
  const Pool2dOptions options{.kernel_size = {2, 2}};
  const ValuesIndices pooled =
      untracked::max_pool2d(from_vector(random_values(shape_numel(input), 33), input), options);
  std::vector<int64_t> indices = pooled.indices.to_vector<int64_t>();
  indices[1] = indices[6];  // plane 0, window (0, 1) names a position of window (1, 1)
  const Tensor moved = from_vector(indices, pooled.indices.sizes());
  const Tensor grad = from_vector(random_values(pooled.values.numel(), 34), pooled.values.sizes());
  const Tensor expected = scatter_into_planes(grad, moved, input);
  for (DType dtype : {kFloat64, kFloat32}) {
    expect_close(untracked::max_pool2d_backward(untracked::to(grad, dtype), moved, input, options), values(expected),
                 dtype == kFloat64 ? 1e-15 : 1e-6);
  }
}

TEST(MaxPool2dBackward, ChecksItsArguments) {
  const Pool2dOptions options{.kernel_size = {2, 2}};
  const ValuesIndices pooled = untracked::max_pool2d(randn({1, 2, 4, 4}), options);
  EXPECT_ERROR_CONTAINS(untracked::max_pool2d_backward(pooled.values, pooled.indices, {1, 2, 6, 4}, options),
                        "max_pool2d_backward: expected grad_output and indices of the pooled shape [1, 2, 3, 2] for "
                        "input of shape [1, 2, 6, 4], found [1, 2, 2, 2] and [1, 2, 2, 2]");
  EXPECT_ERROR_CONTAINS(
      untracked::max_pool2d_backward(pooled.values, untracked::to(pooled.indices, kFloat32), {1, 2, 4, 4}, options),
      "max_pool2d_backward: expected int64 indices, found a float32 tensor");
  EXPECT_ERROR_CONTAINS(
      untracked::max_pool2d_backward(pooled.values, pooled.indices, {2, 4, 4, 1, 1}, options),
      "max_pool2d_backward: expected an input shape [N, C, H, W] or [C, H, W], found [2, 4, 4, 1, 1]");
  const Tensor outside = from_vector<int64_t>({0, 16, 2, 3, -1, 5, 6, 7}, {1, 2, 2, 2});
  EXPECT_ERROR_CONTAINS(untracked::max_pool2d_backward(pooled.values, outside, {1, 2, 4, 4}, options),
                        "max_pool2d_backward: 2 indices lie outside their 4 x 4 plane (expected flat positions in "
                        "[0, 16))");
  // Large enough for the planes to be split across threads: every bad index is counted.
  const ValuesIndices large = untracked::max_pool2d(randn({4, 8, 64, 64}), options);
  const Tensor flat = untracked::reshape(untracked::clone(large.indices), {-1});
  for (int64_t position : {int64_t{0}, int64_t{5000}, flat.numel() - 1}) flat.data<int64_t>()[position] = 4096;
  EXPECT_ERROR_CONTAINS(untracked::max_pool2d_backward(large.values, untracked::reshape(flat, large.indices.sizes()),
                                                       {4, 8, 64, 64}, options),
                        "max_pool2d_backward: 3 indices lie outside their 64 x 64 plane");
}

}  // namespace
}  // namespace distgrad
