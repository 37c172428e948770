// The CUDA backend's DeviceKernels (core/kernels.h, Note [Primitive kernels]).
//
// Every primitive makes the tensors' device current and queues its kernels on that device's
// current stream (Note [One stream per device] in core/cuda/runtime.h); the host never waits.
// Elementwise primitives share one launcher with a contiguous fast path and a strided path;
// each op is its own kernel (the op is a template argument, see dispatch_op). Reductions give
// each tile of outputs one thread block, split further when the outputs are few (Note [Split
// reductions]); gemm calls cuBLAS. The scalar semantics (NaN in max/min, integer pow, float32
// sums in float64, ...) follow the CPU twin in core/cpu/cpu_kernels.cc, which the CUDA tests
// compare against. Batch normalisation's fused kernels are in core/cuda/batch_norm.cu.
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cuda/std/limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/cuda/backend.h"
#include "core/cuda/batch_norm.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/kernels.h"

namespace distgrad::cuda::detail {
namespace {

using distgrad::kernels::BinaryOp;
using distgrad::kernels::ClampBounds;
using distgrad::kernels::DeviceKernels;
using distgrad::kernels::GemmArgs;
using distgrad::kernels::ReduceOp;
using distgrad::kernels::UnaryOp;
using distgrad::kernels::Window2d;

// Grids stop growing here; every kernel loops over the elements left (grid-stride loops).
constexpr int64_t kMaxBlocks = int64_t{1} << 20;
// The most dims a strided or indexed kernel takes, after merging contiguous dims.
constexpr int kMaxDims = 12;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t blocks_for(int64_t work_items) { return std::min(ceil_div(work_items, kThreadsPerBlock), kMaxBlocks); }

__device__ int64_t first_work_item() { return int64_t{blockIdx.x} * blockDim.x + threadIdx.x; }

__device__ int64_t work_item_stride() { return int64_t{gridDim.x} * blockDim.x; }

template <typename T>
__device__ bool is_nan(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    return value != value;
  } else {
    return false;
  }
}

void check_tensor(const Tensor& tensor, DType expected_dtype, Device device, const char* op, const char* role) {
  DISTGRAD_CHECK(tensor.dtype() == expected_dtype && tensor.device() == device, op, ": expected ", role, " to be a ",
                 dtype_name(expected_dtype), " tensor on ", device.str(), ", found a ", tensor.describe());
}

// Calls fn(std::integral_constant<E, v>{}) for the one v among kValues equal to `value`. This
// turns a runtime op into a template argument, so that each op compiles to its own kernel.
template <auto... kValues, typename E, typename Fn>
void dispatch_op(E value, const char* op_name, Fn&& fn) {
  const bool found = ((value == kValues && (fn(std::integral_constant<E, kValues>{}), true)) || ...);
  DISTGRAD_CHECK(found, op_name, ": unknown op ", static_cast<int>(value));
}

// ---------------------------------------------------------------------------------------------
// Elementwise launcher

// Maps a linear index over a shape to one element offset per operand. Dims are stored
// innermost first, so that the device loop indexes the arrays with constants once unrolled.
template <size_t kOperands>
struct StridedIndexer {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kOperands][kMaxDims] = {};

  __device__ void offsets(int64_t linear, int64_t (&result)[kOperands]) const {
#pragma unroll
    for (size_t k = 0; k < kOperands; ++k) {
      result[k] = 0;
    }
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) {
        break;
      }
      const int64_t coordinate = linear % sizes[d];
      linear /= sizes[d];
#pragma unroll
      for (size_t k = 0; k < kOperands; ++k) {
        result[k] += coordinate * strides[k][d];
      }
    }
  }
};

// Drops size-1 dims and merges adjacent dims that are contiguous in every operand (as the CPU's
// StridedLoop does), so that most tensors need few dims; throws above kMaxDims.
template <size_t kOperands>
StridedIndexer<kOperands> make_strided_indexer(const char* op, const Shape& sizes,
                                               const std::array<const Tensor*, kOperands>& operands) {
  int64_t merged_sizes[kMaxDims];
  int64_t merged_strides[kOperands][kMaxDims];
  int ndim = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) {
      continue;
    }
    bool continues_previous = ndim > 0;
    for (size_t k = 0; k < kOperands && continues_previous; ++k) {
      continues_previous = merged_strides[k][ndim - 1] == operands[k]->strides()[d] * sizes[d];
    }
    if (continues_previous) {
      merged_sizes[ndim - 1] *= sizes[d];
      for (size_t k = 0; k < kOperands; ++k) {
        merged_strides[k][ndim - 1] = operands[k]->strides()[d];
      }
      continue;
    }
    DISTGRAD_CHECK(ndim < kMaxDims, op, ": CUDA kernels take at most ", kMaxDims,
                   " dims after merging contiguous ones, found more for shape ", shape_str(sizes));
    merged_sizes[ndim] = sizes[d];
    for (size_t k = 0; k < kOperands; ++k) {
      merged_strides[k][ndim] = operands[k]->strides()[d];
    }
    ++ndim;
  }
  StridedIndexer<kOperands> indexer;
  indexer.ndim = ndim;
  for (int d = 0; d < ndim; ++d) {
    indexer.sizes[d] = merged_sizes[ndim - 1 - d];
    for (size_t k = 0; k < kOperands; ++k) {
      indexer.strides[k][d] = merged_strides[k][ndim - 1 - d];
    }
  }
  return indexer;
}

// Elements each thread of the contiguous kernel handles per step, loaded and stored as one
// aligned vector per operand (16-byte accesses for float32), as long as every pointer is aligned.
constexpr int kVectorWidth = 4;

template <typename T>
struct alignas(sizeof(T) * kVectorWidth) Vector {
  T elements[kVectorWidth];
};

template <typename T>
bool is_vector_aligned(const T* data) {
  return reinterpret_cast<uintptr_t>(data) % sizeof(Vector<T>) == 0;
}

template <typename Out, typename Fn, typename... In>
__global__ void elementwise_contiguous_kernel(int64_t numel, Fn fn, Out* out, const In*... in) {
  for (int64_t i = first_work_item(); i < numel; i += work_item_stride()) {
    out[i] = fn(in[i]...);
  }
}

// The contiguous kernel over whole vectors; the caller runs the scalar kernel on the tail.
template <typename Out, typename Fn, typename... In>
__global__ void elementwise_vectorized_kernel(int64_t vectors, Fn fn, Vector<Out>* out, const Vector<In>*... in) {
  for (int64_t v = first_work_item(); v < vectors; v += work_item_stride()) {
    const auto inputs = std::make_tuple(in[v]...);
    Vector<Out> result;
#pragma unroll
    for (int k = 0; k < kVectorWidth; ++k) {
      result.elements[k] = std::apply([&](const auto&... vector) { return fn(vector.elements[k]...); }, inputs);
    }
    out[v] = result;
  }
}

