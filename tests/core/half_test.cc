// float16 and bfloat16 (core/half.h): conversions (every bit pattern, rounding ties to even,
// overflow, subnormals, NaN), the ops that make, move and convert them, and the ops computing
// them in float32 and rounding once (Note [Half precision compute] in core/op_checks.h).
#include "core/half.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using namespace untracked;
using testing::values;

constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename Half>
void expect_every_bit_pattern_round_trips() {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = Half::from_bits(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(Half(value)))) << std::hex << bits;
    } else {
      EXPECT_EQ(Half(value).bits, bits) << std::hex << bits << " is " << value;
    }
  }
}

TEST(Half, EveryFloat16AndBFloat16ValueRoundTripsThroughFloat) {
  expect_every_bit_pattern_round_trips<Float16>();
  expect_every_bit_pattern_round_trips<BFloat16>();
}

TEST(Half, Float16RoundsToNearestTiesToEven) {
  const float min_subnormal = std::ldexp(1.0f, -24), min_normal = std::ldexp(1.0f, -14);
  const std::vector<std::pair<float, float>> cases = {
      {0.1f, 0.0999755859375f},
      {1.0f / 3, 0.333251953125f},
      {2049.0f, 2048.0f},  // a tie: to the even mantissa below
      {2051.0f, 2052.0f},  // a tie: to the even mantissa above
      {65504.0f, 65504.0f},
      {65519.0f, 65504.0f},
      {65520.0f, kInf},  // the first value that rounds past the largest finite
      {-1e10f, -kInf},
      {min_normal, min_normal},
      {min_subnormal, min_subnormal},
      {min_subnormal / 2, 0.0f},                  // a tie between 0 and the smallest subnormal: 0
      {min_subnormal * 1.5f, 2 * min_subnormal},  // a tie: to the even count of steps
      {min_subnormal * 0.75f, min_subnormal},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(static_cast<float>(Float16(in)), out) << in;
  EXPECT_TRUE(std::signbit(static_cast<float>(Float16(-0.0f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Float16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Float16(std::numeric_limits<float>::signaling_NaN()))));
}

TEST(Half, BFloat16RoundsToNearestTiesToEven) {
  const std::vector<std::pair<float, float>> cases = {
      {1.0f + std::ldexp(1.0f, -8), 1.0f},                             // a tie: to even
      {1.0f + 3 * std::ldexp(1.0f, -8), 1.0f + std::ldexp(1.0f, -6)},  // a tie: to even, above
      {1.0f / 3, 0.333984375f},
      {65504.0f, 65536.0f},
      {std::numeric_limits<float>::max(), kInf},
      {3.3895313892515355e38f, 3.3895313892515355e38f},  // the largest finite bfloat16
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(static_cast<float>(BFloat16(in)), out) << in;
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::signaling_NaN()))));
}

// Conversions of whole tensors (the CPU's F16C instructions where it has them) give the scalar
// conversions' results: every float16 to float, and floats of every exponent, rounding cases
// and specials to float16; contiguous (a length that leaves a tail) and strided.
TEST(Half, TensorConversionsGiveTheScalarConversions) {
  std::vector<uint16_t> patterns(0x10000 + 3);
  for (uint32_t bits = 0; bits < patterns.size(); ++bits) patterns[bits] = static_cast<uint16_t>(bits);
  Tensor halves = empty({static_cast<int64_t>(patterns.size())}, {.dtype = kFloat16});
  std::memcpy(halves.data_ptr(), patterns.data(), patterns.size() * sizeof(uint16_t));
  for (const Tensor& source : {halves, slice(halves, 0, 1, halves.size(0), 3)}) {
    const std::vector<float> widened = to(source, kFloat32).to_vector<float>();
    const Tensor source_copy = contiguous(source);
    const uint16_t* source_bits = static_cast<const uint16_t*>(source_copy.data_ptr());
    for (size_t i = 0; i < widened.size(); ++i) {
      const float expected = Float16::from_bits(source_bits[i]);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(widened[i])) << std::hex << source_bits[i];
      } else {
        EXPECT_EQ(widened[i], expected) << std::hex << source_bits[i];
      }
    }
  }
  std::vector<float> floats;
  for (uint32_t bits = 0; bits < 0xffffffffu - 40009; bits += 40009) {  // every exponent, both signs
    float value;
    std::memcpy(&value, &bits, sizeof value);
    floats.push_back(value);
  }
  for (float special : {65504.0f, 65519.99f, 65520.0f, 2049.0f, 2051.0f, std::ldexp(1.0f, -25), std::ldexp(1.5f, -24),
                        -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN()}) {
    floats.push_back(special);
  }
  const Tensor wide = from_vector(floats);
  for (const Tensor& source : {wide, slice(wide, 0, 0, wide.size(0), 2)}) {
    const Tensor narrowed = contiguous(to(source, kFloat16));
    const uint16_t* bits = static_cast<const uint16_t*>(narrowed.data_ptr());
    const std::vector<float> values_in = source.to_vector<float>();
    for (size_t i = 0; i < values_in.size(); ++i) {
      const Float16 expected(values_in[i]);
      if (std::isnan(values_in[i])) {
        EXPECT_TRUE(std::isnan(static_cast<float>(Float16::from_bits(bits[i])))) << values_in[i];
      } else {
        EXPECT_EQ(bits[i], expected.bits) << values_in[i];
      }
    }
  }
}

