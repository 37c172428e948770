#include "core/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/copy.h"
#include "core/views.h"

namespace distgrad {
namespace detail {
namespace {

std::atomic<void (*)(const Tensor&)> requires_grad_setter{nullptr};

}  // namespace

void install_requires_grad_setter(void (*setter)(const Tensor&)) { requires_grad_setter.store(setter); }

Tensor apply_requires_grad(Tensor tensor, const TensorOptions& options) {
  if (!options.requires_grad) return tensor;
  auto* setter = requires_grad_setter.load();
  DISTGRAD_CHECK(setter != nullptr,
                 "requires_grad: tensors that require grad need the autograd library; link distgrad::autograd");
  setter(tensor);
  return tensor;
}

}  // namespace detail

Tensor::Tensor(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype) {
  DISTGRAD_CHECK(storage.defined(), "Tensor: the storage is undefined");
  DISTGRAD_CHECK(sizes.size() == strides.size(), "Tensor: ", sizes.size(), " sizes but ", strides.size(), " strides");
  DISTGRAD_CHECK(offset >= 0, "Tensor: negative offset ", offset);
  int64_t last = offset;  // highest element index the view touches
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    DISTGRAD_CHECK(sizes[i] >= 0, "Tensor: negative size in shape ", shape_str(sizes));
    DISTGRAD_CHECK(strides[i] >= 0, "Tensor: negative stride in strides ", shape_str(strides));
    if (sizes[i] == 0) empty = true;
    last += (sizes[i] - 1) * strides[i];
  }
  const auto needed = static_cast<size_t>(last + 1) * distgrad::element_size(dtype);
  DISTGRAD_CHECK(empty || needed <= storage.nbytes(), "Tensor: a view of shape ", shape_str(sizes), ", strides ",
                 shape_str(strides), " and offset ", offset, " needs ", needed, " bytes but the storage holds ",
                 storage.nbytes());
  impl_ = std::make_shared<TensorImpl>();
  impl_->storage = std::move(storage);
  impl_->sizes = std::move(sizes);
  impl_->strides = std::move(strides);
  impl_->offset = offset;
  impl_->dtype = dtype;
}

int64_t Tensor::checked_size(int64_t dim) const {
  DISTGRAD_CHECK(this->dim() > 0, "size: dimension ", dim, " was requested but the tensor has no dimensions");
  return impl_->sizes[wrap_dim(dim, this->dim(), "size")];
}