// fn(in[offsets[1]], in[offsets[2]], ...): operand 0 is the output.
template <typename Fn, size_t kOperands, size_t... kInputs, typename... In>
__device__ auto call_at_offsets(const Fn& fn, const int64_t (&offsets)[kOperands], std::index_sequence<kInputs...>,
                                const In*... in) {
  return fn(in[offsets[kInputs + 1]]...);
}

template <typename Out, typename Fn, typename... In>
__global__ void elementwise_strided_kernel(int64_t numel, StridedIndexer<1 + sizeof...(In)> indexer, Fn fn, Out* out,
                                           const In*... in) {
  for (int64_t i = first_work_item(); i < numel; i += work_item_stride()) {
    int64_t offsets[1 + sizeof...(In)];
    indexer.offsets(i, offsets);
    out[offsets[0]] = call_at_offsets(fn, offsets, std::index_sequence_for<In...>{}, in...);
  }
}

// out[i] = fn(inputs[0][i], inputs[1][i], ...) over tensors of out's shape, read as the C++
// types Out and In...; a contiguous fast path when every operand is contiguous.
template <typename Out, typename... In, typename Fn>
void launch_elementwise(const char* op, const Tensor& out, const Fn& fn,
                        const std::array<const Tensor*, sizeof...(In)>& inputs) {
  constexpr std::array<DType, sizeof...(In)> kInputDtypes = {dtype_of<In>()...};
  check_tensor(out, dtype_of<Out>(), out.device(), op, "the output");
  for (size_t k = 0; k < inputs.size(); ++k) {
    check_tensor(*inputs[k], kInputDtypes[k], out.device(), op, "an input");
    DISTGRAD_CHECK(inputs[k]->sizes() == out.sizes(), op, ": expected an input of shape ", shape_str(out.sizes()),
                   ", found ", shape_str(inputs[k]->sizes()));
  }
  const int64_t numel = out.numel();
  if (numel == 0) {
    return;
  }
  const DeviceLaunch launch(out.device());
  Out* out_data = static_cast<Out*>(out.data_ptr());
  const bool contiguous = out.is_contiguous() &&
                          std::all_of(inputs.begin(), inputs.end(), [](const Tensor* t) { return t->is_contiguous(); });
  auto launch_with_inputs = [&]<size_t... kInputs>(std::index_sequence<kInputs...>) {
    const bool aligned =
        is_vector_aligned(out_data) && (is_vector_aligned(static_cast<const In*>(inputs[kInputs]->data_ptr())) && ...);
    if (contiguous && aligned && numel >= kVectorWidth) {
      const int64_t vectors = numel / kVectorWidth, done = vectors * kVectorWidth;
      elementwise_vectorized_kernel<Out, Fn, In...><<<blocks_for(vectors), kThreadsPerBlock, 0, launch.stream()>>>(
          vectors, fn, reinterpret_cast<Vector<Out>*>(out_data),
          reinterpret_cast<const Vector<In>*>(inputs[kInputs]->data_ptr())...);
      if (done < numel) {
        elementwise_contiguous_kernel<Out, Fn, In...><<<1, kThreadsPerBlock, 0, launch.stream()>>>(
            numel - done, fn, out_data + done, static_cast<const In*>(inputs[kInputs]->data_ptr()) + done...);
      }
    } else if (contiguous) {
      elementwise_contiguous_kernel<Out, Fn, In...><<<blocks_for(numel), kThreadsPerBlock, 0, launch.stream()>>>(
          numel, fn, out_data, static_cast<const In*>(inputs[kInputs]->data_ptr())...);
    } else {
      const auto indexer = make_strided_indexer<1 + sizeof...(In)>(op, out.sizes(), {&out, inputs[kInputs]...});
      elementwise_strided_kernel<Out, Fn, In...><<<blocks_for(numel), kThreadsPerBlock, 0, launch.stream()>>>(
          numel, indexer, fn, out_data, static_cast<const In*>(inputs[kInputs]->data_ptr())...);
    }
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  };
  launch_with_inputs(std::index_sequence_for<In...>{});
}

// ---------------------------------------------------------------------------------------------
// fill, copy, where

template <typename T>
struct Constant {
  T value;
  __device__ T operator()() const { return value; }
};

template <typename Out, typename In>
struct Convert {
  __device__ Out operator()(In x) const { return static_cast<Out>(x); }
};

template <typename T>
struct Select {
  __device__ T operator()(bool condition, T a, T b) const { return condition ? a : b; }
};

void fill(const Tensor& out, double value) {
  dispatch_storage_dtype(out.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise<T>("fill", out, Constant<T>{static_cast<T>(value)}, {});
  });
}

void copy(const Tensor& out, const Tensor& in) {
  if (out.dtype() == in.dtype() && out.is_contiguous() && in.is_contiguous() && out.sizes() == in.sizes() &&
      in.device() == out.device()) {
    const size_t nbytes = out.nbytes();
    if (nbytes == 0) {
      return;
    }
    const DeviceLaunch launch(out.device());
    DISTGRAD_CUDA_CHECK(
        cudaMemcpyAsync(out.data_ptr(), in.data_ptr(), nbytes, cudaMemcpyDeviceToDevice, launch.stream()));
    return;
  }
  dispatch_storage_dtype(out.dtype(), "copy", [&](auto out_tag) {
    using Out = typename decltype(out_tag)::type;
    dispatch_storage_dtype(in.dtype(), "copy", [&](auto in_tag) {
      using In = typename decltype(in_tag)::type;
      launch_elementwise<Out, In>("copy", out, Convert<Out, In>{}, {&in});
    });
  });
}

void where(const Tensor& out, const Tensor& condition, const Tensor& a, const Tensor& b) {
  dispatch_dtype(out.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise<T, bool, T, T>("where", out, Select<T>{}, {&condition, &a, &b});
  });
}

// ---------------------------------------------------------------------------------------------
// unary

template <UnaryOp kOp, typename T>
constexpr bool unary_defined() {
  if constexpr (std::is_same_v<T, bool>) {
    return kOp == UnaryOp::kLogicalNot;
  } else if constexpr (std::is_integral_v<T>) {
    return kOp == UnaryOp::kNeg || kOp == UnaryOp::kAbs || kOp == UnaryOp::kSign || kOp == UnaryOp::kRelu ||
           kOp == UnaryOp::kClamp;
  } else {
    return kOp != UnaryOp::kLogicalNot;
  }
}

// One unary op on T; `low` and `high` are kClamp's bounds (an absent one is the type's extreme).
template <UnaryOp kOp, typename T>
struct UnaryFunction {
  T low, high;