TEST(Half, TensorsAreMadeConvertedCopiedAndViewed) {
  const Tensor x = from_vector<float>({0.5f, -2.0f, 65504.0f, 0.1f, 1e9f, -0.0f}, {2, 3});
  const Tensor h = to(x, kFloat16);
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_EQ(h.element_size(), 2u);
  EXPECT_EQ(values(h), (std::vector<double>{0.5, -2, 65504, 0.0999755859375, INFINITY, 0}));
  const Tensor b = to(x, kBFloat16);
  EXPECT_EQ(values(b), (std::vector<double>{0.5, -2, 65536, 0.10009765625, 998244352, 0}));
  // Between the two half types through float; to and from int64 and bool.
  EXPECT_EQ(values(to(h, kBFloat16)), (std::vector<double>{0.5, -2, 65536, 0.10009765625, INFINITY, 0}));
  EXPECT_EQ(values(to(to(x, kInt64), kFloat16)), (std::vector<double>{0, -2, 65504, 0, INFINITY, 0}));
  EXPECT_EQ(values(to(h, kBool)), (std::vector<double>{1, 1, 1, 1, 1, 0}));
  // Views, non-contiguous copies and fills.
  EXPECT_EQ(values(contiguous(t(h))), (std::vector<double>{0.5, 0.0999755859375, -2, INFINITY, 65504, 0}));
  EXPECT_EQ(values(narrow(b, 1, 1, 2)), (std::vector<double>{-2, 65536, 998244352, 0}));
  EXPECT_EQ(values(full({3}, 1.5, {.dtype = kBFloat16})), (std::vector<double>{1.5, 1.5, 1.5}));
  Tensor target = zeros({3, 2}, {.dtype = kFloat16});
  copy_(target, t(x));
  EXPECT_EQ(values(target), (std::vector<double>{0.5, 0.0999755859375, -2, INFINITY, 65504, 0}));
  std::ostringstream printed;
  printed << to(from_vector<float>({0.5f, -2.0f}), kFloat16);
  EXPECT_EQ(printed.str(), "tensor([ 0.5000, -2.0000], dtype=float16)");
}

// Float `values` stored in `dtype` (rounded there).
Tensor half_tensor(const std::vector<float>& values, DType dtype, const Shape& sizes = {}) {
  return to(sizes.empty() ? from_vector(values) : from_vector(values, sizes), dtype);
}

// What an op on halves must give (Note [Half precision compute]): `op` on their float values,
// rounded once to `Half`.
template <typename Half, typename Op>
std::vector<double> rounded_once(const Tensor& a, const Tensor& b, Op op) {
  const std::vector<double> x = values(a), y = values(b);
  std::vector<double> out;
  for (size_t i = 0; i < x.size(); ++i) {
    out.push_back(static_cast<float>(Half(op(static_cast<float>(x[i]), static_cast<float>(y[i])))));
  }
  return out;
}

