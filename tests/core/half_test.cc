// float16 and bfloat16 (core/half.h): conversions (every bit pattern, rounding ties to even,
// overflow, subnormals, NaN), the ops that make, move and convert them, and the ops that refuse
// them, naming the dtype.
#include "core/half.h"

#include <cmath>
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

TEST(Half, OpsThatComputeRefuseThemNamingTheDtype) {
  const Tensor h = to(ones({4}), kFloat16), b = to(ones({4}), kBFloat16);
  EXPECT_ERROR_CONTAINS(add(h, h), "float16 tensors are for storage", "distgrad::to(t, kFloat32)");
  EXPECT_ERROR_CONTAINS(sum(b), "bfloat16 tensors are for storage");
  EXPECT_ERROR_CONTAINS(matmul(reshape(h, {2, 2}), reshape(h, {2, 2})), "float16");
}

}  // namespace
}  // namespace distgrad