  // One line per op, as a table.
  // clang-format off
  __device__ T operator()(T x) const {
    if constexpr (kOp == UnaryOp::kLogicalNot) return !x;
    else if constexpr (kOp == UnaryOp::kNeg) return -x;
    else if constexpr (kOp == UnaryOp::kAbs) return x < T(0) ? -x : x;
    else if constexpr (kOp == UnaryOp::kSign) return static_cast<T>((T(0) < x) - (x < T(0)));
    else if constexpr (kOp == UnaryOp::kRelu) return x < T(0) ? T(0) : x;
    // Written so that NaN passes through, as in PyTorch.
    else if constexpr (kOp == UnaryOp::kClamp) return x < low ? low : (x > high ? high : x);
    else if constexpr (kOp == UnaryOp::kExp) return exp(x);
    else if constexpr (kOp == UnaryOp::kExpm1) return expm1(x);
    else if constexpr (kOp == UnaryOp::kLog) return log(x);
    else if constexpr (kOp == UnaryOp::kLog1p) return log1p(x);
    else if constexpr (kOp == UnaryOp::kSqrt) return sqrt(x);
    else if constexpr (kOp == UnaryOp::kRsqrt) return rsqrt(x);
    else if constexpr (kOp == UnaryOp::kSin) return sin(x);
    else if constexpr (kOp == UnaryOp::kCos) return cos(x);
    else if constexpr (kOp == UnaryOp::kTanh) return tanh(x);
    else if constexpr (kOp == UnaryOp::kSigmoid) return T(1) / (T(1) + exp(-x));
    else if constexpr (kOp == UnaryOp::kErf) return erf(x);
    else if constexpr (kOp == UnaryOp::kGelu) return T(0.5) * x * (T(1) + erf(x * T(M_SQRT1_2)));
    else static_assert(kOp != kOp, "every UnaryOp needs a case here");
  }
  // clang-format on
};

template <typename Fn>
void dispatch_unary_op(UnaryOp op, Fn&& fn) {
  dispatch_op<UnaryOp::kNeg, UnaryOp::kAbs, UnaryOp::kSign, UnaryOp::kExp, UnaryOp::kExpm1, UnaryOp::kLog,
              UnaryOp::kLog1p, UnaryOp::kSqrt, UnaryOp::kRsqrt, UnaryOp::kSin, UnaryOp::kCos, UnaryOp::kTanh,
              UnaryOp::kSigmoid, UnaryOp::kRelu, UnaryOp::kGelu, UnaryOp::kErf, UnaryOp::kClamp, UnaryOp::kLogicalNot>(
      op, "unary", fn);
}

void unary(UnaryOp op, const Tensor& out, const Tensor& in, const ClampBounds& bounds) {
  dispatch_dtype(in.dtype(), "unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_unary_op(op, [&](auto op_constant) {
      constexpr UnaryOp kOp = decltype(op_constant)::value;
      if constexpr (unary_defined<kOp, T>()) {
        const T low = bounds.has_min ? static_cast<T>(bounds.min) : std::numeric_limits<T>::lowest();
        const T high = bounds.has_max ? static_cast<T>(bounds.max) : std::numeric_limits<T>::max();
        launch_elementwise<T, T>("unary", out, UnaryFunction<kOp, T>{low, high}, {&in});
      } else {
        DISTGRAD_FAIL("CUDA unary kernel: op ", static_cast<int>(kOp), " is not defined for ",
                      dtype_name(dtype_of<T>()));
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------
// binary, binary_scalar

template <BinaryOp kOp>
constexpr bool is_logical() {
  return kOp == BinaryOp::kLogicalAnd || kOp == BinaryOp::kLogicalOr;
}

template <BinaryOp kOp, typename T>
constexpr bool binary_defined() {
  if constexpr (std::is_same_v<T, bool>) {
    return is_logical<kOp>() || kOp == BinaryOp::kEq || kOp == BinaryOp::kNe;
  } else if constexpr (std::is_integral_v<T>) {
    return !is_logical<kOp>() && kOp != BinaryOp::kDiv;
  } else {
    return !is_logical<kOp>();
  }
}

// Integer power by squaring; below 0 only 1 and -1 have non-zero powers (as on the CPU).
template <typename T>
__device__ T integer_power(T base, T exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return exponent % 2 == 0 ? 1 : -1;
    return 0;
  }
  T result = 1;
  while (exponent > 0) {
    if (exponent & 1) result *= base;
    exponent >>= 1;
    if (exponent > 0) base *= base;  // no square past the last bit: it could overflow needlessly
  }
  return result;
}

// One binary op on two T; comparisons and logical ops give bool.
template <BinaryOp kOp, typename T>
struct BinaryFunction {
  using Out = std::conditional_t<distgrad::kernels::is_comparison(kOp) || is_logical<kOp>(), bool, T>;

  // One line per op, as a table.
  // clang-format off
  __device__ Out operator()(T x, T y) const {
    if constexpr (kOp == BinaryOp::kAdd) return x + y;
    else if constexpr (kOp == BinaryOp::kSub) return x - y;
    else if constexpr (kOp == BinaryOp::kMul) return x * y;
    else if constexpr (kOp == BinaryOp::kDiv) return x / y;
    else if constexpr (kOp == BinaryOp::kPow && std::is_integral_v<T>) return integer_power(x, y);
    else if constexpr (kOp == BinaryOp::kPow) return pow(x, y);
    // NaN in either operand propagates, as on the CPU.
    else if constexpr (kOp == BinaryOp::kMaximum) return is_nan(x) ? x : (x > y ? x : y);
    else if constexpr (kOp == BinaryOp::kMinimum) return is_nan(x) ? x : (x < y ? x : y);
    else if constexpr (kOp == BinaryOp::kEq) return x == y;
    else if constexpr (kOp == BinaryOp::kNe) return x != y;
    else if constexpr (kOp == BinaryOp::kLt) return x < y;
    else if constexpr (kOp == BinaryOp::kLe) return x <= y;
    else if constexpr (kOp == BinaryOp::kGt) return x > y;
    else if constexpr (kOp == BinaryOp::kGe) return x >= y;
    else if constexpr (kOp == BinaryOp::kLogicalAnd) return x && y;
    else if constexpr (kOp == BinaryOp::kLogicalOr) return x || y;
    else if constexpr (kOp == BinaryOp::kReluBackward) return y <= T(0) ? T(0) : x;
    else static_assert(kOp != kOp, "every BinaryOp needs a case here");
  }
  // clang-format on
};

// op(x, scalar), or op(scalar, x) when `scalar_first`.
template <BinaryOp kOp, typename T>
struct ScalarBinaryFunction {
  T scalar;
  bool scalar_first;

  __device__ typename BinaryFunction<kOp, T>::Out operator()(T x) const {
    const BinaryFunction<kOp, T> function;
    return scalar_first ? function(scalar, x) : function(x, scalar);
  }
};

template <typename Fn>
void dispatch_binary_op(BinaryOp op, Fn&& fn) {
  dispatch_op<BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv, BinaryOp::kPow, BinaryOp::kMaximum,
              BinaryOp::kMinimum, BinaryOp::kEq, BinaryOp::kNe, BinaryOp::kLt, BinaryOp::kLe, BinaryOp::kGt,
              BinaryOp::kGe, BinaryOp::kLogicalAnd, BinaryOp::kLogicalOr, BinaryOp::kReluBackward>(op, "binary", fn);
}

// Calls fn(TypeTag<T>{}, op_constant) for a's dtype and a binary op defined for it.
template <typename Fn>
void dispatch_binary(BinaryOp op, DType dtype, Fn&& fn) {
  dispatch_dtype(dtype, "binary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_binary_op(op, [&](auto op_constant) {
      constexpr BinaryOp kOp = decltype(op_constant)::value;
      if constexpr (binary_defined<kOp, T>()) {
        fn(tag, op_constant);
      } else {
        DISTGRAD_FAIL("CUDA binary kernel: op ", static_cast<int>(kOp), " is not defined for ",
                      dtype_name(dtype_of<T>()));
      }
    });
  });
}

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_binary(op, a.dtype(), [&](auto tag, auto op_constant) {
    using T = typename decltype(tag)::type;
    using Function = BinaryFunction<decltype(op_constant)::value, T>;
    launch_elementwise<typename Function::Out, T, T>("binary", out, Function{}, {&a, &b});
  });
}

