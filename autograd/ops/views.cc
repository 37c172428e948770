// Differentiable views, copies and conversions (autograd/ops.h).
#include <numeric>

#include "autograd/autograd_meta.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad {

using autograd::BackwardContext;
using autograd::record;
using autograd::TensorList;

namespace {

// Records a view op of `t` whose gradient is `formula(grad)`; marks the output as a view when
// it shares t's storage.
template <typename Formula>
Tensor record_view(const char* name, Tensor result, const Tensor& t, Formula formula) {
  const bool shares_storage = result.storage().data() == t.storage().data();
  if (record(name, {&t}, {&result},
             [formula](const BackwardContext& ctx) { return TensorList{formula(ctx.grads[0])}; }) &&
      shares_storage) {
    autograd::mark_views({&result});
  }
  return result;
}

// A zero tensor of `sizes` whose part `view_of(zeros)` holds `grad`: the gradient of an op that
// picks part of its input. Recorded too; its own gradient is that part of the incoming one.
template <typename ViewOf>
Tensor embed_in_zeros(const Tensor& grad, const Shape& sizes, ViewOf view_of) {
  Tensor result = zeros(sizes, {.dtype = grad.dtype(), .device = grad.device()});
  {
    autograd::NoGradGuard no_grad;
    untracked::copy_(view_of(result), grad);
  }
  record("EmbedBackward", {&grad}, {&result},
         [view_of](const BackwardContext& ctx) { return TensorList{view_of(ctx.grads[0])}; });
  return result;
}

Shape inverse_permutation(const Shape& dims) {
  Shape inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[dims[i] < 0 ? dims[i] + dims.size() : dims[i]] = i;
  return inverse;
}

// The gradient of ops that split t along `dim` into `pieces`: the pieces' gradients joined
// back, zeros standing in for those that received none.
Tensor join_piece_grads(const BackwardContext& ctx, int64_t dim) {
  TensorList grads;
  grads.reserve(ctx.grads.size());
  for (size_t i = 0; i < ctx.grads.size(); ++i) grads.push_back(ctx.grad_or_zeros(i));
  return cat(grads, dim);
}

std::vector<Tensor> record_pieces(const char* name, std::vector<Tensor> pieces, const Tensor& t, int64_t dim) {
  std::vector<Tensor*> outputs;
  for (Tensor& piece : pieces) outputs.push_back(&piece);
  if (record(name, std::vector<Tensor>{t}, outputs,
             [dim](const BackwardContext& ctx) { return TensorList{join_piece_grads(ctx, dim)}; })) {
    for (const Tensor& piece : pieces) autograd::mark_views({&piece});
  }
  return pieces;
}

}  // namespace

Tensor clone(const Tensor& t) {
  Tensor result = untracked::clone(t);
  record("CloneBackward", {&t}, {&result}, [](const BackwardContext& ctx) { return TensorList{ctx.grads[0]}; });
  return result;
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor result = untracked::contiguous(t);
  record("ContiguousBackward", {&t}, {&result}, [](const BackwardContext& ctx) { return TensorList{ctx.grads[0]}; });
  return result;
}

Tensor to(const Tensor& t, Device device) {
  t.check_defined("to");
  if (t.device() == device) return t;
  Tensor result = untracked::to(t, device);
  record("ToDeviceBackward", {&t}, {&result},
         [source = t.device()](const BackwardContext& ctx) { return TensorList{to(ctx.grads[0], source)}; });
  return result;
}

Tensor to(const Tensor& t, DType dtype) {
  t.check_defined("to");
  if (t.dtype() == dtype) return t;
  Tensor result = untracked::to(t, dtype);
  if (is_floating(t.dtype()) && is_floating(dtype)) {
    record("ToDtypeBackward", {&t}, {&result},
           [source = t.dtype()](const BackwardContext& ctx) { return TensorList{to(ctx.grads[0], source)}; });
  }
  return result;
}

Tensor detach(const Tensor& t) {
  t.check_defined("detach");
  return autograd::alias_without_history(t);
}

Tensor view(const Tensor& t, const Shape& sizes) {
  return record_view("ViewBackward", untracked::view(t, sizes), t,
                     [in = t.sizes()](const Tensor& g) { return reshape(g, in); });
}

