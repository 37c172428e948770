// Runs of float32 <-> float16 conversions, for the kernels that convert many at once (copy,
// half gemm): the CPU's F16C instructions where it has them, half.h's conversions otherwise and
// for the tail, with the same results (round to nearest, ties to even; subnormals exact; a NaN
// stays a NaN).
#pragma once

#include <cstdint>

#include "core/half.h"

namespace distgrad::cpu {

void float_to_float16(Float16* out, const float* in, int64_t count);
void float16_to_float(float* out, const Float16* in, int64_t count);

}  // namespace distgrad::cpu