void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, double scalar, bool scalar_first) {
  dispatch_binary(op, a.dtype(), [&](auto tag, auto op_constant) {
    using T = typename decltype(tag)::type;
    constexpr BinaryOp kOp = decltype(op_constant)::value;
    launch_elementwise<typename BinaryFunction<kOp, T>::Out, T>(
        "binary_scalar", out, ScalarBinaryFunction<kOp, T>{static_cast<T>(scalar), scalar_first}, {&a});
  });
}

// ---------------------------------------------------------------------------------------------
// reduce

// How one ReduceOp folds elements of T: a partial result carries the value and, for max/min,
// the position of the extreme along the reduced dim (-1 while no element was seen).
template <ReduceOp kOp, typename T>
struct Reduction {
  static constexpr bool kExtreme = kOp == ReduceOp::kMax || kOp == ReduceOp::kMin;
  using Value = std::conditional_t<kExtreme, T, AccumulateType<T>>;

  struct Partial {
    Value value;
    int64_t index;
  };

  static __device__ Partial identity() { return {Value(kOp == ReduceOp::kProd ? 1 : 0), -1}; }

  // Combines two partials; for max/min the earlier position wins ties, and NaN beats numbers.
  static __device__ Partial combine(const Partial& a, const Partial& b) {
    if constexpr (kOp == ReduceOp::kSum) {
      return {a.value + b.value, -1};
    } else if constexpr (kOp == ReduceOp::kProd) {
      return {a.value * b.value, -1};
    } else {
      if (a.index < 0) return b;
      if (b.index < 0) return a;
      const Partial earlier = a.index < b.index ? a : b;
      const Partial later = a.index < b.index ? b : a;
      if (is_nan(earlier.value)) return earlier;
      if (is_nan(later.value)) return later;
      const bool later_wins = kOp == ReduceOp::kMax ? later.value > earlier.value : later.value < earlier.value;
      return later_wins ? later : earlier;
    }
  }
};

// Note [Split reductions]
// A reduction reads `in` as [outer, reduced, inner] and folds its middle dim. A block works on
// a 2-D tile: threadIdx.x walks blockDim.x adjacent inner positions (coalesced reads) and
// threadIdx.y splits the reduced range; the blockDim.y partials of each column then meet in a
// shared-memory tree. When the outputs make too few tiles to fill the device (a full sum has
// one) and the reduced dim is long, the reduced dim is also cut into `splits` chunks, one per
// block: a first pass writes one partial per chunk to scratch memory read as
// [outer, splits, inner], and a second pass folds those. Partials of max/min carry their
// absolute position, so the earliest extreme still wins across chunks.

// Reads element r of column (o, i) of the input as a partial.
template <typename Rule, typename T>
struct ElementLoader {
  const T* in;
  int64_t reduced, inner;
  __device__ typename Rule::Partial operator()(int64_t o, int64_t r, int64_t i) const {
    return {static_cast<typename Rule::Value>(in[(o * reduced + r) * inner + i]), r};
  }
};

// Reads and writes the first pass's partials, [outer, splits, inner].
template <typename Rule>
struct PartialBuffer {
  typename Rule::Partial* partials;
  int64_t splits, inner;
  __device__ typename Rule::Partial operator()(int64_t o, int64_t s, int64_t i) const {
    return partials[(o * splits + s) * inner + i];
  }
  __device__ void store(int64_t o, int64_t s, int64_t i, const typename Rule::Partial& partial) const {
    partials[(o * splits + s) * inner + i] = partial;
  }
};

// Writes the final value (and position, for max/min) of column (o, i).
template <typename Rule, typename T>
struct ResultWriter {
  T* values;
  int64_t* indices;  // null unless positions were asked for
  int64_t inner;
  __device__ void store(int64_t o, int64_t, int64_t i, const typename Rule::Partial& partial) const {
    values[o * inner + i] = static_cast<T>(partial.value);
    if (indices != nullptr) {
      indices[o * inner + i] = partial.index;
    }
  }
};

// One pass of Note [Split reductions]: folds chunk s of the `reduced` range of every column
// (o, i) with `load` and hands the result to `writer.store(o, s, i, partial)`.
template <typename Rule, typename Loader, typename Writer>
__global__ void reduce_kernel(Loader load, Writer writer, int64_t outer, int64_t reduced, int64_t inner,
                              int64_t splits) {
  using Partial = typename Rule::Partial;
  __shared__ Partial partials[kThreadsPerBlock];
  const int64_t column_tiles = (inner + blockDim.x - 1) / blockDim.x;
  const int64_t chunk = (reduced + splits - 1) / splits;
  const int64_t tiles = outer * column_tiles * splits;
  const unsigned lane = threadIdx.y * blockDim.x + threadIdx.x;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t s = tile % splits;
    const int64_t o = tile / splits / column_tiles;
    const int64_t i = tile / splits % column_tiles * blockDim.x + threadIdx.x;
    const int64_t end = std::min(reduced, (s + 1) * chunk);
    Partial partial = Rule::identity();
    if (i < inner) {
#pragma unroll 4
      for (int64_t r = s * chunk + threadIdx.y; r < end; r += blockDim.y) {
        partial = Rule::combine(partial, load(o, r, i));
      }
    }
    partials[lane] = partial;
    __syncthreads();
    for (unsigned rows = blockDim.y / 2; rows > 0; rows /= 2) {
      if (threadIdx.y < rows) {
        partials[lane] = Rule::combine(partials[lane], partials[lane + rows * blockDim.x]);
      }
      __syncthreads();
    }
    if (threadIdx.y == 0 && i < inner) {
      writer.store(o, s, i, partials[threadIdx.x]);
    }
    __syncthreads();  // the next tile reuses `partials`
  }
}

