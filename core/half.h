// Float16 and BFloat16: the 16-bit floating-point element types (IEEE 754 binary16, and bfloat16:
// float32's exponent with 7 mantissa bits), as C++ types for the kernels that move them.
//
// The kernels that move data (untracked::to in both directions, copies, views, fill, collectives,
// safetensors, the RPC wire) take them as they are; the ops that compute widen them to float32 and
// round their result back (Note [Half precision compute] in core/op_checks.h). Conversions from float round
// to nearest, ties to even, as PyTorch's and CUDA's do; NaN stays NaN and overflow becomes inf.
// float64 and int64 convert through float, as in PyTorch (so a float64 just off a tie can round
// the other way than a direct conversion would).
//
//   Float16 h(0.1f);            // the nearest binary16: 0.0999755859375
//   float back = h;             // exact
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DISTGRAD_HOST_DEVICE __host__ __device__
#else
#define DISTGRAD_HOST_DEVICE
#endif

namespace distgrad {
namespace half_detail {

DISTGRAD_HOST_DEVICE inline uint32_t bits_of(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

DISTGRAD_HOST_DEVICE inline float float_of(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

DISTGRAD_HOST_DEVICE inline uint16_t float_to_half_bits(float value) {
  const uint32_t bits = bits_of(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));  // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
  if (magnitude < 0x38800000u) {
    // Below 2^-14, binary16 counts in steps of 2^-24: adding 0.5f (whose last mantissa bit is
    // 2^-24) rounds the magnitude to that step, ties to even, in the float adder itself.
    const float rounded = float_of(magnitude) + 0.5f;
    return static_cast<uint16_t>(sign | (bits_of(rounded) - 0x3f000000u));
  }
  // A normal binary16: round away the 13 low mantissa bits (ties to even), then rebias the exponent.
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

DISTGRAD_HOST_DEVICE inline float half_bits_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1fu) return float_of(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

DISTGRAD_HOST_DEVICE inline uint16_t float_to_bfloat16_bits(float value) {
  const uint32_t bits = bits_of(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);  // ties to even; may reach inf
}

DISTGRAD_HOST_DEVICE inline float bfloat16_bits_to_float(uint16_t bfloat) { return float_of(uint32_t{bfloat} << 16); }

}  // namespace half_detail

// IEEE 754 binary16: 5 exponent bits, 10 mantissa bits (largest finite 65504).
struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  DISTGRAD_HOST_DEVICE explicit Float16(float value) : bits(half_detail::float_to_half_bits(value)) {}
  DISTGRAD_HOST_DEVICE operator float() const { return half_detail::half_bits_to_float(bits); }
  static Float16 from_bits(uint16_t bits) {
    Float16 value;
    value.bits = bits;
    return value;
  }
};

// bfloat16: float32's 8 exponent bits with 7 mantissa bits.
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  DISTGRAD_HOST_DEVICE explicit BFloat16(float value) : bits(half_detail::float_to_bfloat16_bits(value)) {}
  DISTGRAD_HOST_DEVICE operator float() const { return half_detail::bfloat16_bits_to_float(bits); }
  static BFloat16 from_bits(uint16_t bits) {
    BFloat16 value;
    value.bits = bits;
    return value;
  }
};

static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);

}  // namespace distgrad