template <typename Half>
void expect_elementwise_ops_round_once() {
  const DType dtype = dtype_of<Half>();
  const Tensor a = half_tensor({0.1f, -2.5f, 3.3f, 1000.7f, 1e-3f}, dtype);
  const Tensor b = half_tensor({0.7f, 0.3f, -1.9f, 3.1f, 7.0f}, dtype);
  EXPECT_EQ(add(a, b).dtype(), dtype);
  EXPECT_EQ(values(add(a, b)), (rounded_once<Half>(a, b, [](float x, float y) { return x + y; })));
  EXPECT_EQ(values(mul(a, b)), (rounded_once<Half>(a, b, [](float x, float y) { return x * y; })));
  EXPECT_EQ(values(div(a, b)), (rounded_once<Half>(a, b, [](float x, float y) { return x / y; })));
  EXPECT_EQ(values(exp(a)), (rounded_once<Half>(a, b, [](float x, float) { return std::exp(x); })));
  EXPECT_EQ(values(tanh(a)), (rounded_once<Half>(a, b, [](float x, float) { return std::tanh(x); })));
  EXPECT_EQ(values(mul(a, 3.0)), (rounded_once<Half>(a, b, [](float x, float) { return x * 3.0f; })));
  EXPECT_EQ(values(lt(a, b)), (std::vector<double>{1, 1, 0, 0, 1}));
  EXPECT_EQ(lt(a, b).dtype(), kBool);
  // In place: the same values, written into the half tensor.
  const Tensor c = clone(a);
  add_(c, b);
  EXPECT_EQ(c.dtype(), dtype);
  EXPECT_EQ(values(c), values(add(a, b)));
  mul_(c, 0.5);
  clamp_(c, -1.0, 1.0);
  EXPECT_EQ(values(c), values(clamp(mul(add(a, b), 0.5), -1.0, 1.0)));
}

TEST(Half, ElementwiseOpsComputeInFloatAndRoundOnce) {
  expect_elementwise_ops_round_once<Float16>();
  expect_elementwise_ops_round_once<BFloat16>();
}

TEST(Half, ReductionsAccumulateInFloat) {
  // A float16 running sum of ones stops at 2048 (2049 is not a float16); float32 accumulation does not.
  EXPECT_EQ(values(sum(ones({4096}, {.dtype = kFloat16}))), (std::vector<double>{4096}));
  EXPECT_EQ(sum(ones({4096}, {.dtype = kFloat16})).dtype(), kFloat16);
  EXPECT_EQ(values(sum(ones({512}, {.dtype = kBFloat16}))), (std::vector<double>{512}));  // bfloat16 alone stops at 256
  const Tensor x = half_tensor({0.1f, 0.2f, 0.3f, 0.4f, 10.0f, -3.0f}, kFloat16, {2, 3});
  const Tensor wide = to(x, kFloat32);
  // Composite ops round their result only: the same as the float32 op on the same values, rounded.
  EXPECT_EQ(values(mean(x, {1})), values(to(mean(wide, {1}), kFloat16)));
  EXPECT_EQ(values(var(x)), values(to(var(wide), kFloat16)));
  EXPECT_EQ(values(std(x, {0})), values(to(std(wide, {0}), kFloat16)));
  EXPECT_EQ(values(softmax(x, 1)), values(to(softmax(wide, 1), kFloat16)));
  EXPECT_EQ(values(log_softmax(x, 0)), values(to(log_softmax(wide, 0), kFloat16)));
  EXPECT_EQ(values(logsumexp(x, {1})), values(to(logsumexp(wide, {1}), kFloat16)));
  EXPECT_EQ(values(norm(x, 3.0)), values(to(norm(wide, 3.0), kFloat16)));
  EXPECT_EQ(values(cumsum(x, 1)), values(to(cumsum(wide, 1), kFloat16)));
  EXPECT_EQ(values(prod(x, 1)), values(to(prod(wide, 1), kFloat16)));
  const ValuesIndices largest = max(x, 1);
  EXPECT_EQ(largest.values.dtype(), kFloat16);
  EXPECT_EQ(values(largest.values), (std::vector<double>{0.300048828125, 10}));
  EXPECT_EQ(values(largest.indices), (std::vector<double>{2, 1}));
  EXPECT_EQ(values(argmin(x)), (std::vector<double>{5}));
  EXPECT_TRUE(allclose(x, add(x, 1e-4), /*rtol=*/1e-2));
  EXPECT_FALSE(allclose(x, add(x, 1e-2), /*rtol=*/1e-4));
}