// Splits stop once this many blocks are in flight, or when a chunk would give each thread
// fewer than kMinElementsPerThread elements.
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMinElementsPerThread = 32;

void reduce(ReduceOp op, const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer, int64_t reduced,
            int64_t inner) {
  DISTGRAD_CHECK(in.is_contiguous() && values.is_contiguous(),
                 "CUDA reduce kernel: expected contiguous tensors, found ", in.describe(), " and ", values.describe());
  check_tensor(values, in.dtype(), in.device(), "reduce", "values");
  if (indices.defined()) {
    check_tensor(indices, kInt64, in.device(), "reduce", "indices");
  }
  if (outer * inner == 0) {
    return;
  }
  dispatch_dtype(in.dtype(), "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      DISTGRAD_FAIL("CUDA reduce kernel: bool input (convert to int64 first)");
    } else {
      dispatch_op<ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin>(op, "reduce", [&](auto op_constant) {
        using Rule = Reduction<decltype(op_constant)::value, T>;
        using Partial = typename Rule::Partial;
        // Up to 32 adjacent columns per block (a power of two), the other threads along the
        // reduced dim: one 256-thread column when inner == 1.
        unsigned columns = 1;
        while (columns < 32 && columns < inner) {
          columns *= 2;
        }
        const dim3 block(columns, kThreadsPerBlock / columns);
        const int64_t tiles = outer * ceil_div(inner, columns);
        const int64_t splits = std::max<int64_t>(
            1, std::min(ceil_div(kTargetBlocks, tiles), reduced / (int64_t{block.y} * kMinElementsPerThread)));
        const DeviceLaunch launch(in.device());
        const ElementLoader<Rule, T> load{static_cast<const T*>(in.data_ptr()), reduced, inner};
        const ResultWriter<Rule, T> result{static_cast<T*>(values.data_ptr()), kernels::data_or_null<int64_t>(indices),
                                           inner};
        if (splits == 1) {
          reduce_kernel<Rule>
              <<<std::min(tiles, kMaxBlocks), block, 0, launch.stream()>>>(load, result, outer, reduced, inner, 1);
          DISTGRAD_CUDA_CHECK(cudaGetLastError());
          return;
        }
        // Scratch for the partials; freed once both passes are queued (Note [CUDA caching allocator]).
        Allocator& scratch_allocator = allocator(in.device().index);
        const size_t scratch_bytes = sizeof(Partial) * outer * splits * inner;
        const PartialBuffer<Rule> scratch{static_cast<Partial*>(scratch_allocator.allocate(scratch_bytes)), splits,
                                          inner};
        reduce_kernel<Rule><<<std::min(tiles * splits, kMaxBlocks), block, 0, launch.stream()>>>(
            load, scratch, outer, reduced, inner, splits);
        const cudaError_t first_pass = cudaGetLastError();
        if (first_pass == cudaSuccess) {
          reduce_kernel<Rule>
              <<<std::min(tiles, kMaxBlocks), block, 0, launch.stream()>>>(scratch, result, outer, splits, inner, 1);
        }
        scratch_allocator.deallocate(scratch.partials, scratch_bytes);
        DISTGRAD_CUDA_CHECK(first_pass);
        DISTGRAD_CUDA_CHECK(cudaGetLastError());
      });
    }
  });
}

// ---------------------------------------------------------------------------------------------
// gemm

int to_int(int64_t value, const char* what) {
  DISTGRAD_CHECK(value >= 0 && value <= INT_MAX, "CUDA gemm: cuBLAS takes ", what, " up to ", INT_MAX, ", found ",
                 value);
  return static_cast<int>(value);
}

// cuBLAS is column-major, GemmArgs row-major. A row-major matrix is its transpose in
// column-major order, so the row-major C = op(A) op(B) is the column-major
// C^T = op(B)^T op(A)^T: B and A swap places, and m and n too.
void gemm(const GemmArgs& args) {
  if (args.batch == 0 || args.m == 0 || args.n == 0) {
    return;
  }
  const int device = args.device.index;
  const cublasHandle_t handle = cublas_handle(device);
  const DeviceGuard guard(device);
  const cublasOperation_t op_a = args.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = args.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = to_int(args.m, "m"), n = to_int(args.n, "n"), k = to_int(args.k, "k");
  const int batch = to_int(args.batch, "the batch size");
  const int lda = to_int(args.lda, "lda"), ldb = to_int(args.ldb, "ldb"), ldc = to_int(args.ldc, "ldc");
  if (args.dtype == kFloat32) {
    const float alpha = static_cast<float>(args.alpha), beta = static_cast<float>(args.beta);
    DISTGRAD_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, op_b, op_a, n, m, k, &alpha,
                                                    static_cast<const float*>(args.b), ldb, args.stride_b,
                                                    static_cast<const float*>(args.a), lda, args.stride_a, &beta,
                                                    static_cast<float*>(args.c), ldc, args.stride_c, batch));
  } else if (is_half(args.dtype)) {  // mixed precision: half operands, float32 accumulation, C rounded once
    const cudaDataType_t type = args.dtype == kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
    const float alpha = static_cast<float>(args.alpha), beta = static_cast<float>(args.beta);
    DISTGRAD_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, op_b, op_a, n, m, k, &alpha, args.b, type, ldb, args.stride_b, args.a, type, lda, args.stride_a, &beta,
        args.c, type, ldc, args.stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    DISTGRAD_CHECK(args.dtype == kFloat64, "CUDA gemm: expected a floating dtype, found ", args.dtype);
    DISTGRAD_CUBLAS_CHECK(cublasDgemmStridedBatched(handle, op_b, op_a, n, m, k, &args.alpha,
                                                    static_cast<const double*>(args.b), ldb, args.stride_b,
                                                    static_cast<const double*>(args.a), lda, args.stride_a, &args.beta,
                                                    static_cast<double*>(args.c), ldc, args.stride_c, batch));
  }
}

// ---------------------------------------------------------------------------------------------
// cumsum: one thread per line (o, j) adds its `length` values in order, as the CPU does.

