// Runs of float32 <-> float16 and bfloat16 conversions, for the kernels that convert many at once
// (copy, half gemm). float16 uses the CPU's F16C instructions where it has them, half.h's
// conversions otherwise and for the tail, with the same results (round to nearest, ties to even;
// subnormals exact; a NaN stays a NaN); bfloat16 uses half.h's, which the compiler vectorises.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace distgrad::cpu {

void from_float(Float16* out, const float* in, int64_t count);
void from_float(BFloat16* out, const float* in, int64_t count);
void to_float(float* out, const Float16* in, int64_t count);
void to_float(float* out, const BFloat16* in, int64_t count);

}  // namespace distgrad::cpu
