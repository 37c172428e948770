// Tensor: a cheap, shared handle to an n-dimensional view of a Storage.
//
// A Tensor is shape + strides (in elements) + offset (in elements) + dtype over a refcounted
// Storage. Copying a Tensor is shallow: both handles see the same data and metadata. Views
// (untracked::reshape, untracked::transpose, untracked::slice, ...) share the storage with new metadata;
// untracked::clone copies the data.
//
// The Tensor class holds few op methods: core's kernels live in `distgrad::untracked` (core/ops.h)
// and never record a graph. The user-facing ops, differentiable, are built by autograd on top of
// them (autograd/ops.h) and keep their per-tensor state in the opaque `autograd_meta` slot below.
//
//   Tensor x = distgrad::randn({2, 3});
//   Tensor y = distgrad::matmul(x, distgrad::t(x));   // [2, 2] (autograd/ops.h)
//   float first = y.at<float>({0, 0});
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/storage.h"

namespace distgrad {

namespace autograd {
class Node;
}  // namespace autograd

// What to create a tensor as: `zeros({2, 3}, {.dtype = kFloat64, .device = Device::cuda(0)})`.
// `requires_grad` makes the new tensor a leaf that autograd tracks (floating dtypes only; it
// needs the autograd library, see Note [Tensor methods defined by autograd]).
struct TensorOptions {
  DType dtype = kFloat32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

// Base of the per-tensor autograd state; autograd defines what it holds.
class AutogradMetaInterface {
 public:
  virtual ~AutogradMetaInterface() = default;
};

struct TensorImpl {
  Storage storage;
  Shape sizes;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements, from the start of the storage
  DType dtype = kFloat32;
  std::shared_ptr<AutogradMetaInterface> autograd_meta;
};

class Tensor {
 public:
  // An undefined tensor (defined() is false); most ops reject it.
  Tensor() = default;
  // A view of `storage`; checks that the view fits inside it.
  Tensor(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage.device(); }
  const Shape& sizes() const { return impl_->sizes; }
  const Shape& strides() const { return impl_->strides; }
  // Size and stride of one dimension; negative dims count from the end.
  int64_t size(int64_t dim) const {
    const auto ndim = static_cast<int64_t>(impl_->sizes.size());
    return dim >= 0 && dim < ndim ? impl_->sizes[dim] : checked_size(dim);
  }
  int64_t stride(int64_t dim) const {
    const auto ndim = static_cast<int64_t>(impl_->strides.size());
    return dim >= 0 && dim < ndim ? impl_->strides[dim] : checked_stride(dim);
  }
  int64_t offset() const { return impl_->offset; }
  int64_t dim() const { return static_cast<int64_t>(impl_->sizes.size()); }
  int64_t numel() const { return shape_numel(impl_->sizes); }
  size_t element_size() const { return distgrad::element_size(impl_->dtype); }
  // The bytes of its elements, numel() * element_size() (PyTorch's Tensor.nbytes).
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  // True when the elements are laid out row-major without gaps.
  bool is_contiguous() const;
  const Storage& storage() const { return impl_->storage; }
  // Moves the storage into shared memory (PyTorch's share_memory_) for this tensor and every view
  // of it: workers on this host that receive it in a call then view the same memory instead of a
  // copy (Note [Shared tensors] in core/shared_memory.h). Nothing happens when the storage is there
  // already, or on a CUDA device. Returns *this.
  const Tensor& share_memory_() const;
  // Whether the storage is in shared memory.
  bool is_shared() const;

  // Address of the first element (the storage plus the offset); device memory for CUDA tensors.
  void* data_ptr() const;
  // Typed data_ptr(); throws when T does not match dtype().
  template <typename T>
  T* data() const {
    check_dtype(dtype_of<T>(), "data");
    return static_cast<T*>(data_ptr());
  }

  // The single element as T (converted from dtype()); throws unless numel() == 1.
  template <typename T>
  T item() const {
    check_one_element("item");
    T value{};
    read_elements_to_host(&value, dtype_of<T>(), offset(), true);
    return value;
  }

  // The element at `index` (one entry per dimension), converted to T. Copies from the device.
  template <typename T>
  T at(std::initializer_list<int64_t> index) const {
    T value{};
    read_elements_to_host(&value, dtype_of<T>(), element_offset(index), true);
    return value;
  }

