#include "core/shape.h"

#include <algorithm>

#include "core/error.h"

namespace distgrad {

std::string shape_str(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t size : shape) n *= size;
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t range = std::max<int64_t>(ndim, 1);  // a 0-dim tensor accepts dim 0 and -1
  DISTGRAD_CHECK(dim >= -range && dim < range, op, ": dimension ", dim, " is out of range for a ", ndim,
                 "-D tensor (expected a value in [", -range, ", ", range - 1, "])");
  return dim < 0 ? dim + range : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    const int64_t size_a = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    const int64_t size_b = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    DISTGRAD_CHECK(size_a == size_b || size_a == 1 || size_b == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                   " cannot be broadcast together (dimension ", i, ": ", size_a, " vs ", size_b, ")");
    out[i] = size_a == 1 ? size_b : size_a;
  }
  return out;
}

}  // namespace distgrad
