// Functions that create new tensors from sizes, ranges or host data.
//
//   Tensor a = distgrad::zeros({2, 3});                               // float32 on the CPU
//   Tensor b = distgrad::arange(6);                                    // int64 0..5
//   Tensor c = distgrad::from_vector<double>({1, 2, 3, 4}, {2, 2});   // float64 2x2
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"

namespace distgrad {

// Uninitialized memory.
Tensor empty(const Shape& sizes, TensorOptions options = {});
Tensor zeros(const Shape& sizes, TensorOptions options = {});
Tensor ones(const Shape& sizes, TensorOptions options = {});
Tensor full(const Shape& sizes, double value, TensorOptions options = {});
// A 0-dim tensor holding `value`.
Tensor scalar_tensor(double value, TensorOptions options = {});

// Same sizes, dtype and device as `like`.
Tensor empty_like(const Tensor& like);
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
Tensor full_like(const Tensor& like, double value);

// [0, end), [start, end) by `step`; int64 unless options say otherwise (as in PyTorch).
Tensor arange(int64_t end, TensorOptions options = {.dtype = kInt64});
Tensor arange(int64_t start, int64_t end, int64_t step = 1, TensorOptions options = {.dtype = kInt64});
// Floating-point range [start, end) by `step`; float32 unless options say otherwise.
Tensor arange(double start, double end, double step, TensorOptions options = {});
// `steps` evenly spaced values from start to end, both included.
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
// n x m matrix with ones on the diagonal (m defaults to n).
Tensor eye(int64_t n, TensorOptions options = {});
Tensor eye(int64_t n, int64_t m, TensorOptions options = {});

// Copies `count` elements of `dtype` from host memory into a new tensor of `sizes` on `device`.
Tensor from_host_data(const void* data, int64_t count, DType dtype, const Shape& sizes, Device device);

// A 1-D tensor holding `values` (dtype from T: float, double, int64_t or bool).
template <typename T>
Tensor from_vector(const std::vector<T>& values, Device device = Device::cpu()) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())}, device);
}

// A tensor of `sizes` holding `values` in row-major order; their count must match.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes, Device device = Device::cpu()) {
  const auto count = static_cast<int64_t>(values.size());
  if constexpr (std::is_same_v<T, bool>) {
    std::unique_ptr<bool[]> copy(new bool[values.size()]);
    for (size_t i = 0; i < values.size(); ++i) copy[i] = values[i];
    return from_host_data(copy.get(), count, kBool, sizes, device);
  } else {
    return from_host_data(values.data(), count, dtype_of<T>(), sizes, device);
  }
}

}  // namespace distgrad