Tensor reshape(const Tensor& t, const Shape& sizes) {
  return record_view("ReshapeBackward", untracked::reshape(t, sizes), t,
                     [in = t.sizes()](const Tensor& g) { return reshape(g, in); });
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  return record_view("FlattenBackward", untracked::flatten(t, start_dim, end_dim), t,
                     [in = t.sizes()](const Tensor& g) { return reshape(g, in); });
}

Tensor squeeze(const Tensor& t) {
  return record_view("SqueezeBackward", untracked::squeeze(t), t,
                     [in = t.sizes()](const Tensor& g) { return reshape(g, in); });
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  return record_view("SqueezeBackward", untracked::squeeze(t, dim), t,
                     [in = t.sizes()](const Tensor& g) { return reshape(g, in); });
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  return record_view("UnsqueezeBackward", untracked::unsqueeze(t, dim), t,
                     [in = t.sizes()](const Tensor& g) { return reshape(g, in); });
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  return record_view("TransposeBackward", untracked::transpose(t, dim0, dim1), t,
                     [dim0, dim1](const Tensor& g) { return transpose(g, dim0, dim1); });
}

Tensor permute(const Tensor& t, const Shape& dims) {
  return record_view("PermuteBackward", untracked::permute(t, dims), t,
                     [inverse = inverse_permutation(dims)](const Tensor& g) { return permute(g, inverse); });
}

Tensor t(const Tensor& t) {
  return record_view("TBackward", untracked::t(t), t, [](const Tensor& g) { return distgrad::t(g); });
}

Tensor expand(const Tensor& t, const Shape& sizes) {
  return record_view("ExpandBackward", untracked::expand(t, sizes), t,
                     [in = t.sizes()](const Tensor& g) { return sum_to(g, in); });
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return record_view("SliceBackward", untracked::slice(t, dim, start, end, step), t,
                     [in = t.sizes(), dim, start, end, step](const Tensor& g) {
                       return embed_in_zeros(g, in, [=](const Tensor& z) { return slice(z, dim, start, end, step); });
                     });
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  return record_view("NarrowBackward", untracked::narrow(t, dim, start, length), t,
                     [in = t.sizes(), dim, start, length](const Tensor& g) {
                       return embed_in_zeros(g, in, [=](const Tensor& z) { return narrow(z, dim, start, length); });
                     });
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  return record_view("SelectBackward", untracked::select(t, dim, index), t,
                     [in = t.sizes(), dim, index](const Tensor& g) {
                       return embed_in_zeros(g, in, [=](const Tensor& z) { return select(z, dim, index); });
                     });
}

std::vector<Tensor> unbind(const Tensor& t, int64_t dim) {
  std::vector<Tensor> pieces = untracked::unbind(t, dim);
  std::vector<Tensor*> outputs;
  for (Tensor& piece : pieces) outputs.push_back(&piece);
  if (record("UnbindBackward", std::vector<Tensor>{t}, outputs, [dim](const BackwardContext& ctx) {
        TensorList grads;
        for (size_t i = 0; i < ctx.grads.size(); ++i) grads.push_back(ctx.grad_or_zeros(i));
        return TensorList{stack(grads, dim)};
      })) {
    for (const Tensor& piece : pieces) autograd::mark_views({&piece});
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim) {
  return record_pieces("SplitBackward", untracked::split(t, split_size, dim), t, dim);
}

std::vector<Tensor> split_with_sizes(const Tensor& t, const Shape& split_sizes, int64_t dim) {
  return record_pieces("SplitWithSizesBackward", untracked::split_with_sizes(t, split_sizes, dim), t, dim);
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  return record_pieces("ChunkBackward", untracked::chunk(t, chunks, dim), t, dim);
}

Tensor sum_to(const Tensor& t, const Shape& sizes) {
  t.check_defined("sum_to");
  if (t.sizes() == sizes) return t;
  const Shape dims = untracked::sum_to_dims(t.sizes(), sizes, "sum_to");
  const Tensor summed = dims.empty() ? t : sum(t, dims, /*keepdim=*/true);
  return reshape(summed, sizes);
}

}  // namespace distgrad