template <typename T>
__global__ void cumsum_kernel(T* out, const T* in, int64_t lines, int64_t length, int64_t inner, bool reverse) {
  for (int64_t line = first_work_item(); line < lines; line += work_item_stride()) {
    const int64_t j = line % inner;
    const int64_t o = line / inner;
    T running = T(0);
    for (int64_t step = 0; step < length; ++step) {
      const int64_t i = reverse ? length - 1 - step : step;
      const int64_t at = (o * length + i) * inner + j;
      running = static_cast<T>(running + in[at]);
      out[at] = running;
    }
  }
}

void cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t length, int64_t inner, bool reverse) {
  const int64_t lines = outer * inner;
  if (lines == 0 || length == 0) {
    return;
  }
  dispatch_dtype(in.dtype(), "cumsum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      DISTGRAD_FAIL("CUDA cumsum kernel: bool input (convert to int64 first)");
    } else {
      const DeviceLaunch launch(in.device());
      cumsum_kernel<T><<<blocks_for(lines), kThreadsPerBlock, 0, launch.stream()>>>(
          static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()), lines, length, inner, reverse);
      DISTGRAD_CUDA_CHECK(cudaGetLastError());
    }
  });
}

// index_select, gather, scatter_add

template <typename T>
__global__ void index_select_kernel(T* out, const T* in, const int64_t* index, int64_t index_stride, int64_t numel,
                                    int64_t count, int64_t dim_size, int64_t inner) {
  for (int64_t e = first_work_item(); e < numel; e += work_item_stride()) {
    const int64_t i = e % inner;
    const int64_t j = e / inner % count;
    const int64_t o = e / (inner * count);
    out[e] = in[(o * dim_size + index[j * index_stride]) * inner + i];
  }
}

void index_select(const Tensor& out, const Tensor& in, const Tensor& index, int64_t outer, int64_t dim_size,
                  int64_t inner) {
  check_tensor(index, kInt64, in.device(), "index_select", "index");
  DISTGRAD_CHECK(index.dim() <= 1, "CUDA index_select: expected a 0-D or 1-D index, found ", index.describe());
  const int64_t count = index.numel();
  const int64_t numel = outer * count * inner;
  if (numel == 0) {
    return;
  }
  dispatch_dtype(in.dtype(), "index_select", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const DeviceLaunch launch(in.device());
    index_select_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, launch.stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()),
        static_cast<const int64_t*>(index.data_ptr()), index.dim() == 0 ? 0 : index.stride(0), numel, count, dim_size,
        inner);
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  });
}

// Addresses for gather and scatter_add: position p of the contiguous index tensor has the
// same coordinates in `target` (gather's in, scatter_add's self) except index[p] along `dim`,
// and the same coordinates in scatter_add's src; all three are contiguous, of their own shapes.
struct IndexedLayout {
  int ndim = 0;
  int dim = 0;
  int64_t index_sizes[kMaxDims] = {};
  int64_t target_strides[kMaxDims] = {};
  int64_t source_strides[kMaxDims] = {};

  __device__ int64_t target_offset(int64_t p, int64_t index_value) const {
    int64_t offset = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      offset += (d == dim ? index_value : p % index_sizes[d]) * target_strides[d];
      p /= index_sizes[d];
    }
    return offset;
  }

  __device__ int64_t source_offset(int64_t p) const {
    int64_t offset = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      offset += p % index_sizes[d] * source_strides[d];
      p /= index_sizes[d];
    }
    return offset;
  }
};

IndexedLayout make_indexed_layout(const char* op, const Tensor& index, const Tensor& target, const Tensor& source,
                                  int64_t dim) {
  check_tensor(index, kInt64, target.device(), op, "index");
  DISTGRAD_CHECK(index.is_contiguous() && target.is_contiguous() && source.is_contiguous(), op,
                 ": expected contiguous tensors, found ", index.describe(), ", ", target.describe(), " and ",
                 source.describe());
  DISTGRAD_CHECK(index.dim() <= kMaxDims, op, ": CUDA kernels take at most ", kMaxDims, " dims, found ",
                 index.describe());
  DISTGRAD_CHECK(target.dim() == index.dim() && source.dim() == index.dim(), op,
                 ": expected tensors with as many dims as the index, found ", target.describe(), " and ",
                 source.describe());
  IndexedLayout layout;
  layout.ndim = static_cast<int>(index.dim());
  layout.dim = static_cast<int>(dim);
  const Shape target_strides = contiguous_strides(target.sizes());
  const Shape source_strides = contiguous_strides(source.sizes());
  for (int d = 0; d < layout.ndim; ++d) {
    layout.index_sizes[d] = index.size(d);
    layout.target_strides[d] = target_strides[d];
    layout.source_strides[d] = source_strides[d];
  }
  return layout;
}

template <typename T>
__global__ void gather_kernel(T* out, const T* in, const int64_t* index, int64_t numel, IndexedLayout layout) {
  for (int64_t p = first_work_item(); p < numel; p += work_item_stride()) {
    out[p] = in[layout.target_offset(p, index[p])];
  }
}

void gather(const Tensor& out, const Tensor& in, const Tensor& index, int64_t dim) {
  const IndexedLayout layout = make_indexed_layout("gather", index, in, out, dim);
  const int64_t numel = index.numel();
  if (numel == 0) {
    return;
  }
  dispatch_dtype(in.dtype(), "gather", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const DeviceLaunch launch(in.device());
    gather_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, launch.stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()),
        static_cast<const int64_t*>(index.data_ptr()), numel, layout);
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  });
}

template <typename T>
__device__ void atomic_add(T* address, T value) {
  if constexpr (std::is_same_v<T, int64_t>) {
    // Two's complement addition is the same on unsigned bits.
    atomicAdd(reinterpret_cast<unsigned long long*>(address), static_cast<unsigned long long>(value));
  } else {
    atomicAdd(address, value);
  }
}

// Atomic, so that repeated indices add up; the order of float additions is therefore not fixed.
template <typename T>
__global__ void scatter_add_kernel(T* self, const T* src, const int64_t* index, int64_t numel, IndexedLayout layout) {
  for (int64_t p = first_work_item(); p < numel; p += work_item_stride()) {
    atomic_add(self + layout.target_offset(p, index[p]), src[layout.source_offset(p)]);
  }
}

void scatter_add(const Tensor& self, const Tensor& index, const Tensor& src, int64_t dim) {
  const IndexedLayout layout = make_indexed_layout("scatter_add", index, self, src, dim);
  const int64_t numel = index.numel();
  if (numel == 0) {
    return;
  }
  dispatch_dtype(self.dtype(), "scatter_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      DISTGRAD_FAIL("scatter_add: bool tensors cannot be added");
    } else {
      const DeviceLaunch launch(self.device());
      scatter_add_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, launch.stream()>>>(
          static_cast<T*>(self.data_ptr()), static_cast<const T*>(src.data_ptr()),
          static_cast<const int64_t*>(index.data_ptr()), numel, layout);
      DISTGRAD_CUDA_CHECK(cudaGetLastError());
    }
  });
}