int64_t Tensor::checked_stride(int64_t dim) const {
  DISTGRAD_CHECK(this->dim() > 0, "stride: dimension ", dim, " was requested but the tensor has no dimensions");
  return impl_->strides[wrap_dim(dim, this->dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = impl_->sizes.size(); i-- > 0;) {
    if (impl_->sizes[i] == 1) continue;
    if (impl_->sizes[i] == 0) return true;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->sizes[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  return static_cast<char*>(impl_->storage.data()) + impl_->offset * static_cast<int64_t>(element_size());
}

const Tensor& Tensor::share_memory_() const {
  check_defined("share_memory_");
  impl_->storage.move_to_shared_memory();
  return *this;
}

bool Tensor::is_shared() const {
  check_defined("is_shared");
  return impl_->storage.shared_memory() != nullptr;
}

void Tensor::check_defined(const char* op) const {
  DISTGRAD_CHECK(defined(), op, ": expected a defined tensor, found an undefined (default-constructed) one");
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return detail::str_cat(dtype_name(dtype()), " tensor of shape ", shape_str(sizes()), " on ", device().str());
}

void Tensor::check_dtype(DType expected, const char* op) const {
  check_defined(op);
  DISTGRAD_CHECK(dtype() == expected, op, ": expected a ", dtype_name(expected), " tensor, found a ", describe());
}

void Tensor::check_one_element(const char* op) const {
  check_defined(op);
  DISTGRAD_CHECK(numel() == 1, op, ": expected a tensor with one element, found a ", describe());
}

int64_t Tensor::element_offset(std::initializer_list<int64_t> index) const {
  check_defined("at");
  DISTGRAD_CHECK(static_cast<int64_t>(index.size()) == dim(), "at: expected ", dim(), " indices for a ", describe(),
                 ", found ", index.size());
  int64_t offset = impl_->offset;
  int64_t d = 0;
  for (int64_t i : index) {
    DISTGRAD_CHECK(i >= 0 && i < impl_->sizes[d], "at: index ", i, " is out of range for dimension ", d, " of size ",
                   impl_->sizes[d]);
    offset += i * impl_->strides[d];
    ++d;
  }
  return offset;
}

void Tensor::read_elements_to_host(void* out, DType out_dtype, int64_t offset, bool single) const {
  check_defined("read");
  Tensor source = single ? Tensor(impl_->storage, {}, {}, offset, impl_->dtype) : *this;
  source = untracked::to(untracked::to(untracked::contiguous(source), Device::cpu()), out_dtype);
  if (source.numel() == 0) return;  // `out` may be null then, which memcpy does not allow
  std::memcpy(out, source.data_ptr(), source.numel() * distgrad::element_size(out_dtype));
}

namespace {

// Formats every element once to find a common width, then prints nested brackets.
class TensorPrinter {
 public:
  // Half-precision values print as the float32 values they are exactly.
  explicit TensorPrinter(const Tensor& t)
      : host_(untracked::contiguous(
            untracked::to(untracked::to(t, Device::cpu()), is_half(t.dtype()) ? kFloat32 : t.dtype()))),
        device_(t.device()),
        dtype_(t.dtype()) {
    const int64_t n = host_.numel();
    summarize_ = n > kSummarizeAbove;
    dispatch_dtype(host_.dtype(), "print", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* data = host_.data<T>();
      if constexpr (std::is_floating_point_v<T>) {
        bool all_integral = true;
        double largest = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double v = data[i];
          if (std::isfinite(v)) {
            all_integral = all_integral && v == std::floor(v);
            largest = std::max(largest, std::fabs(v));
          }
        }
        scientific_ = largest >= 1e8 || (largest > 0 && largest < 1e-4);
        integral_floats_ = all_integral && !scientific_;
      }
    });
    for (int64_t i = 0; i < n; ++i) width_ = std::max(width_, element(i).size());
  }

  void print(std::ostream& out) {
    out << "tensor(";
    if (host_.dim() == 0) {
      out << element(0);
    } else {
      print_dim(out, 0, 0, 7);
    }
    if (!device_.is_cpu()) out << ", device=" << device_;
    if (dtype_ != kFloat32) out << ", dtype=" << dtype_name(dtype_);
    out << ")";
  }

 private:
  static constexpr int64_t kSummarizeAbove = 1000;
  static constexpr int64_t kEdgeItems = 3;

  std::string element(int64_t index) const {
    std::ostringstream out;
    dispatch_dtype(host_.dtype(), "print", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T value = host_.data<T>()[index];
      if constexpr (std::is_same_v<T, bool>) {
        out << (value ? "True" : "False");
      } else if constexpr (std::is_floating_point_v<T>) {
        if (scientific_) out << std::scientific << std::setprecision(4) << value;
        else if (integral_floats_) out << static_cast<double>(value) << ".";
        else out << std::fixed << std::setprecision(4) << value;
      } else {
        out << value;
      }
    });
    return out.str();
  }

  void print_dim(std::ostream& out, int64_t dim, int64_t base, int indent) {
    const int64_t size = host_.size(dim);
    const int64_t stride = host_.stride(dim);
    out << "[";
    for (int64_t i = 0; i < size; ++i) {
      if (summarize_ && size > 2 * kEdgeItems && i == kEdgeItems) {
        out << "...";
        i = size - kEdgeItems - 1;
        out << (dim + 1 == host_.dim() ? ", " : ",\n" + std::string(indent + 1, ' '));
        continue;
      }
      if (dim + 1 == host_.dim()) {
        const std::string text = element(base + i * stride);
        out << std::string(width_ - text.size(), ' ') << text;
      } else {
        print_dim(out, dim + 1, base + i * stride, indent + 1);
      }
      if (i + 1 < size) {
        out << (dim + 1 == host_.dim() ? ", " : ",\n" + std::string(indent + 1, ' '));
      }
    }
    out << "]";
  }

  Tensor host_;
  Device device_;
  DType dtype_;
  size_t width_ = 0;
  bool summarize_ = false;
  bool scientific_ = false;
  bool integral_floats_ = false;
};

}  // namespace

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  if (!tensor.defined()) return out << "tensor(undefined)";
  TensorPrinter(tensor).print(out);
  return out;
}

}  // namespace distgrad
