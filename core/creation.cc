#include "core/creation.h"

#include <cmath>
#include <cstring>

#include "core/copy.h"
#include "core/cuda/backend.h"
#include "core/views.h"

namespace distgrad {
namespace {

// Fills a host vector of `count` values value_at(i) (int64_t or double, so large integers stay
// exact) and returns it as a tensor of `options`.
template <typename ValueAt>
Tensor host_sequence(int64_t count, TensorOptions options, ValueAt value_at) {
  using Value = decltype(value_at(int64_t{0}));
  std::vector<Value> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = value_at(i);
  Tensor host = from_host_data(values.data(), count, dtype_of<Value>(), {count}, Device::cpu());
  return detail::apply_requires_grad(untracked::to(untracked::to(host, options.dtype), options.device), options);
}

}  // namespace

Tensor empty(const Shape& sizes, TensorOptions options) {
  for (int64_t size : sizes) {
    DISTGRAD_CHECK(size >= 0, "empty: expected non-negative sizes, found shape ", shape_str(sizes));
  }
  const auto nbytes = static_cast<size_t>(shape_numel(sizes)) * element_size(options.dtype);
  return detail::apply_requires_grad(
      Tensor(Storage::allocate(nbytes, options.device), sizes, contiguous_strides(sizes), 0, options.dtype), options);
}

Tensor full(const Shape& sizes, double value, TensorOptions options) {
  Tensor out = empty(sizes, options);
  untracked::fill_(out, value);
  return out;
}

Tensor zeros(const Shape& sizes, TensorOptions options) { return full(sizes, 0, options); }
Tensor ones(const Shape& sizes, TensorOptions options) { return full(sizes, 1, options); }
Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

Tensor empty_like(const Tensor& like) {
  like.check_defined("empty_like");
  return empty(like.sizes(), {.dtype = like.dtype(), .device = like.device()});
}
Tensor zeros_like(const Tensor& like) { return untracked::zero_(empty_like(like)); }
Tensor ones_like(const Tensor& like) { return untracked::fill_(empty_like(like), 1); }
Tensor full_like(const Tensor& like, double value) { return untracked::fill_(empty_like(like), value); }

Tensor arange(int64_t end, TensorOptions options) { return arange(0, end, 1, options); }

Tensor arange(int64_t start, int64_t end, int64_t step, TensorOptions options) {
  DISTGRAD_CHECK(step != 0, "arange: step must be non-zero");
  const int64_t span = end - start;
  const int64_t count =
      (span > 0) == (step > 0) && span != 0 ? (std::abs(span) + std::abs(step) - 1) / std::abs(step) : 0;
  return host_sequence(count, options, [&](int64_t i) { return start + i * step; });
}

Tensor arange(double start, double end, double step, TensorOptions options) {
  DISTGRAD_CHECK(step != 0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end),
                 "arange: expected finite start, end and a non-zero step, found ", start, ", ", end, ", ", step);
  const auto count = static_cast<int64_t>(std::max(0.0, std::ceil((end - start) / step)));
  return host_sequence(count, options, [&](int64_t i) { return start + static_cast<double>(i) * step; });
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  DISTGRAD_CHECK(steps >= 0, "linspace: expected a non-negative number of steps, found ", steps);
  const double delta = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0;
  // The second half counts back from `end`, as PyTorch does, so the last value is exact.
  return host_sequence(steps, options, [&](int64_t i) {
    if (steps == 1 || i < steps / 2) return start + delta * static_cast<double>(i);
    return end - delta * static_cast<double>(steps - 1 - i);
  });
}

Tensor eye(int64_t n, TensorOptions options) { return eye(n, n, options); }

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  DISTGRAD_CHECK(n >= 0 && m >= 0, "eye: expected non-negative sizes, found ", n, " x ", m);
  Tensor out = zeros({n, m}, options);
  untracked::fill_(untracked::as_strided(out, {std::min(n, m)}, {m + 1}, 0), 1);
  return out;
}

Tensor from_host_data(const void* data, int64_t count, DType dtype, const Shape& sizes, Device device) {
  DISTGRAD_CHECK(count == shape_numel(sizes), "from_vector: ", count, " values cannot fill shape ", shape_str(sizes),
                 " (", shape_numel(sizes), " elements)");
  Tensor out = empty(sizes, {.dtype = dtype, .device = device});
  const size_t nbytes = static_cast<size_t>(count) * element_size(dtype);
  if (nbytes == 0) return out;
  if (device.is_cpu()) {
    std::memcpy(out.data_ptr(), data, nbytes);
  } else {
    cuda::detail::copy_bytes(out.data_ptr(), device, data, Device::cpu(), nbytes);
  }
  return out;
}

}  // namespace distgrad