  // All elements in row-major order, converted to T. Copies from the device.
  template <typename T>
  std::vector<T> to_vector() const {
    if constexpr (std::is_same_v<T, bool>) {
      std::unique_ptr<bool[]> values(new bool[numel()]);
      read_elements_to_host(values.get(), kBool, 0, false);
      return std::vector<bool>(values.get(), values.get() + numel());
    } else {
      std::vector<T> values(numel());
      read_elements_to_host(values.data(), dtype_of<T>(), 0, false);
      return values;
    }
  }

  // True when both handles are the same tensor (not merely equal values).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  long use_count() const { return impl_.use_count(); }

  AutogradMetaInterface* autograd_meta() const { return impl_->autograd_meta.get(); }
  void set_autograd_meta(std::shared_ptr<AutogradMetaInterface> meta) const { impl_->autograd_meta = std::move(meta); }

  // Note [Tensor methods defined by autograd]
  // The methods below are declared here so that `loss.backward()` reads as in PyTorch, and
  // defined by the autograd library (autograd/tensor_methods.cc): core never calls them, so
  // core builds and links alone; a program that calls them links distgrad::autograd.

  // Leaves: whether gradients are accumulated into grad(); other tensors: whether they were
  // computed from a tensor that requires grad while grad mode was on.
  bool requires_grad() const;
  // Marks a leaf as requiring grad (floating dtypes only); returns *this.
  const Tensor& requires_grad_(bool requires_grad = true) const;
  // True for tensors not produced by a recorded op (every tensor that does not require grad).
  bool is_leaf() const;
  // The gradient accumulated by backward passes (undefined until one reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  // The recorded op that produced this tensor; null for leaves.
  std::shared_ptr<autograd::Node> grad_fn() const;
  // A tensor sharing this one's data, cut from the graph (requires_grad() is false).
  Tensor detach() const;
  // Makes backward passes also store this non-leaf tensor's gradient in grad().
  void retain_grad() const;
  // Computes the gradient of this tensor with respect to the graph leaves and accumulates it
  // into their grad(); `gradient` may be omitted for a one-element tensor. retain_graph
  // defaults to create_graph; `inputs` restricts accumulation to those tensors.
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                const std::vector<Tensor>& inputs = {}) const;
  // Calls `hook(grad)` whenever a gradient for this tensor is computed; a defined return value
  // replaces the gradient. Returns an id for remove_hook().
  int64_t register_hook(std::function<Tensor(const Tensor&)> hook) const;
  void remove_hook(int64_t id) const;
  // Leaves: calls `hook(*this)` after a backward pass accumulated into grad(). Returns an id
  // for remove_hook().
  int64_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  // Differentiable sum and mean of every element (0-dim results).
  Tensor sum() const;
  Tensor mean() const;

  // Throws naming `op` unless the tensor is defined.
  void check_defined(const char* op) const;
  // "float32 tensor of shape [2, 3] on cpu", for error messages.
  std::string describe() const;

 private:
  // size() and stride() for negative or out-of-range dims (which throw).
  int64_t checked_size(int64_t dim) const;
  int64_t checked_stride(int64_t dim) const;
  void check_dtype(DType expected, const char* op) const;
  void check_one_element(const char* op) const;
  int64_t element_offset(std::initializer_list<int64_t> index) const;
  // Copies elements to host memory `out`, converting to `out_dtype`: one element at
  // `offset` (in elements from the storage start) when `single`, else the whole tensor.
  void read_elements_to_host(void* out, DType out_dtype, int64_t offset, bool single) const;

  std::shared_ptr<TensorImpl> impl_;
};

// PyTorch-style printing: "tensor([[1.0000, 2.0000], ...], dtype=float64)".
std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

namespace detail {

// Applies `options.requires_grad` to a tensor that a creation function just made.
Tensor apply_requires_grad(Tensor tensor, const TensorOptions& options);
// Called once by the autograd library when it is linked in (see apply_requires_grad).
void install_requires_grad_setter(void (*setter)(const Tensor&));

}  // namespace detail

}  // namespace distgrad
