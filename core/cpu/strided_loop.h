// StridedLoop: visits every element of N same-shaped operands with arbitrary strides.
//
// The loop first drops size-1 dims and merges adjacent dims that are contiguous in every
// operand, so a contiguous (or uniformly strided) tensor becomes one run. It then walks the
// flattened index space in runs along the innermost dim, calling
//   body(offsets, steps, count)
// where offsets[k] is operand k's element offset (relative to its data_ptr()) at the start
// of the run, steps[k] its innermost stride in elements (0 for a broadcast operand) and
// count the run length. Large loops are split across OpenMP threads by index range, each
// thread processing a disjoint range of output elements.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "core/tensor.h"

namespace distgrad::cpu {

// Elements below which a loop runs on the calling thread (thread start-up costs more).
inline constexpr int64_t kParallelGrain = 1 << 16;

template <size_t N>
class StridedLoop {
 public:
  using Offsets = std::array<int64_t, N>;
  static constexpr int kMaxDims = 25;

  StridedLoop(const Shape& sizes, const std::array<const Shape*, N>& strides) {
    DISTGRAD_CHECK(sizes.size() <= kMaxDims, "tensor ops support at most ", kMaxDims, " dims, found ", sizes.size());
    numel_ = shape_numel(sizes);
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] == 1) continue;
      if (ndim_ > 0 && can_merge_with_previous(sizes[d], d, strides)) {
        sizes_[ndim_ - 1] *= sizes[d];
        for (size_t k = 0; k < N; ++k) strides_[k][ndim_ - 1] = (*strides[k])[d];
        continue;
      }
      sizes_[ndim_] = sizes[d];
      for (size_t k = 0; k < N; ++k) strides_[k][ndim_] = (*strides[k])[d];
      ++ndim_;
    }
    if (ndim_ == 0) {  // a single element
      sizes_[0] = 1;
      for (size_t k = 0; k < N; ++k) strides_[k][0] = 0;
      ndim_ = 1;
    }
  }

  int64_t numel() const { return numel_; }

  template <typename Body>
  void run(Body&& body) const {
    if (numel_ == 0) return;
    if (numel_ < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
      run_range(0, numel_, body);
      return;
    }
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads();
      const int64_t chunk = (numel_ + threads - 1) / threads;
      const int64_t begin = std::min(numel_, omp_get_thread_num() * chunk);
      const int64_t end = std::min(numel_, begin + chunk);
      if (begin < end) run_range(begin, end, body);
    }
  }

 private:
  // Dim d (being added after the current last merged dim) continues it in every operand.
  bool can_merge_with_previous(int64_t size, size_t d, const std::array<const Shape*, N>& strides) const {
    for (size_t k = 0; k < N; ++k) {
      if (strides_[k][ndim_ - 1] != (*strides[k])[d] * size) return false;
    }
    return true;
  }

  template <typename Body>
  void run_range(int64_t begin, int64_t end, Body& body) const {
    std::array<int64_t, kMaxDims> coord{};
    Offsets offsets{};
    int64_t remainder = begin;
    for (int d = ndim_ - 1; d >= 0; --d) {
      coord[d] = remainder % sizes_[d];
      remainder /= sizes_[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += coord[d] * strides_[k][d];
    }
    const int last = ndim_ - 1;
    Offsets steps;
    for (size_t k = 0; k < N; ++k) steps[k] = strides_[k][last];
    for (int64_t i = begin; i < end;) {
      const int64_t count = std::min(sizes_[last] - coord[last], end - i);
      body(offsets, steps, count);
      i += count;
      coord[last] += count;
      for (size_t k = 0; k < N; ++k) offsets[k] += count * strides_[k][last];
      for (int d = last; d > 0 && coord[d] == sizes_[d]; --d) {
        coord[d] = 0;
        ++coord[d - 1];
        for (size_t k = 0; k < N; ++k) offsets[k] += strides_[k][d - 1] - sizes_[d] * strides_[k][d];
      }
    }
  }

  int64_t numel_ = 0;
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> sizes_{};
  std::array<std::array<int64_t, kMaxDims>, N> strides_{};
};

// map_unary's default: contiguous runs too are mapped element by element with `op`.
struct EachElement {};

// out[i] = op(in[i]) over same-shaped tensors; with a `run`, each run contiguous in both is
// handed whole to run(o, x, count) instead (a conversion done many at once: cpu/half_convert.h).
template <typename Out, typename In, typename Op, typename Run = EachElement>
void map_unary(const Tensor& out, const Tensor& in, Op op, Run run = {}) {
  Out* out_data = static_cast<Out*>(out.data_ptr());
  const In* in_data = static_cast<const In*>(in.data_ptr());
  StridedLoop<2>(out.sizes(), {&out.strides(), &in.strides()})
      .run([&](const auto& offsets, const auto& steps, int64_t count) {
        Out* o = out_data + offsets[0];
        const In* x = in_data + offsets[1];
        if (steps[0] == 1 && steps[1] == 1) {
          if constexpr (std::is_same_v<Run, EachElement>) {
            for (int64_t j = 0; j < count; ++j) o[j] = op(x[j]);
          } else {
            run(o, x, count);
          }
        } else if (steps[0] == 1 && steps[1] == 0) {  // a broadcast input: a fill
          const Out value = op(*x);
          for (int64_t j = 0; j < count; ++j) o[j] = value;
        } else {
          for (int64_t j = 0; j < count; ++j) o[j * steps[0]] = op(x[j * steps[1]]);
        }
      });
}

// out[i] = op(a[i], b[i]) over same-shaped tensors (b is often broadcast with step 0).
template <typename Out, typename In, typename Op>
void map_binary(const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  Out* out_data = static_cast<Out*>(out.data_ptr());
  const In* a_data = static_cast<const In*>(a.data_ptr());
  const In* b_data = static_cast<const In*>(b.data_ptr());
  StridedLoop<3>(out.sizes(), {&out.strides(), &a.strides(), &b.strides()})
      .run([&](const auto& offsets, const auto& steps, int64_t count) {
        Out* o = out_data + offsets[0];
        const In* x = a_data + offsets[1];
        const In* y = b_data + offsets[2];
        if (steps[0] == 1 && steps[1] == 1 && steps[2] == 1) {
          for (int64_t j = 0; j < count; ++j) o[j] = op(x[j], y[j]);
        } else if (steps[0] == 1 && steps[1] == 1 && steps[2] == 0) {
          const In y0 = *y;
          for (int64_t j = 0; j < count; ++j) o[j] = op(x[j], y0);
        } else if (steps[0] == 1 && steps[1] == 0 && steps[2] == 1) {
          const In x0 = *x;
          for (int64_t j = 0; j < count; ++j) o[j] = op(x0, y[j]);
        } else {
          for (int64_t j = 0; j < count; ++j) o[j * steps[0]] = op(x[j * steps[1]], y[j * steps[2]]);
        }
      });
}

}  // namespace distgrad::cpu