// ---------------------------------------------------------------------------------------------
// im2col, col2im, max_pool2d, avg_pool2d (NCHW, contiguous)

// One thread per column element, in order [n][c][ki][kj][oh][ow], so writes coalesce along a
// window row; col's image and row strides are `image_stride` and `row_stride`.
template <typename T>
__global__ void im2col_kernel(T* col, const T* in, Window2d w, int64_t image_stride, int64_t row_stride,
                              int64_t numel) {
  for (int64_t e = first_work_item(); e < numel; e += work_item_stride()) {
    int64_t rest = e;
    const int64_t ow = rest % w.out_w;
    rest /= w.out_w;
    const int64_t oh = rest % w.out_h;
    rest /= w.out_h;
    const int64_t kj = rest % w.kernel_w;
    rest /= w.kernel_w;
    const int64_t ki = rest % w.kernel_h;
    const int64_t plane = rest / w.kernel_h;  // n * channels + c
    const int64_t n = plane / w.channels;
    const int64_t row = (plane % w.channels * w.kernel_h + ki) * w.kernel_w + kj;
    const int64_t ih = oh * w.stride_h - w.pad_h + ki * w.dilation_h;
    const int64_t iw = ow * w.stride_w - w.pad_w + kj * w.dilation_w;
    const bool inside = ih >= 0 && ih < w.height && iw >= 0 && iw < w.width;
    col[n * image_stride + row * row_stride + oh * w.out_w + ow] =
        inside ? in[(plane * w.height + ih) * w.width + iw] : T(0);
  }
}

void im2col(const Tensor& col, const Tensor& in, const Window2d& window) {
  const int64_t numel =
      window.batch * window.channels * window.kernel_h * window.kernel_w * window.out_h * window.out_w;
  if (numel == 0) {
    return;
  }
  dispatch_floating(in.dtype(), "im2col", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const DeviceLaunch launch(in.device());
    im2col_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, launch.stream()>>>(
        static_cast<T*>(col.data_ptr()), static_cast<const T*>(in.data_ptr()), window, col.stride(0), col.stride(1),
        numel);
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  });
}

// One thread per image element, gathering the column entries that read it in (ki, kj) order
// as the CPU twin does (see col2im in core/cpu/cpu_kernels.cc): no atomics, so the sums are
// deterministic and match the CPU's.
template <typename T>
__global__ void col2im_kernel(T* image, const T* col, Window2d w, int64_t numel) {
  const int64_t area = w.kernel_h * w.kernel_w;
  const int64_t windows = w.out_h * w.out_w;
  for (int64_t e = first_work_item(); e < numel; e += work_item_stride()) {
    const int64_t iw = e % w.width;
    const int64_t ih = e / w.width % w.height;
    const int64_t plane = e / (w.width * w.height);  // n * channels + c
    const T* rows = col + plane * area * windows;
    T total = 0;
    for (int64_t ki = 0; ki < w.kernel_h; ++ki) {
      const int64_t h = ih + w.pad_h - ki * w.dilation_h;
      if (h < 0) break;
      if (h % w.stride_h != 0 || h / w.stride_h >= w.out_h) continue;
      for (int64_t kj = 0; kj < w.kernel_w; ++kj) {
        const int64_t x = iw + w.pad_w - kj * w.dilation_w;
        if (x < 0) break;
        if (x % w.stride_w != 0 || x / w.stride_w >= w.out_w) continue;
        total += rows[(ki * w.kernel_w + kj) * windows + h / w.stride_h * w.out_w + x / w.stride_w];
      }
    }
    image[e] = total;
  }
}

void col2im(const Tensor& image, const Tensor& col, const Window2d& window) {
  const int64_t numel = window.batch * window.channels * window.height * window.width;
  if (numel == 0) {
    return;
  }
  dispatch_floating(col.dtype(), "col2im", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const DeviceLaunch launch(col.device());
    col2im_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, launch.stream()>>>(
        static_cast<T*>(image.data_ptr()), static_cast<const T*>(col.data_ptr()), window, numel);
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  });
}

// One thread per output; padding is skipped, so it never wins. The first maximum wins, and
// NaN beats every number (as on the CPU).
template <typename T>
__global__ void max_pool2d_kernel(T* out, int64_t* indices, const T* in, Window2d w, int64_t numel) {
  for (int64_t e = first_work_item(); e < numel; e += work_item_stride()) {
    const int64_t ow = e % w.out_w;
    const int64_t oh = e / w.out_w % w.out_h;
    const int64_t plane = e / (w.out_w * w.out_h);
    const T* image = in + plane * w.height * w.width;
    T best = -::cuda::std::numeric_limits<T>::infinity();
    int64_t best_index = -1;
    for (int64_t ki = 0; ki < w.kernel_h; ++ki) {
      const int64_t ih = oh * w.stride_h - w.pad_h + ki * w.dilation_h;
      if (ih < 0 || ih >= w.height) continue;
      for (int64_t kj = 0; kj < w.kernel_w; ++kj) {
        const int64_t iw = ow * w.stride_w - w.pad_w + kj * w.dilation_w;
        if (iw < 0 || iw >= w.width) continue;
        const T value = image[ih * w.width + iw];
        if (best_index < 0 || value > best || (is_nan(value) && !is_nan(best))) {
          best = value;
          best_index = ih * w.width + iw;
        }
      }
    }
    out[e] = best;
    indices[e] = best_index;
  }
}

void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& in, const Window2d& window) {
  check_tensor(indices, kInt64, in.device(), "max_pool2d", "indices");
  const int64_t numel = window.batch * window.channels * window.out_h * window.out_w;
  if (numel == 0) {
    return;
  }
  dispatch_floating(in.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const DeviceLaunch launch(in.device());
    max_pool2d_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, launch.stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<int64_t*>(indices.data_ptr()),
        static_cast<const T*>(in.data_ptr()), window, numel);
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  });
}

