#include "core/indexing.h"

#include "core/copy.h"
#include "core/creation.h"
#include "core/kernels.h"
#include "core/op_checks.h"
#include "core/reduction.h"
#include "core/views.h"

namespace distgrad::untracked {
namespace {

void check_index_tensor(const char* op, const Tensor& t, const Tensor& index) {
  detail::check_same_device(op, t, index);
  DISTGRAD_CHECK(index.dtype() == kInt64, op, ": expected an int64 index tensor, found a ", index.describe());
}

// Every index lies in [0, size); the message names the first offending value.
void check_index_range(const char* op, const Tensor& index, int64_t size, int64_t dim) {
  if (index.numel() == 0) return;
  const int64_t lowest = min(index).item<int64_t>();
  const int64_t highest = max(index).item<int64_t>();
  DISTGRAD_CHECK(lowest >= 0 && highest < size, op, ": index ", lowest < 0 ? lowest : highest,
                 " is out of range for dimension ", dim, " of size ", size, " (expected indices in [0, ", size, "))");
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  DISTGRAD_CHECK(!tensors.empty(), "cat: expected at least one tensor");
  const Tensor& first = tensors.front();
  first.check_defined("cat");
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  DISTGRAD_CHECK(first.dim() > 0, "cat: zero-dimensional tensors cannot be concatenated (use stack)");
  Shape sizes = first.sizes();
  sizes[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_same_dtype_and_device("cat", first, t);
    bool matches = t.dim() == first.dim();
    for (int64_t k = 0; matches && k < t.dim(); ++k) matches = k == d || t.size(k) == first.size(k);
    DISTGRAD_CHECK(matches, "cat: tensor ", i, " has shape ", shape_str(t.sizes()), " but tensor 0 has shape ",
                   shape_str(first.sizes()), "; all sizes must match except in dimension ", d);
    sizes[d] += t.size(d);
  }
  Tensor out = empty(sizes, {.dtype = first.dtype(), .device = first.device()});
  const kernels::DeviceKernels& device_kernels = kernels::kernels_for(first.device());
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    if (t.numel() > 0) device_kernels.copy(narrow(out, d, start, t.size(d)), t);
    start += t.size(d);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  DISTGRAD_CHECK(!tensors.empty(), "stack: expected at least one tensor");
  tensors.front().check_defined("stack");
  const int64_t d = wrap_dim(dim, tensors.front().dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    tensors[i].check_defined("stack");
    DISTGRAD_CHECK(tensors[i].sizes() == tensors.front().sizes(), "stack: expected tensors of one shape, tensor ", i,
                   " has shape ", shape_str(tensors[i].sizes()), " but tensor 0 has shape ",
                   shape_str(tensors.front().sizes()));
    expanded.push_back(unsqueeze(tensors[i], d));
  }
  return cat(expanded, d);
}

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  check_index_tensor("index_select", t, index);
  DISTGRAD_CHECK(index.dim() <= 1, "index_select: expected a 1-D index, found shape ", shape_str(index.sizes()));
  const int64_t d = wrap_dim(dim, t.dim(), "index_select");
  const int64_t dim_size = t.dim() == 0 ? 1 : t.size(d);
  check_index_range("index_select", index, dim_size, d);
  if (is_half(t.dtype())) return detail::via_float32(t, [&](const Tensor& f) { return index_select(f, dim, index); });
  Shape sizes = t.sizes();
  if (t.dim() > 0) sizes[d] = index.numel();
  Tensor out = empty(sizes, {.dtype = t.dtype(), .device = t.device()});
  if (out.numel() == 0) return out;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= t.size(k);
  for (int64_t k = d + 1; k < t.dim(); ++k) inner *= t.size(k);
  kernels::kernels_for(t.device()).index_select(out, contiguous(t), contiguous(index), outer, dim_size, inner);
  return out;
}

Tensor gather(const Tensor& t, int64_t dim, const Tensor& index) {
  check_index_tensor("gather", t, index);
  const int64_t d = wrap_dim(dim, t.dim(), "gather");
  DISTGRAD_CHECK(index.dim() == t.dim(), "gather: index has ", index.dim(), " dims but the input has ", t.dim(),
                 " (input shape ", shape_str(t.sizes()), ", index shape ", shape_str(index.sizes()), ")");
  for (int64_t k = 0; k < t.dim(); ++k) {
    DISTGRAD_CHECK(k == d || index.size(k) <= t.size(k), "gather: index shape ", shape_str(index.sizes()),
                   " exceeds input shape ", shape_str(t.sizes()), " in dimension ", k);
  }
  check_index_range("gather", index, t.dim() == 0 ? 1 : t.size(d), d);
  if (is_half(t.dtype())) return detail::via_float32(t, [&](const Tensor& f) { return gather(f, dim, index); });
  Tensor out = empty(index.sizes(), {.dtype = t.dtype(), .device = t.device()});
  if (out.numel() == 0) return out;
  kernels::kernels_for(t.device()).gather(out, contiguous(t), contiguous(index), d);
  return out;
}

const Tensor& scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_writable("scatter_add_", self);
  check_index_tensor("scatter_add_", self, index);
  detail::check_same_dtype_and_device("scatter_add_", self, src);
  DISTGRAD_CHECK(self.dtype() != kBool, "scatter_add_: expected a numeric tensor, found a ", self.describe());
  const int64_t d = wrap_dim(dim, self.dim(), "scatter_add_");
  DISTGRAD_CHECK(index.dim() == self.dim() && src.dim() == self.dim(), "scatter_add_: self, index and src must have ",
                 "the same number of dims, found shapes ", shape_str(self.sizes()), ", ", shape_str(index.sizes()),
                 " and ", shape_str(src.sizes()));
  for (int64_t k = 0; k < self.dim(); ++k) {
    DISTGRAD_CHECK(index.size(k) <= src.size(k) && (k == d || index.size(k) <= self.size(k)),
                   "scatter_add_: index shape ", shape_str(index.sizes()), " exceeds src shape ",
                   shape_str(src.sizes()), " or self shape ", shape_str(self.sizes()), " in dimension ", k);
  }
  check_index_range("scatter_add_", index, self.dim() == 0 ? 1 : self.size(d), d);
  if (index.numel() == 0) return self;
  if (is_half(self.dtype())) {
    return copy_(self, scatter_add(detail::widened(self), dim, index, detail::widened(src)));
  }
  // The kernel reads index and src at other positions than it writes, so each is copied when it
  // shares memory with self, even as the very same view (unlike detail::unaliased_source).
  auto unshared = [&](const Tensor& t) {
    return t.storage().data() == self.storage().data() ? clone(t) : contiguous(t);
  };
  const Tensor target = contiguous(self);
  kernels::kernels_for(self.device()).scatter_add(target, unshared(index), unshared(src), d);
  if (!target.is_same(self)) kernels::kernels_for(self.device()).copy(self, target);
  self.storage().bump_version();
  return self;
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  self.check_defined("scatter_add");
  Tensor out = clone(self);
  scatter_add_(out, dim, index, src);
  return out;
}

