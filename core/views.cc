#include "core/views.h"

#include <algorithm>
#include <optional>

#include "core/copy.h"

namespace distgrad::untracked {
namespace {

Tensor make_view(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype());
}

// Replaces a single -1 in `sizes` so that the product is `numel`.
Shape infer_sizes(const Shape& sizes, int64_t numel, const char* op) {
  Shape out = sizes;
  int64_t known = 1;
  std::optional<size_t> inferred;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      DISTGRAD_CHECK(!inferred, op, ": only one dimension can be -1, found shape ", shape_str(sizes));
      inferred = i;
    } else {
      DISTGRAD_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(sizes));
      known *= out[i];
    }
  }
  if (inferred) {
    DISTGRAD_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(sizes), " is invalid for a tensor of ",
                   numel, " elements");
    out[*inferred] = numel / known;
  }
  DISTGRAD_CHECK(shape_numel(out) == numel, op, ": shape ", shape_str(sizes), " is invalid for a tensor of ", numel,
                 " elements");
  return out;
}

// Strides that view `t`'s elements in `sizes`, if the existing strides allow it (the
// algorithm of PyTorch's computeStride: dims may only be split or merged within chunks that
// are contiguous in memory).
std::optional<Shape> view_strides(const Tensor& t, const Shape& sizes) {
  if (t.numel() == 0 || t.dim() == 0) return contiguous_strides(sizes);
  Shape strides(sizes.size());
  int64_t view_d = static_cast<int64_t>(sizes.size()) - 1;
  int64_t chunk_base_stride = t.strides().back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = t.dim() - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= t.size(tensor_d);
    const bool chunk_ends =
        tensor_d == 0 || (t.size(tensor_d - 1) != 1 && t.stride(tensor_d - 1) != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
      strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = t.stride(tensor_d - 1);
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

}  // namespace

Tensor as_strided(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset) {
  t.check_defined("as_strided");
  return make_view(t, sizes, strides, offset);
}

Tensor view(const Tensor& t, const Shape& sizes) {
  t.check_defined("view");
  const Shape target = infer_sizes(sizes, t.numel(), "view");
  std::optional<Shape> strides = view_strides(t, target);
  DISTGRAD_CHECK(strides.has_value(), "view: a tensor of shape ", shape_str(t.sizes()), " and strides ",
                 shape_str(t.strides()), " cannot be viewed as ", shape_str(target), "; use reshape (which copies)");
  return make_view(t, target, *strides, t.offset());
}

Tensor reshape(const Tensor& t, const Shape& sizes) {
  t.check_defined("reshape");
  const Shape target = infer_sizes(sizes, t.numel(), "reshape");
  if (std::optional<Shape> strides = view_strides(t, target)) return make_view(t, target, *strides, t.offset());
  return view(clone(t), target);
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  t.check_defined("flatten");
  if (t.dim() == 0) return reshape(t, {1});
  const int64_t start = wrap_dim(start_dim, t.dim(), "flatten");
  const int64_t end = wrap_dim(end_dim, t.dim(), "flatten");
  DISTGRAD_CHECK(start <= end, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape sizes(t.sizes().begin(), t.sizes().begin() + start);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= t.size(d);
  sizes.push_back(merged);
  sizes.insert(sizes.end(), t.sizes().begin() + end + 1, t.sizes().end());
  return reshape(t, sizes);
}

Tensor squeeze(const Tensor& t) {
  t.check_defined("squeeze");
  Shape sizes, strides;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 1) continue;
    sizes.push_back(t.size(d));
    strides.push_back(t.stride(d));
  }
  return make_view(t, sizes, strides, t.offset());
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  t.check_defined("squeeze");
  const int64_t d = wrap_dim(dim, t.dim(), "squeeze");  // a 0-dim tensor accepts 0 and -1
  if (t.dim() == 0 || t.size(d) != 1) return t;
  Shape sizes = t.sizes(), strides = t.strides();
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return make_view(t, sizes, strides, t.offset());
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  t.check_defined("unsqueeze");
  const int64_t d = wrap_dim(dim, t.dim() + 1, "unsqueeze");
  Shape sizes = t.sizes(), strides = t.strides();
  const int64_t stride = d < t.dim() ? t.size(d) * t.stride(d) : 1;
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return make_view(t, sizes, strides, t.offset());
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  t.check_defined("transpose");
  const int64_t a = wrap_dim(dim0, t.dim(), "transpose");  // a 0-dim tensor accepts 0 and -1
  const int64_t b = wrap_dim(dim1, t.dim(), "transpose");
  if (t.dim() == 0) return t;
  Shape sizes = t.sizes(), strides = t.strides();
  std::swap(sizes[a], sizes[b]);
  std::swap(strides[a], strides[b]);
  return make_view(t, sizes, strides, t.offset());
}

Tensor permute(const Tensor& t, const Shape& dims) {
  t.check_defined("permute");
  DISTGRAD_CHECK(static_cast<int64_t>(dims.size()) == t.dim(), "permute: expected ", t.dim(),
                 " dims for a tensor of shape ", shape_str(t.sizes()), ", found ", shape_str(dims));
  Shape sizes(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], t.dim(), "permute");
    DISTGRAD_CHECK(!seen[d], "permute: dims ", shape_str(dims), " repeat dimension ", d);
    seen[d] = true;
    sizes[i] = t.size(d);
    strides[i] = t.stride(d);
  }
  return make_view(t, sizes, strides, t.offset());
}