// One thread per input element, gathering in output order the gradients of the outputs whose
// window spans it and whose index names it: no atomics, the CPU twin's order and bits.
template <typename T>
__global__ void max_pool2d_backward_kernel(T* grad_input, const T* grad_output, const int64_t* indices, Window2d w,
                                           int64_t numel) {
  for (int64_t e = first_work_item(); e < numel; e += work_item_stride()) {
    const int64_t iw = e % w.width;
    const int64_t ih = e / w.width % w.height;
    const int64_t plane = e / (w.width * w.height);
    // Window row oh spans ih when oh * stride_h - pad_h <= ih <= that + (kernel_h - 1) * dilation_h.
    const int64_t below_h = ih + w.pad_h - (w.kernel_h - 1) * w.dilation_h;
    const int64_t below_w = iw + w.pad_w - (w.kernel_w - 1) * w.dilation_w;
    const int64_t first_h = below_h <= 0 ? 0 : (below_h + w.stride_h - 1) / w.stride_h;
    const int64_t first_w = below_w <= 0 ? 0 : (below_w + w.stride_w - 1) / w.stride_w;
    const int64_t reach_h = (ih + w.pad_h) / w.stride_h, reach_w = (iw + w.pad_w) / w.stride_w;
    const int64_t last_h = reach_h < w.out_h ? reach_h : w.out_h - 1;
    const int64_t last_w = reach_w < w.out_w ? reach_w : w.out_w - 1;
    const int64_t position = ih * w.width + iw;
    T total = 0;
    for (int64_t oh = first_h; oh <= last_h; ++oh) {
      for (int64_t ow = first_w; ow <= last_w; ++ow) {
        const int64_t o = (plane * w.out_h + oh) * w.out_w + ow;
        if (indices[o] == position) total += grad_output[o];
      }
    }
    grad_input[e] = total;
  }
}

// One thread per output: counts the indices outside their plane.
__global__ void count_outside_kernel(unsigned long long* outside, const int64_t* indices, int64_t plane,
                                     int64_t numel) {
  for (int64_t e = first_work_item(); e < numel; e += work_item_stride()) {
    if (indices[e] < 0 || indices[e] >= plane) atomicAdd(outside, 1ULL);
  }
}

// Waits for the count of indices outside their plane, which the op reports.
int64_t max_pool2d_backward(const Tensor& grad_input, const Tensor& grad_output, const Tensor& indices,
                            const Window2d& window) {
  check_tensor(indices, kInt64, grad_output.device(), "max_pool2d_backward", "indices");
  const int64_t numel = window.batch * window.channels * window.height * window.width;
  const int64_t outputs = window.batch * window.channels * window.out_h * window.out_w;
  if (numel == 0) {
    return 0;
  }
  const DeviceLaunch launch(grad_output.device());
  dispatch_floating(grad_output.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool2d_backward_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, launch.stream()>>>(
        static_cast<T*>(grad_input.data_ptr()), static_cast<const T*>(grad_output.data_ptr()),
        static_cast<const int64_t*>(indices.data_ptr()), window, numel);
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  });
  if (outputs == 0) {
    return 0;
  }
  Allocator& allocator = allocator_for(grad_output.device());
  auto* outside = static_cast<unsigned long long*>(allocator.allocate(sizeof(unsigned long long)));
  unsigned long long count = 0;
  DISTGRAD_CUDA_CHECK(cudaMemsetAsync(outside, 0, sizeof(count), launch.stream()));
  count_outside_kernel<<<blocks_for(outputs), kThreadsPerBlock, 0, launch.stream()>>>(
      outside, static_cast<const int64_t*>(indices.data_ptr()), window.height * window.width, outputs);
  DISTGRAD_CUDA_CHECK(cudaGetLastError());
  DISTGRAD_CUDA_CHECK(cudaMemcpyAsync(&count, outside, sizeof(count), cudaMemcpyDeviceToHost, launch.stream()));
  DISTGRAD_CUDA_CHECK(cudaStreamSynchronize(launch.stream()));
  allocator.deallocate(outside, sizeof(count));
  return static_cast<int64_t>(count);
}

// One thread per output. The divisor is PyTorch's: the window clipped to the padded input when
// `count_include_pad`, else clipped to the real input.
template <typename T>
__global__ void avg_pool2d_kernel(T* out, const T* in, Window2d w, bool count_include_pad, int64_t numel) {
  for (int64_t e = first_work_item(); e < numel; e += work_item_stride()) {
    const int64_t ow = e % w.out_w;
    const int64_t oh = e / w.out_w % w.out_h;
    const int64_t plane = e / (w.out_w * w.out_h);
    const T* image = in + plane * w.height * w.width;
    int64_t h_begin = oh * w.stride_h - w.pad_h, w_begin = ow * w.stride_w - w.pad_w;
    int64_t h_end = min(h_begin + w.kernel_h, w.height + w.pad_h);
    int64_t w_end = min(w_begin + w.kernel_w, w.width + w.pad_w);
    const int64_t padded_count = (h_end - h_begin) * (w_end - w_begin);
    h_begin = max(h_begin, int64_t{0});
    w_begin = max(w_begin, int64_t{0});
    h_end = min(h_end, w.height);
    w_end = min(w_end, w.width);
    AccumulateType<T> total = 0;
    for (int64_t ih = h_begin; ih < h_end; ++ih) {
      for (int64_t iw = w_begin; iw < w_end; ++iw) {
        total += image[ih * w.width + iw];
      }
    }
    const int64_t divisor = count_include_pad ? padded_count : (h_end - h_begin) * (w_end - w_begin);
    out[e] = static_cast<T>(total / divisor);
  }
}

void avg_pool2d(const Tensor& out, const Tensor& in, const Window2d& window, bool count_include_pad) {
  const int64_t numel = window.batch * window.channels * window.out_h * window.out_w;
  if (numel == 0) {
    return;
  }
  dispatch_floating(in.dtype(), "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const DeviceLaunch launch(in.device());
    avg_pool2d_kernel<T><<<blocks_for(numel), kThreadsPerBlock, 0, launch.stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()), window, count_include_pad, numel);
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace

const DeviceKernels& kernels() {
  static const DeviceKernels table{
      .fill = fill,
      .copy = copy,
      .unary = unary,
      .binary = binary,
      .binary_scalar = binary_scalar,
      .where = where,
      .reduce = reduce,
      .reduce_products = nullptr,  // untracked::sum_of_product multiplies, then sums
      .gemm = gemm,
      .cumsum = cumsum,
      .index_select = index_select,
      .gather = gather,
      .scatter_add = scatter_add,
      .im2col = im2col,
      .col2im = col2im,
      .max_pool2d = max_pool2d,
      .max_pool2d_backward = max_pool2d_backward,
      .avg_pool2d = avg_pool2d,
      .winograd_input_tiles = nullptr,  // conv2d uses im2col and cuBLAS
      .winograd_input_tiles_adjoint = nullptr,
      .winograd_output_tiles = nullptr,
      .winograd_output_grad_tiles = nullptr,
      .winograd_filters = nullptr,
      .winograd_filters_adjoint = nullptr,
      .batch_norm = batch_norm,  // core/cuda/batch_norm.cu
      .batch_norm_backward = batch_norm_backward,
      .batch_norm_double_backward = batch_norm_double_backward,
  };
  return table;
}

}  // namespace distgrad::cuda::detail