// matmul of halves: float32 products of the float values, accumulated in float32 and rounded
// once, through every operand layout gemm is handed (transposed, strided, broadcast over a batch).
template <typename Half>
void expect_matmul_rounds_once() {
  const DType dtype = dtype_of<Half>();
  Generator generator(7);
  const Tensor a = to(randn({3, 5, 70}, {}, generator), dtype), b = to(randn({70, 6}, {}, generator), dtype);
  const auto float32_rounded = [&](const Tensor& x, const Tensor& y) {
    return values(to(matmul(to(x, kFloat32), to(y, kFloat32)), dtype));
  };
  const Tensor product = matmul(a, b);
  EXPECT_EQ(product.dtype(), dtype);
  EXPECT_EQ(product.sizes(), (Shape{3, 5, 6}));
  EXPECT_EQ(values(product), float32_rounded(a, b));
  const Tensor a_t = transpose(to(randn({3, 70, 5}, {}, generator), dtype), 1, 2);  // stored transposed
  EXPECT_EQ(values(matmul(a_t, b)), float32_rounded(a_t, b));
  const Tensor columns = slice(to(randn({70, 12}, {}, generator), dtype), 1, 0, 12, 2);  // a leading dimension of 12
  EXPECT_EQ(values(matmul(a, columns)), float32_rounded(a, columns));
  EXPECT_EQ(values(matmul(select(a, 0, 1), select(b, 1, 2))), float32_rounded(select(a, 0, 1), select(b, 1, 2)));
  const Tensor bias = to(randn({6}, {}, generator), dtype), m = select(a, 0, 0);
  EXPECT_EQ(values(addmm(bias, m, b, 0.5, 2.0)),
            values(to(addmm(to(bias, kFloat32), to(m, kFloat32), to(b, kFloat32), 0.5, 2.0), dtype)));
  // Within the half type's rounding of the exact product.
  const std::vector<double> exact = values(matmul(to(a, kFloat64), to(b, kFloat64)));
  const std::vector<double> got = values(product);
  const double epsilon = dtype == kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  for (size_t i = 0; i < exact.size(); ++i) EXPECT_NEAR(got[i], exact[i], 2 * epsilon * std::abs(exact[i]) + 1e-6);
}

TEST(Half, MatmulAccumulatesInFloatAndRoundsOnce) {
  expect_matmul_rounds_once<Float16>();
  expect_matmul_rounds_once<BFloat16>();
}

TEST(Half, ConvolutionPoolingAndBatchNormComputeInFloat) {
  Generator generator(3);
  const Tensor x = to(randn({2, 3, 9, 9}, {}, generator), kBFloat16);
  const Tensor weight = to(randn({4, 3, 3, 3}, {}, generator), kBFloat16),
               bias = to(randn({4}, {}, generator), kBFloat16);
  const Tensor wide_x = to(x, kFloat32), wide_weight = to(weight, kFloat32), wide_bias = to(bias, kFloat32);
  const Tensor y = conv2d(x, weight, bias, {.padding = {1, 1}});
  EXPECT_EQ(y.dtype(), kBFloat16);
  EXPECT_EQ(values(y), values(to(conv2d(wide_x, wide_weight, wide_bias, {.padding = {1, 1}}), kBFloat16)));
  const Conv2dGrads grads = conv2d_backward(y, x, weight, {}, {.padding = {1, 1}});
  const Conv2dGrads wide_grads = conv2d_backward(to(y, kFloat32), wide_x, wide_weight, {}, {.padding = {1, 1}});
  EXPECT_EQ(values(grads.weight), values(to(wide_grads.weight, kBFloat16)));
  EXPECT_EQ(values(grads.input), values(to(wide_grads.input, kBFloat16)));
  EXPECT_EQ(values(max_pool2d(x, {.kernel_size = {2, 2}}).values),
            values(to(max_pool2d(wide_x, {.kernel_size = {2, 2}}).values, kBFloat16)));
  EXPECT_EQ(values(avg_pool2d(x, {.kernel_size = {3, 3}})),
            values(to(avg_pool2d(wide_x, {.kernel_size = {3, 3}}), kBFloat16)));
  const BatchNormOutputs normalized = batch_norm(x, Tensor(), Tensor(), 1e-5);
  EXPECT_EQ(normalized.output.dtype(), kBFloat16);
  EXPECT_EQ(values(normalized.output), values(to(batch_norm(wide_x, Tensor(), Tensor(), 1e-5).output, kBFloat16)));
}

