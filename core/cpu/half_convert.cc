#include "core/cpu/half_convert.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace distgrad::cpu {
namespace {

#if defined(__x86_64__)
bool has_f16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}

// Eight at a time (VCVTPS2PH, VCVTPH2PS); returns how many it converted.
__attribute__((target("avx,f16c"))) int64_t float_to_float16_f16c(Float16* out, const float* in, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i halves = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), halves);
  }
  return i;
}

__attribute__((target("avx,f16c"))) int64_t float16_to_float_f16c(float* out, const Float16* in, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(halves));
  }
  return i;
}
#endif

}  // namespace

void from_float(Float16* out, const float* in, int64_t count) {
  int64_t done = 0;
#if defined(__x86_64__)
  if (has_f16c()) done = float_to_float16_f16c(out, in, count);
#endif
  for (int64_t i = done; i < count; ++i) out[i] = Float16(in[i]);
}

void to_float(float* out, const Float16* in, int64_t count) {
  int64_t done = 0;
#if defined(__x86_64__)
  if (has_f16c()) done = float16_to_float_f16c(out, in, count);
#endif
  for (int64_t i = done; i < count; ++i) out[i] = static_cast<float>(in[i]);
}

void from_float(BFloat16* out, const float* in, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = BFloat16(in[i]);
}

void to_float(float* out, const BFloat16* in, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(in[i]);
}

}  // namespace distgrad::cpu