Tensor t(const Tensor& t) {
  t.check_defined("t");
  DISTGRAD_CHECK(t.dim() <= 2, "t: expected a tensor of at most 2 dims, found shape ", shape_str(t.sizes()),
                 " (use transpose or permute)");
  return t.dim() < 2 ? t : transpose(t, 0, 1);
}

Tensor expand(const Tensor& t, const Shape& sizes) {
  t.check_defined("expand");
  DISTGRAD_CHECK(sizes.size() >= static_cast<size_t>(t.dim()), "expand: cannot expand shape ", shape_str(t.sizes()),
                 " to fewer dims ", shape_str(sizes));
  const size_t leading = sizes.size() - t.dim();
  Shape out_sizes(sizes.size()), out_strides(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < leading) {
      DISTGRAD_CHECK(sizes[i] >= 0, "expand: size -1 is not allowed for a new leading dim in ", shape_str(sizes));
      out_sizes[i] = sizes[i];
      out_strides[i] = 0;
      continue;
    }
    const int64_t current = t.size(i - leading);
    const int64_t target = sizes[i] == -1 ? current : sizes[i];
    DISTGRAD_CHECK(target >= 0 && (target == current || current == 1), "expand: cannot expand shape ",
                   shape_str(t.sizes()), " to ", shape_str(sizes), " (dimension ", i, ": ", current, " vs ", target,
                   ")");
    out_sizes[i] = target;
    out_strides[i] = target == current ? t.stride(i - leading) : 0;
  }
  return make_view(t, out_sizes, out_strides, t.offset());
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  t.check_defined("slice");
  DISTGRAD_CHECK(t.dim() > 0, "slice: cannot slice a 0-dim tensor");
  DISTGRAD_CHECK(step > 0, "slice: expected a positive step, found ", step);
  const int64_t d = wrap_dim(dim, t.dim(), "slice");
  const int64_t size = t.size(d);
  auto clamp_bound = [size](int64_t bound) { return std::clamp(bound < 0 ? bound + size : bound, int64_t{0}, size); };
  const int64_t begin = clamp_bound(start);
  const int64_t stop = std::max(begin, clamp_bound(end));
  Shape sizes = t.sizes(), strides = t.strides();
  sizes[d] = (stop - begin + step - 1) / step;
  strides[d] *= step;
  return make_view(t, sizes, strides, t.offset() + (sizes[d] > 0 ? begin * t.stride(d) : 0));
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  t.check_defined("narrow");
  DISTGRAD_CHECK(t.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "narrow");
  const int64_t size = t.size(d);
  const int64_t begin = start < 0 ? start + size : start;
  DISTGRAD_CHECK(begin >= 0 && length >= 0 && begin + length <= size, "narrow: start ", start, " and length ", length,
                 " do not fit dimension ", d, " of size ", size);
  return slice(t, d, begin, begin + length);
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  t.check_defined("select");
  DISTGRAD_CHECK(t.dim() > 0, "select: cannot select from a 0-dim tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "select");
  const int64_t size = t.size(d);
  DISTGRAD_CHECK(index >= -size && index < size, "select: index ", index, " is out of range for dimension ", d,
                 " of size ", size);
  const int64_t i = index < 0 ? index + size : index;
  Shape sizes = t.sizes(), strides = t.strides();
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return make_view(t, sizes, strides, t.offset() + i * t.stride(d));
}

std::vector<Tensor> unbind(const Tensor& t, int64_t dim) {
  t.check_defined("unbind");
  DISTGRAD_CHECK(t.dim() > 0, "unbind: expected a tensor with at least one dimension, found a 0-dim tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "unbind");
  std::vector<Tensor> pieces;
  for (int64_t i = 0; i < t.size(d); ++i) pieces.push_back(select(t, d, i));
  return pieces;
}

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim) {
  t.check_defined("split");
  DISTGRAD_CHECK(t.dim() > 0, "split: expected a tensor with at least one dimension, found a 0-dim tensor");
  DISTGRAD_CHECK(split_size > 0, "split: expected a positive split_size, found ", split_size);
  const int64_t d = wrap_dim(dim, t.dim(), "split");
  std::vector<Tensor> pieces;
  for (int64_t start = 0; start < t.size(d); start += split_size) {
    pieces.push_back(narrow(t, d, start, std::min(split_size, t.size(d) - start)));
  }
  if (pieces.empty()) pieces.push_back(t);
  return pieces;
}

std::vector<Tensor> split_with_sizes(const Tensor& t, const Shape& split_sizes, int64_t dim) {
  t.check_defined("split_with_sizes");
  DISTGRAD_CHECK(t.dim() > 0, "split_with_sizes: expected a tensor with at least one dimension, found a 0-dim tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t size : split_sizes) {
    DISTGRAD_CHECK(size >= 0, "split_with_sizes: negative size in ", shape_str(split_sizes));
    total += size;
  }
  DISTGRAD_CHECK(total == t.size(d), "split_with_sizes: sizes ", shape_str(split_sizes), " add up to ", total,
                 " but dimension ", d, " has size ", t.size(d));
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t size : split_sizes) {
    pieces.push_back(narrow(t, d, start, size));
    start += size;
  }
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  t.check_defined("chunk");
  DISTGRAD_CHECK(t.dim() > 0, "chunk: expected a tensor with at least one dimension, found a 0-dim tensor");
  DISTGRAD_CHECK(chunks > 0, "chunk: expected a positive number of chunks, found ", chunks);
  const int64_t d = wrap_dim(dim, t.dim(), "chunk");
  return split(t, std::max<int64_t>(1, (t.size(d) + chunks - 1) / chunks), d);
}

}  // namespace distgrad::untracked