TEST(Half, IndexingAndRandomOpsKeepTheHalfDtype) {
  const Tensor x = half_tensor({0.5f, -1.25f, 3.0f, 7.5f}, kFloat16, {2, 2});
  const Tensor index = from_vector<int64_t>({1, 0, 1});
  EXPECT_EQ(values(index_select(x, 0, index)), (std::vector<double>{3, 7.5, 0.5, -1.25, 3, 7.5}));
  EXPECT_EQ(index_select(x, 0, index).dtype(), kFloat16);
  EXPECT_EQ(values(gather(x, 1, from_vector<int64_t>({1, 1, 0, 0}, {2, 2}))),
            (std::vector<double>{-1.25, -1.25, 3, 3}));
  EXPECT_EQ(values(where(from_vector<bool>({true, false}), select(x, 0, 0), select(x, 0, 1))),
            (std::vector<double>{0.5, 7.5}));
  EXPECT_EQ(values(masked_fill(x, from_vector<bool>({false, true}), 9.0)), (std::vector<double>{0.5, 9, 3, 9}));
  EXPECT_EQ(values(scatter_add(zeros({2, 2}, {.dtype = kFloat16}), 0, from_vector<int64_t>({1, 0, 1, 1}, {2, 2}), x)),
            (std::vector<double>{0, -1.25, 3.5, 7.5}));
  EXPECT_EQ(values(cat({x, x}, 0)).size(), 8u);
  EXPECT_EQ(one_hot(from_vector<int64_t>({2, 0}), 3, kBFloat16).dtype(), kBFloat16);
  Generator generator(11);
  const Tensor uniform = rand({1000}, {.dtype = kFloat16}, generator);
  EXPECT_EQ(uniform.dtype(), kFloat16);
  EXPECT_GE(min(uniform).item<double>(), 0.0);
  EXPECT_LE(max(uniform).item<double>(), 1.0);
  const Tensor gaussian = randn({20000}, {.dtype = kBFloat16}, generator);
  EXPECT_NEAR(mean(to(gaussian, kFloat64)).item<double>(), 0.0, 0.05);
  EXPECT_NEAR(std(to(gaussian, kFloat64)).item<double>(), 1.0, 0.05);
}

TEST(Half, TwoFloatingDtypesComputeInTheWiderOne) {
  const Tensor h = half_tensor({0.1f, 2.0f}, kFloat16), b = half_tensor({0.1f, 2.0f}, kBFloat16);
  const Tensor f = from_vector<float>({0.1f, 2.0f});
  EXPECT_EQ(promote_floating(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(add(h, f).dtype(), kFloat32);
  EXPECT_EQ(values(add(h, f)), values(add(to(h, kFloat32), f)));
  EXPECT_EQ(mul(h, b).dtype(), kFloat32);  // neither half type holds the other's values
  EXPECT_EQ(sub(f, from_vector<double>({1, 1})).dtype(), kFloat64);
  EXPECT_EQ(where(from_vector<bool>({true, false}), h, f).dtype(), kFloat32);
  // In place, the result is written in the target's dtype.
  const Tensor target = clone(h);
  add_(target, f);
  EXPECT_EQ(target.dtype(), kFloat16);
  EXPECT_EQ(values(target), values(to(add(h, f), kFloat16)));
  EXPECT_ERROR_CONTAINS(add(h, from_vector<int64_t>({1, 2})), "add: expected tensors of one dtype (or two floating",
                        "float16 tensor of shape [2]", "int64 tensor of shape [2]");
}

}  // namespace
}  // namespace distgrad
