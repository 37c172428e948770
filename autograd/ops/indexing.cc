// Differentiable joining and indexing ops (autograd/ops.h).
#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad {

using autograd::BackwardContext;
using autograd::record;
using autograd::TensorList;

namespace {

// `index` (1-D, along `dim`) shaped to broadcast against a tensor of `sizes` and expanded to it.
Tensor index_along(const Tensor& index, int64_t dim, const Shape& sizes) {
  Shape shape(sizes.size(), 1);
  shape[dim] = index.numel();
  return untracked::expand(untracked::reshape(index, shape), sizes);
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor result = untracked::cat(tensors, dim);
  if (!autograd::should_record(tensors)) return result;
  const int64_t d = wrap_dim(dim, tensors.at(0).dim(), "cat");
  Shape lengths;
  for (const Tensor& tensor : tensors) lengths.push_back(tensor.size(d));
  std::vector<Tensor*> outputs{&result};
  record("CatBackward", tensors, outputs, [d, lengths](const BackwardContext& ctx) {
    TensorList grads;
    int64_t offset = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      grads.push_back(ctx.needs(i) ? narrow(ctx.grads[0], d, offset, lengths[i]) : Tensor());
      offset += lengths[i];
    }
    return grads;
  });
  return result;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor result = untracked::stack(tensors, dim);
  if (!autograd::should_record(tensors)) return result;
  const int64_t d = wrap_dim(dim, tensors.at(0).dim() + 1, "stack");
  std::vector<Tensor*> outputs{&result};
  record("StackBackward", tensors, outputs, [d, count = tensors.size()](const BackwardContext& ctx) {
    TensorList grads;
    for (size_t i = 0; i < count; ++i) {
      grads.push_back(ctx.needs(i) ? select(ctx.grads[0], d, static_cast<int64_t>(i)) : Tensor());
    }
    return grads;
  });
  return result;
}

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  Tensor result = untracked::index_select(t, dim, index);
  const int64_t d = t.dim() == 0 ? 0 : wrap_dim(dim, t.dim(), "index_select");
  if (auto node = record("IndexSelectBackward", {&t}, {&result}, [in = t.sizes(), d](const BackwardContext& ctx) {
        const Tensor& g = ctx.grads[0];
        if (in.empty()) return TensorList{reshape(g, in)};
        const Tensor target = zeros(in, {.dtype = g.dtype(), .device = g.device()});
        return TensorList{scatter_add(target, d, index_along(ctx.saved[0], d, g.sizes()), g)};
      })) {
    node->save(index);
  }
  return result;
}

Tensor gather(const Tensor& t, int64_t dim, const Tensor& index) {
  Tensor result = untracked::gather(t, dim, index);
  const int64_t d = t.dim() == 0 ? 0 : wrap_dim(dim, t.dim(), "gather");
  if (auto node = record("GatherBackward", {&t}, {&result}, [in = t.sizes(), d](const BackwardContext& ctx) {
        const Tensor& g = ctx.grads[0];
        const Tensor target = zeros(in, {.dtype = g.dtype(), .device = g.device()});
        return TensorList{scatter_add(target, d, ctx.saved[0], g)};
      })) {
    node->save(index);
  }
  return result;
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor result = untracked::scatter_add(self, dim, index, src);
  if (autograd::should_record({&src})) {
    DISTGRAD_CHECK(src.sizes() == index.sizes(),
                   "scatter_add: the gradient with respect to src is only defined when "
                   "src has index's shape (as in PyTorch); found src of shape ",
                   shape_str(src.sizes()), " and index of shape ", shape_str(index.sizes()));
  }
  const int64_t d = self.dim() == 0 ? 0 : wrap_dim(dim, self.dim(), "scatter_add");
  if (auto node = record("ScatterAddBackward", {&self, &src}, {&result}, [d](const BackwardContext& ctx) {
        const Tensor& g = ctx.grads[0];
        return TensorList{ctx.needs(0) ? g : Tensor(), ctx.needs(1) ? gather(g, d, ctx.saved[0]) : Tensor()};
      })) {
    node->save(index);
  }
  return result;
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, double value) {
  Tensor result = untracked::masked_fill(t, mask, value);
  if (auto node = record("MaskedFillBackward", {&t}, {&result}, [](const BackwardContext& ctx) {
        return TensorList{masked_fill(ctx.grads[0], ctx.saved[0], 0.0)};
      })) {
    node->save(mask);
  }
  return result;
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  Tensor result = untracked::where(condition, a, b);
  if (auto node = record("WhereBackward", {&a, &b}, {&result},
                         [a_sizes = a.sizes(), b_sizes = b.sizes()](const BackwardContext& ctx) {
                           const Tensor &g = ctx.grads[0], &condition = ctx.saved[0];
                           const Tensor zero = zeros_like(g);
                           return TensorList{ctx.needs(0) ? sum_to(where(condition, g, zero), a_sizes) : Tensor(),
                                             ctx.needs(1) ? sum_to(where(condition, zero, g), b_sizes) : Tensor()};
                         })) {
    node->save(condition);
  }
  return result;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype) {
  return untracked::one_hot(indices, num_classes, dtype);
}

}  // namespace distgrad
