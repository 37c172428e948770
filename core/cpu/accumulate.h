// Accumulation for the CPU's reductions: the type sums accumulate in and a run's sum (or
// product) with several accumulators, in a fixed order.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/kernels.h"

namespace distgrad::cpu {

// Float32 sums accumulate in float64; other types in themselves.
template <typename T>
using AccumulateType = std::conditional_t<std::is_same_v<T, float>, double, T>;

// Sum or product of the run element(0), ..., element(count - 1) with several accumulators (the
// order is fixed, so results do not depend on the thread count).
template <typename T, typename Element>
AccumulateType<T> accumulate_run(kernels::ReduceOp op, Element element, int64_t count) {
  using Acc = AccumulateType<T>;
  const bool sum = op == kernels::ReduceOp::kSum;
  const Acc identity = sum ? Acc(0) : Acc(1);
  Acc lanes[8] = {identity, identity, identity, identity, identity, identity, identity, identity};
  int64_t j = 0;
  for (; j + 8 <= count; j += 8) {
    for (int lane = 0; lane < 8; ++lane) {
      lanes[lane] = sum ? lanes[lane] + Acc(element(j + lane)) : lanes[lane] * Acc(element(j + lane));
    }
  }
  Acc result = identity;
  for (int lane = 0; lane < 8; ++lane) result = sum ? result + lanes[lane] : result * lanes[lane];
  for (; j < count; ++j) result = sum ? result + Acc(element(j)) : result * Acc(element(j));
  return result;
}

}  // namespace distgrad::cpu