const Tensor& masked_fill_(const Tensor& self, const Tensor& mask, double value) {
  detail::check_writable("masked_fill_", self);
  detail::check_same_device("masked_fill_", self, mask);
  DISTGRAD_CHECK(mask.dtype() == kBool, "masked_fill_: expected a bool mask, found a ", mask.describe());
  const Shape sizes = broadcast_shapes(self.sizes(), mask.sizes(), "masked_fill_");
  DISTGRAD_CHECK(sizes == self.sizes(), "masked_fill_: a mask of shape ", shape_str(mask.sizes()),
                 " does not broadcast to the target shape ", shape_str(self.sizes()));
  if (is_half(self.dtype())) return copy_(self, masked_fill(detail::widened(self), mask, value));
  const Tensor fill_value = expand(scalar_tensor(value, {.dtype = self.dtype(), .device = self.device()}), sizes);
  kernels::kernels_for(self.device()).where(self, detail::expand_to(mask, sizes), fill_value, self);
  self.storage().bump_version();
  return self;
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, double value) {
  t.check_defined("masked_fill");
  mask.check_defined("masked_fill");
  const Shape sizes = broadcast_shapes(t.sizes(), mask.sizes(), "masked_fill");
  Tensor out = contiguous(clone(detail::expand_to(t, sizes)));
  masked_fill_(out, mask, value);
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  detail::check_same_device("where", condition, a);
  const DType dtype = detail::common_dtype("where", a, b);
  DISTGRAD_CHECK(condition.dtype() == kBool, "where: expected a bool condition, found a ", condition.describe());
  if (a.dtype() != dtype || b.dtype() != dtype) return where(condition, to(a, dtype), to(b, dtype));
  if (is_half(dtype)) return to(where(condition, detail::widened(a), detail::widened(b)), dtype);
  const Shape sizes = broadcast_shapes(condition.sizes(), broadcast_shapes(a.sizes(), b.sizes(), "where"), "where");
  Tensor out = empty(sizes, {.dtype = a.dtype(), .device = a.device()});
  kernels::kernels_for(a.device())
      .where(out, detail::expand_to(condition, sizes), detail::expand_to(a, sizes), detail::expand_to(b, sizes));
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype) {
  indices.check_defined("one_hot");
  DISTGRAD_CHECK(indices.dtype() == kInt64, "one_hot: expected int64 class indices, found a ", indices.describe());
  if (num_classes == -1) num_classes = indices.numel() == 0 ? 0 : max(indices).item<int64_t>() + 1;
  DISTGRAD_CHECK(num_classes >= 0, "one_hot: expected num_classes >= 0 or -1, found ", num_classes);
  check_index_range("one_hot", indices, num_classes, -1);
  Shape sizes = indices.sizes();
  sizes.push_back(num_classes);
  Tensor out = zeros(sizes, {.dtype = dtype, .device = indices.device()});
  Shape column = indices.sizes();
  column.push_back(1);
  scatter_add_(out, -1, reshape(indices, column), ones(column, {.dtype = dtype, .device = indices.device()}));
  return out;
}

}  // namespace distgrad::untracked
