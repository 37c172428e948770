// The CPU backend: every DeviceKernels primitive (core/kernels.h) for host memory.
//
// Elementwise kernels go through StridedLoop (core/cpu/strided_loop.h), gemm through OpenBLAS.
// Kernels never throw from inside an OpenMP region: every argument was checked by the op.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/blas_kernel.h"
#include "core/cpu/accumulate.h"
#include "core/cpu/batch_norm.h"
#include "core/cpu/half_convert.h"
#include "core/cpu/strided_loop.h"
#include "core/cpu/winograd.h"
#include "core/kernels.h"

namespace distgrad::kernels {
namespace {

using cpu::accumulate_run;
using cpu::AccumulateType;
using cpu::map_binary;
using cpu::map_unary;
using cpu::StridedLoop;

template <typename T>
bool is_nan(T value) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(value);
  else return false;
}

void fill(const Tensor& out, double value) {
  dispatch_storage_dtype(out.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T typed = static_cast<T>(value);
    T* data = static_cast<T*>(out.data_ptr());
    StridedLoop<1>(out.sizes(), {&out.strides()}).run([&](const auto& offsets, const auto& steps, int64_t count) {
      T* o = data + offsets[0];
      if (steps[0] == 1) {
        std::fill(o, o + count, typed);
      } else {
        for (int64_t j = 0; j < count; ++j) o[j * steps[0]] = typed;
      }
    });
  });
}

void copy(const Tensor& out, const Tensor& in) {
  dispatch_storage_dtype(out.dtype(), "copy", [&](auto out_tag) {
    using Out = typename decltype(out_tag)::type;
    dispatch_storage_dtype(in.dtype(), "copy", [&](auto in_tag) {
      using In = typename decltype(in_tag)::type;
      const auto convert = [](In x) { return static_cast<Out>(x); };
      if constexpr (std::is_same_v<Out, float> && is_half(dtype_of<In>())) {  // runs at once: cpu/half_convert.h
        map_unary<Out, In>(out, in, convert, [](Out* o, const In* x, int64_t n) { cpu::to_float(o, x, n); });
      } else if constexpr (std::is_same_v<In, float> && is_half(dtype_of<Out>())) {
        map_unary<Out, In>(out, in, convert, [](Out* o, const In* x, int64_t n) { cpu::from_float(o, x, n); });
      } else {
        map_unary<Out, In>(out, in, convert);
      }
    });
  });
}

template <typename T>
T integer_power(T base, T exponent) {
  if (exponent < 0) {  // only 1 and -1 have non-zero integer powers below 0
    if (base == 1) return 1;
    if (base == -1) return (exponent % 2 == 0) ? 1 : -1;
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

template <typename T>
void unary_typed(UnaryOp op, const Tensor& out, const Tensor& in, const ClampBounds& bounds) {
  constexpr bool kFloating = std::is_floating_point_v<T>;
  switch (op) {
    case UnaryOp::kLogicalNot:
      if constexpr (std::is_same_v<T, bool>) return map_unary<bool, T>(out, in, [](T x) { return !x; });
      break;
    case UnaryOp::kClamp:
      if constexpr (!std::is_same_v<T, bool>) {
        const T lo = bounds.has_min ? static_cast<T>(bounds.min) : std::numeric_limits<T>::lowest();
        const T hi = bounds.has_max ? static_cast<T>(bounds.max) : std::numeric_limits<T>::max();
        // Written so that NaN passes through, as in PyTorch.
        return map_unary<T, T>(out, in, [lo, hi](T x) { return x < lo ? lo : (x > hi ? hi : x); });
      }
      break;
    case UnaryOp::kNeg:
      if constexpr (!std::is_same_v<T, bool>) return map_unary<T, T>(out, in, [](T x) { return -x; });
      break;
    case UnaryOp::kAbs:
      if constexpr (!std::is_same_v<T, bool>) return map_unary<T, T>(out, in, [](T x) { return x < 0 ? -x : x; });
      break;
    case UnaryOp::kSign:
      if constexpr (!std::is_same_v<T, bool>) {
        return map_unary<T, T>(out, in, [](T x) { return static_cast<T>((T(0) < x) - (x < T(0))); });
      }
      break;
    case UnaryOp::kRelu:
      if constexpr (!std::is_same_v<T, bool>) return map_unary<T, T>(out, in, [](T x) { return x < 0 ? T(0) : x; });
      break;
    default: break;
  }
  if constexpr (kFloating) {
    switch (op) {
      case UnaryOp::kExp: return map_unary<T, T>(out, in, [](T x) { return std::exp(x); });
      case UnaryOp::kExpm1: return map_unary<T, T>(out, in, [](T x) { return std::expm1(x); });
      case UnaryOp::kLog: return map_unary<T, T>(out, in, [](T x) { return std::log(x); });
      case UnaryOp::kLog1p: return map_unary<T, T>(out, in, [](T x) { return std::log1p(x); });
      case UnaryOp::kSqrt: return map_unary<T, T>(out, in, [](T x) { return std::sqrt(x); });
      case UnaryOp::kRsqrt: return map_unary<T, T>(out, in, [](T x) { return T(1) / std::sqrt(x); });
      case UnaryOp::kSin: return map_unary<T, T>(out, in, [](T x) { return std::sin(x); });
      case UnaryOp::kCos: return map_unary<T, T>(out, in, [](T x) { return std::cos(x); });
      case UnaryOp::kTanh: return map_unary<T, T>(out, in, [](T x) { return std::tanh(x); });
      case UnaryOp::kSigmoid: return map_unary<T, T>(out, in, [](T x) { return T(1) / (T(1) + std::exp(-x)); });
      case UnaryOp::kErf: return map_unary<T, T>(out, in, [](T x) { return std::erf(x); });
      case UnaryOp::kGelu:
        return map_unary<T, T>(out, in, [](T x) { return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2))); });
      default: break;
    }
  }
  DISTGRAD_FAIL("cpu unary kernel: op ", static_cast<int>(op), " is not defined for ", dtype_name(dtype_of<T>()));
}

void unary(UnaryOp op, const Tensor& out, const Tensor& in, const ClampBounds& bounds) {
  dispatch_dtype(in.dtype(), "unary",
                 [&](auto tag) { unary_typed<typename decltype(tag)::type>(op, out, in, bounds); });
}

// Calls fn with the scalar function of `op` for T.
template <typename T, typename Fn>
void with_binary_function(BinaryOp op, Fn&& fn) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case BinaryOp::kLogicalAnd: return fn([](T x, T y) -> bool { return x && y; });
      case BinaryOp::kLogicalOr: return fn([](T x, T y) -> bool { return x || y; });
      case BinaryOp::kEq: return fn([](T x, T y) -> bool { return x == y; });
      case BinaryOp::kNe: return fn([](T x, T y) -> bool { return x != y; });
      default: break;
    }
  } else {
    switch (op) {
      case BinaryOp::kAdd: return fn([](T x, T y) -> T { return x + y; });
      case BinaryOp::kSub: return fn([](T x, T y) -> T { return x - y; });
      case BinaryOp::kMul: return fn([](T x, T y) -> T { return x * y; });
      case BinaryOp::kDiv:
        if constexpr (std::is_floating_point_v<T>) return fn([](T x, T y) -> T { return x / y; });
        break;
      case BinaryOp::kPow:
        if constexpr (std::is_floating_point_v<T>) return fn([](T x, T y) -> T { return std::pow(x, y); });
        else return fn([](T x, T y) -> T { return integer_power(x, y); });
      case BinaryOp::kMaximum: return fn([](T x, T y) -> T { return is_nan(x) ? x : (x > y ? x : y); });
      case BinaryOp::kMinimum: return fn([](T x, T y) -> T { return is_nan(x) ? x : (x < y ? x : y); });
      case BinaryOp::kEq: return fn([](T x, T y) -> bool { return x == y; });
      case BinaryOp::kNe: return fn([](T x, T y) -> bool { return x != y; });
      case BinaryOp::kLt: return fn([](T x, T y) -> bool { return x < y; });
      case BinaryOp::kLe: return fn([](T x, T y) -> bool { return x <= y; });
      case BinaryOp::kGt: return fn([](T x, T y) -> bool { return x > y; });
      case BinaryOp::kGe: return fn([](T x, T y) -> bool { return x >= y; });
      case BinaryOp::kReluBackward: return fn([](T x, T y) -> T { return y <= T(0) ? T(0) : x; });
      default: break;
    }
  }
  DISTGRAD_FAIL("cpu binary kernel: op ", static_cast<int>(op), " is not defined for ", dtype_name(dtype_of<T>()));
}

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_dtype(a.dtype(), "binary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_binary_function<T>(op, [&](auto function) {
      using Out = decltype(function(T{}, T{}));
      map_binary<Out, T>(out, a, b, function);
    });
  });
}

void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, double scalar, bool scalar_first) {
  dispatch_dtype(a.dtype(), "binary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T s = static_cast<T>(scalar);
    with_binary_function<T>(op, [&](auto function) {
      using Out = decltype(function(T{}, T{}));
      if (scalar_first) {
        map_unary<Out, T>(out, a, [&](T x) { return function(s, x); });
      } else {
        map_unary<Out, T>(out, a, [&](T x) { return function(x, s); });
      }
    });
  });
}

void where(const Tensor& out, const Tensor& condition, const Tensor& a, const Tensor& b) {
  dispatch_dtype(out.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out_data = static_cast<T*>(out.data_ptr());
    const bool* c_data = static_cast<const bool*>(condition.data_ptr());
    const T* a_data = static_cast<const T*>(a.data_ptr());
    const T* b_data = static_cast<const T*>(b.data_ptr());
    StridedLoop<4>(out.sizes(), {&out.strides(), &condition.strides(), &a.strides(), &b.strides()})
        .run([&](const auto& offsets, const auto& steps, int64_t count) {
          for (int64_t j = 0; j < count; ++j) {
            out_data[offsets[0] + j * steps[0]] = c_data[offsets[1] + j * steps[1]] ? a_data[offsets[2] + j * steps[2]]
                                                                                    : b_data[offsets[3] + j * steps[3]];
          }
        });
  });
}

// out[o, i] = the reduction over r of element((o * reduced + r) * inner + i), element(k) being the
// k-th value of a contiguous [outer, reduced, inner] input (or of a product of two).
template <typename T, typename Element>
void reduce_accumulate(ReduceOp op, T* out, Element element, int64_t outer, int64_t reduced, int64_t inner) {
  using Acc = AccumulateType<T>;
  const auto run_from = [&](int64_t first, int64_t count) {
    return accumulate_run<T>(
        op, [&](int64_t j) { return element(first + j); }, count);
  };
  if (inner == 1 && outer == 1 && reduced >= 2 * cpu::kParallelGrain) {
    // One long run: fixed-size blocks in parallel, then their partial results in order.
    const int64_t blocks = (reduced + cpu::kParallelGrain - 1) / cpu::kParallelGrain;
    std::vector<Acc> partial(blocks);
#pragma omp parallel for
    for (int64_t block = 0; block < blocks; ++block) {
      const int64_t begin = block * cpu::kParallelGrain;
      partial[block] = run_from(begin, std::min(cpu::kParallelGrain, reduced - begin));
    }
    Acc result = op == ReduceOp::kSum ? Acc(0) : Acc(1);
    for (Acc value : partial) result = op == ReduceOp::kSum ? result + value : result * value;
    out[0] = static_cast<T>(result);
    return;
  }
  const bool parallel = outer * reduced * inner >= cpu::kParallelGrain && outer > 1;
  if (inner == 1) {
#pragma omp parallel for if (parallel)
    for (int64_t o = 0; o < outer; ++o) out[o] = static_cast<T>(run_from(o * reduced, reduced));
    return;
  }
#pragma omp parallel for if (parallel)
  for (int64_t o = 0; o < outer; ++o) {
    std::vector<Acc> acc(inner, op == ReduceOp::kSum ? Acc(0) : Acc(1));
    for (int64_t r = 0; r < reduced; ++r) {
      const int64_t row = (o * reduced + r) * inner;
      if (op == ReduceOp::kSum) {
        for (int64_t i = 0; i < inner; ++i) acc[i] += Acc(element(row + i));
      } else {
        for (int64_t i = 0; i < inner; ++i) acc[i] *= Acc(element(row + i));
      }
    }
    for (int64_t i = 0; i < inner; ++i) out[o * inner + i] = static_cast<T>(acc[i]);
  }
}

// Max (or min) with the index of the first extreme; NaN beats every number.
template <typename T>
void reduce_extreme(bool is_max, T* out, int64_t* indices, const T* in, int64_t outer, int64_t reduced, int64_t inner) {
  const bool parallel = outer * reduced * inner >= cpu::kParallelGrain && outer * inner > 1;
#pragma omp parallel for if (parallel)
  for (int64_t oi = 0; oi < outer * inner; ++oi) {
    const int64_t o = oi / inner, i = oi % inner;
    const T* column = in + o * reduced * inner + i;
    T best = column[0];
    int64_t best_index = 0;
    for (int64_t r = 1; r < reduced && !is_nan(best); ++r) {
      const T value = column[r * inner];
      if (is_nan(value) || (is_max ? value > best : value < best)) {
        best = value;
        best_index = r;
      }
    }
    out[oi] = best;
    if (indices != nullptr) indices[oi] = best_index;
  }
}

void reduce(ReduceOp op, const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer, int64_t reduced,
            int64_t inner) {
  dispatch_dtype(in.dtype(), "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      DISTGRAD_FAIL("cpu reduce kernel: bool input (convert to int64 first)");
    } else {
      T* out = static_cast<T*>(values.data_ptr());
      const T* data = static_cast<const T*>(in.data_ptr());
      if (op == ReduceOp::kSum || op == ReduceOp::kProd) {
        reduce_accumulate(
            op, out, [data](int64_t k) { return data[k]; }, outer, reduced, inner);
      } else {
        int64_t* index_data = data_or_null<int64_t>(indices);
        reduce_extreme(op == ReduceOp::kMax, out, index_data, data, outer, reduced, inner);
      }
    }
  });
}

// The sum of reduce(kSum) over a * b, each product rounded to T as mul's would be: the same bits
// without the product's tensor.
void reduce_products(const Tensor& values, const Tensor& a, const Tensor& b, int64_t outer, int64_t reduced,
                     int64_t inner) {
  dispatch_floating(a.dtype(), "reduce_products", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a_data = static_cast<const T*>(a.data_ptr());
    const T* b_data = static_cast<const T*>(b.data_ptr());
    const auto product = [a_data, b_data](int64_t k) { return static_cast<T>(a_data[k] * b_data[k]); };
    reduce_accumulate(ReduceOp::kSum, static_cast<T*>(values.data_ptr()), product, outer, reduced, inner);
  });
}

// Note [OpenBLAS threads for small products]
// OpenBLAS wakes its thread pool for products far too small to gain from it, and waking a
// sleeping thread costs tens of microseconds on a VM: the sine example ran 4x slower in wall
// time with 2 BLAS threads than with 1. Products under kSingleThreadFlops run on the calling
// thread only; larger ones use OpenBLAS's configured thread count. openblas_set_num_threads
// is process-wide, so the switch is only made when more than one BLAS thread is configured;
// distgrad-run starts workers with OMP_NUM_THREADS=1, where it never happens.
constexpr double kSingleThreadFlops = 1 << 22;

class SingleBlasThreadScope {
 public:
  explicit SingleBlasThreadScope(bool active) : saved_(active ? openblas_get_num_threads() : 0) {
    if (saved_ > 1) openblas_set_num_threads(1);
  }
  ~SingleBlasThreadScope() {
    if (saved_ > 1) openblas_set_num_threads(saved_);
  }
  SingleBlasThreadScope(const SingleBlasThreadScope&) = delete;
  SingleBlasThreadScope& operator=(const SingleBlasThreadScope&) = delete;

 private:
  int saved_;
};

void gemm(const GemmArgs& args);

// Chosen while the library loads, before the first product (Note [Choosing the BLAS kernels]).
[[maybe_unused]] const BlasKernel& blas_kernel_at_load = blas_kernel();

// Contiguous float32 copies of `count` matrices (rows x cols, leading dimension `ld`, `stride`
// apart; one matrix when the stride is 0) of Half elements at `data`.
template <typename Half>
std::vector<float> widened_matrices(const void* data, int64_t count, int64_t stride, int64_t rows, int64_t cols,
                                    int64_t ld) {
  const Half* in = static_cast<const Half*>(data);
  const int64_t matrices = stride == 0 ? 1 : count;
  std::vector<float> out(static_cast<size_t>(matrices * rows * cols));
  float* next = out.data();
  for (int64_t i = 0; i < matrices; ++i) {
    for (int64_t r = 0; r < rows; ++r, next += cols) {
      cpu::to_float(next, in + i * stride + r * ld, cols);
    }
  }
  return out;
}

// gemm of float16 or bfloat16 operands as cuBLAS's mixed-precision GEMM defines it: products
// accumulated in float32 (sgemm on widened copies), C rounded once (Note [Half precision compute]).
template <typename Half>
void half_gemm(const GemmArgs& args) {
  const int64_t a_rows = args.transpose_a ? args.k : args.m, a_cols = args.transpose_a ? args.m : args.k;
  const int64_t b_rows = args.transpose_b ? args.n : args.k, b_cols = args.transpose_b ? args.k : args.n;
  const std::vector<float> a = widened_matrices<Half>(args.a, args.batch, args.stride_a, a_rows, a_cols, args.lda);
  const std::vector<float> b = widened_matrices<Half>(args.b, args.batch, args.stride_b, b_rows, b_cols, args.ldb);
  std::vector<float> c = args.beta == 0
                             ? std::vector<float>(static_cast<size_t>(args.batch * args.m * args.n))
                             : widened_matrices<Half>(args.c, args.batch, args.stride_c, args.m, args.n, args.ldc);
  GemmArgs wide = args;
  wide.dtype = kFloat32;
  wide.a = a.data();
  wide.lda = a_cols;
  wide.stride_a = args.stride_a == 0 ? 0 : a_rows * a_cols;
  wide.b = b.data();
  wide.ldb = b_cols;
  wide.stride_b = args.stride_b == 0 ? 0 : b_rows * b_cols;
  wide.c = c.data();
  wide.ldc = args.n;
  wide.stride_c = args.m * args.n;
  gemm(wide);
  Half* out = static_cast<Half*>(args.c);
  const float* result = c.data();
  for (int64_t i = 0; i < args.batch; ++i) {
    for (int64_t r = 0; r < args.m; ++r, result += args.n) {
      cpu::from_float(out + i * args.stride_c + r * args.ldc, result, args.n);
    }
  }
}

void gemm(const GemmArgs& args) {
  warn_once_if_blas_kernel_is_slow();
  if (args.dtype == kFloat16) return half_gemm<Float16>(args);
  if (args.dtype == kBFloat16) return half_gemm<BFloat16>(args);
  const double flops = 2.0 * static_cast<double>(args.m) * static_cast<double>(args.n) * static_cast<double>(args.k);
  const SingleBlasThreadScope single_thread(flops < kSingleThreadFlops);
  const auto trans_a = args.transpose_a ? CblasTrans : CblasNoTrans;
  const auto trans_b = args.transpose_b ? CblasTrans : CblasNoTrans;
  for (int64_t i = 0; i < args.batch; ++i) {
    if (args.dtype == kFloat32) {
      cblas_sgemm(CblasRowMajor, trans_a, trans_b, args.m, args.n, args.k, static_cast<float>(args.alpha),
                  static_cast<const float*>(args.a) + i * args.stride_a, args.lda,
                  static_cast<const float*>(args.b) + i * args.stride_b, args.ldb, static_cast<float>(args.beta),
                  static_cast<float*>(args.c) + i * args.stride_c, args.ldc);
    } else {
      DISTGRAD_CHECK(args.dtype == kFloat64, "cpu gemm: expected float32 or float64, found ", args.dtype);
      cblas_dgemm(CblasRowMajor, trans_a, trans_b, args.m, args.n, args.k, args.alpha,
                  static_cast<const double*>(args.a) + i * args.stride_a, args.lda,
                  static_cast<const double*>(args.b) + i * args.stride_b, args.ldb, args.beta,
                  static_cast<double*>(args.c) + i * args.stride_c, args.ldc);
    }
  }
}

void index_select(const Tensor& out, const Tensor& in, const Tensor& index, int64_t outer, int64_t dim_size,
                  int64_t inner) {
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  const int64_t count = index.numel();
  dispatch_dtype(in.dtype(), "index_select", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < count; ++j) {
        std::copy_n(src + (o * dim_size + idx[j]) * inner, inner, dst + (o * count + j) * inner);
      }
    }
  });
}

void cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t length, int64_t inner, bool reverse) {
  dispatch_dtype(in.dtype(), "cumsum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      DISTGRAD_FAIL("cpu cumsum kernel: bool input (convert to int64 first)");
    } else {
      const T* src = static_cast<const T*>(in.data_ptr());
      T* dst = static_cast<T*>(out.data_ptr());
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t step = 0; step < length; ++step) {
          const int64_t i = reverse ? length - 1 - step : step;
          const int64_t previous = reverse ? i + 1 : i - 1;
          const T* row = src + (o * length + i) * inner;
          T* sums = dst + (o * length + i) * inner;
          if (step == 0) {
            std::copy_n(row, inner, sums);
          } else {
            const T* before = dst + (o * length + previous) * inner;
            for (int64_t j = 0; j < inner; ++j) sums[j] = static_cast<T>(before[j] + row[j]);
          }
        }
      }
    }
  });
}

// Calls visit(position, offset_in_other) for every position of contiguous `index`, where the
// offset addresses contiguous `other` at the same coordinates except index[position] along dim.
template <typename Visit>
void for_each_indexed(const Tensor& index, const Tensor& other, int64_t dim, Visit visit) {
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  const Shape& sizes = index.sizes();
  const int64_t ndim = index.dim();
  bool same_except_dim = true;
  for (int64_t d = 0; d < ndim; ++d) same_except_dim &= d == dim || sizes[d] == other.size(d);
  if (same_except_dim) {  // as [outer, dim, inner] in both: no per-element coordinates
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= sizes[d];
    for (int64_t d = dim + 1; d < ndim; ++d) inner *= sizes[d];
    const int64_t along = ndim == 0 ? 1 : sizes[dim], other_along = ndim == 0 ? 1 : other.size(dim);
    int64_t p = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < along; ++j) {
        for (int64_t i = 0; i < inner; ++i, ++p) visit(p, (o * other_along + idx[p]) * inner + i);
      }
    }
    return;
  }
  const Shape other_strides = contiguous_strides(other.sizes());
  Shape coord(ndim, 0);
  const int64_t n = index.numel();
  for (int64_t p = 0; p < n; ++p) {
    int64_t offset = 0;
    for (int64_t d = 0; d < ndim; ++d) offset += (d == dim ? idx[p] : coord[d]) * other_strides[d];
    visit(p, offset);
    for (int64_t d = ndim - 1; d >= 0; --d) {
      if (++coord[d] < sizes[d]) break;
      coord[d] = 0;
    }
  }
}

void gather(const Tensor& out, const Tensor& in, const Tensor& index, int64_t dim) {
  dispatch_dtype(in.dtype(), "gather", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    for_each_indexed(index, in, dim, [&](int64_t p, int64_t offset) { dst[p] = src[offset]; });
  });
}

void scatter_add(const Tensor& self, const Tensor& index, const Tensor& src, int64_t dim) {
  dispatch_dtype(self.dtype(), "scatter_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      DISTGRAD_FAIL("scatter_add: bool tensors cannot be added");
    } else {
      T* dst = static_cast<T*>(self.data_ptr());
      const T* values = static_cast<const T*>(src.data_ptr());
      if (src.sizes() == index.sizes()) {  // src at the same positions as index
        for_each_indexed(index, self, dim, [&](int64_t p, int64_t offset) { dst[offset] += values[p]; });
        return;
      }
      const Shape src_strides = contiguous_strides(src.sizes());
      const Shape index_strides = contiguous_strides(index.sizes());
      for_each_indexed(index, self, dim, [&](int64_t p, int64_t offset) {
        // Same coordinates in src, which may be larger than index.
        int64_t src_offset = 0, rest = p;
        for (int64_t d = 0; d < index.dim(); ++d) {
          src_offset += rest / index_strides[d] * src_strides[d];
          rest %= index_strides[d];
        }
        dst[offset] += values[src_offset];
      });
    }
  });
}

// One row of im2col's columns: kernel position (ki, kj) of every window over one image plane.
template <typename T>
void im2col_row(const T* image, T* out, const Window2d& w, int64_t ki, int64_t kj) {
  const int64_t shift = kj * w.dilation_w - w.pad_w;  // with stride_w 1, column ow reads iw = ow + shift
  const int64_t begin = std::clamp<int64_t>(-shift, 0, w.out_w);
  const int64_t end = std::clamp<int64_t>(w.width - shift, begin, w.out_w);
  if (w.stride_h == 1 && w.stride_w == 1 && w.out_w == w.width && begin < end) {
    // Window rows [first, last) read consecutive image rows as long as the columns: one block
    // copy, then zeros over the columns that read padding (the block put neighbours there).
    const int64_t offset = ki * w.dilation_h - w.pad_h;  // window row oh reads image row oh + offset
    const int64_t first = std::clamp<int64_t>(-offset, 0, w.out_h);
    const int64_t last = std::clamp<int64_t>(w.height - offset, first, w.out_h);
    std::fill(out, out + first * w.out_w, T(0));
    if (first < last) {
      const T* from = image + (first + offset) * w.width + begin + shift;
      std::copy(from, from + (last - first - 1) * w.out_w + (end - begin), out + first * w.out_w + begin);
      for (int64_t oh = first; oh < last; ++oh) {
        T* line = out + oh * w.out_w;
        for (int64_t ow = 0; ow < begin; ++ow) line[ow] = T(0);
        for (int64_t ow = end; ow < w.out_w; ++ow) line[ow] = T(0);
      }
    }
    std::fill(out + last * w.out_w, out + w.out_h * w.out_w, T(0));
    return;
  }
  for (int64_t oh = 0; oh < w.out_h; ++oh) {
    const int64_t ih = oh * w.stride_h - w.pad_h + ki * w.dilation_h;
    T* line = out + oh * w.out_w;
    if (w.stride_w == 1) {  // a window row reads a contiguous run of the image row
      if (ih < 0 || ih >= w.height) {
        std::fill(line, line + w.out_w, T(0));
        continue;
      }
      std::fill(line, line + begin, T(0));
      const T* row_start = image + ih * w.width;
      std::copy(row_start + (begin + shift), row_start + (end + shift), line + begin);
      std::fill(line + end, line + w.out_w, T(0));
      continue;
    }
    for (int64_t ow = 0; ow < w.out_w; ++ow) {
      const int64_t iw = ow * w.stride_w - w.pad_w + kj * w.dilation_w;
      const bool inside = ih >= 0 && ih < w.height && iw >= 0 && iw < w.width;
      line[ow] = inside ? image[ih * w.width + iw] : T(0);
    }
  }
}

void im2col(const Tensor& col, const Tensor& in, const Window2d& w) {
  dispatch_floating(in.dtype(), "im2col", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(col.data_ptr());
    const int64_t rows = w.channels * w.kernel_h * w.kernel_w;
    const int64_t plane = w.out_h * w.out_w;
    const int64_t image_stride = col.stride(0), row_stride = col.stride(1);
#pragma omp parallel for collapse(2) if (w.batch * rows * plane >= cpu::kParallelGrain)
    for (int64_t n = 0; n < w.batch; ++n) {
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t c = row / (w.kernel_h * w.kernel_w);
        im2col_row(src + (n * w.channels + c) * w.height * w.width, dst + n * image_stride + row * row_stride, w,
                   row / w.kernel_w % w.kernel_h, row % w.kernel_w);
      }
    }
  });
}

// Gathers rather than scatters: each image element sums, in (ki, kj) order and in T (as
// PyTorch's col2im: at most kernel_h * kernel_w terms), the column entries that read it, so planes run in parallel
// without sharing writes and the order is the CUDA kernel's. Offset h = ih + pad_h - ki * dilation_h is oh * stride_h
// for the window row oh that reads ih through ki; it falls as ki grows, so the first negative one ends the loop.
void col2im(const Tensor& image, const Tensor& col, const Window2d& w) {
  dispatch_floating(col.dtype(), "col2im", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(col.data_ptr());
    T* dst = static_cast<T*>(image.data_ptr());
    const int64_t planes = w.batch * w.channels;
    const int64_t area = w.kernel_h * w.kernel_w;
    const int64_t windows = w.out_h * w.out_w;
#pragma omp parallel for if (planes * area * windows >= cpu::kParallelGrain)
    for (int64_t p = 0; p < planes; ++p) {
      const T* rows = src + p * area * windows;  // the kernel_h * kernel_w rows of plane p's channel
      T* out = dst + p * w.height * w.width;
      if (w.stride_h == 1 && w.stride_w == 1) {
        // Window row oh of kernel row ki reads image row ih = oh - pad_h + ki * dilation_h, and
        // its column ow reads ow + shift: add each such run into the zeroed plane, (ki, kj)
        // outermost, so every element sums the same entries in the same order as below,
        // without a division per element.
        std::fill(out, out + w.height * w.width, T(0));
        for (int64_t ki = 0; ki < w.kernel_h; ++ki) {
          for (int64_t kj = 0; kj < w.kernel_w; ++kj) {
            const T* row = rows + (ki * w.kernel_w + kj) * windows;
            const int64_t shift = kj * w.dilation_w - w.pad_w;
            const int64_t begin = std::clamp<int64_t>(-shift, 0, w.out_w);
            const int64_t end = std::clamp<int64_t>(w.width - shift, begin, w.out_w);
            for (int64_t oh = 0; oh < w.out_h; ++oh) {
              const int64_t ih = oh - w.pad_h + ki * w.dilation_h;
              if (ih < 0 || ih >= w.height) continue;
              T* line = out + ih * w.width + shift;
              const T* values = row + oh * w.out_w;
              for (int64_t ow = begin; ow < end; ++ow) line[ow] += values[ow];
            }
          }
        }
        continue;
      }
      for (int64_t ih = 0; ih < w.height; ++ih) {
        for (int64_t iw = 0; iw < w.width; ++iw) {
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
          out[ih * w.width + iw] = total;
        }
      }
    }
  });
}

// The sizes of one plane's windows when every window lies inside the image (no padding, no
// dilation, no ceil_mode overhang), passed by value: inside an OpenMP region variables of the
// enclosing function are reached through pointers that stores of int64 indices could alias.
struct InsideWindows {
  int64_t width, out_h, out_w, stride_h, stride_w;
};

// Whether `value` replaces `best` as a window's maximum met in (ki, kj) order: a larger value, or
// the first NaN (NaN wins, then the first maximum): `value <= best` fails for a larger value and
// for NaN, and a NaN best is never replaced. Bitwise operators keep it branch-free; on vectors
// (SimdLanes below) it gives each lane's answer as an all-ones or all-zeros mask.
template <typename V>
auto takes_over(V value, V best) {
  return ((value <= best) == 0) & (best == best);
}

// The maximum of the kernel_h x kernel_w window whose top-left element is image[first], all of it
// inside the image, into *best_out, and its flat position into *index_out.
template <typename T>
void max_of_window_inside(const T* image, int64_t first, int64_t width, int64_t kernel_h, int64_t kernel_w, T* best_out,
                          int64_t* index_out) {
  int64_t best_index = first;
  T best = image[first];
  for (int64_t ki = 0; ki < kernel_h; ++ki) {
    const int64_t row = first + ki * width;
    for (int64_t kj = 0; kj < kernel_w; ++kj) {
      const T value = image[row + kj];
      const bool take = takes_over(value, best);
      best = take ? value : best;
      best_index = take ? row + kj : best_index;
    }
  }
  *best_out = best;
  *index_out = best_index;
}

// Max over every window of one plane when all windows lie inside it.
template <typename T>
void max_pool_plane_inside(const T* image, T* best_out, int64_t* index_out, InsideWindows d, int64_t kernel_h,
                           int64_t kernel_w) {
  for (int64_t oh = 0; oh < d.out_h; ++oh) {
    for (int64_t ow = 0; ow < d.out_w; ++ow) {
      max_of_window_inside(image, oh * d.stride_h * d.width + ow * d.stride_w, d.width, kernel_h, kernel_w,
                           best_out + oh * d.out_w + ow, index_out + oh * d.out_w + ow);
    }
  }
}

// 16 bytes of T (4 floats or 2 doubles) and as many signed integers of T's size, as GCC vector
// extensions (SSE2 on x86-64, NEON on ARM): comparisons give all-ones lanes, `mask ? a : b`
// selects lane by lane.
template <typename T>
struct SimdLanes {
  static constexpr int kCount = 16 / sizeof(T);
  using Integer = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  using Values __attribute__((vector_size(16))) = T;
  using Integers __attribute__((vector_size(16))) = Integer;
  // Flat positions in a plane, one per lane: indices' type.
  using Positions __attribute__((vector_size(kCount * sizeof(int64_t)))) = int64_t;
};

// The common 2 x 2 window with stride 2, a vector of windows at a time: the same selects as
// above, on the window's values in (ki, kj) order, with no branch for the data to mislead. A row
// whose windows do not fill whole vectors ends with a vector overlapping the one before it (its
// windows are computed twice, to the same values); rows narrower than a vector go one window at a
// time.
template <typename T>
void max_pool_plane_2x2(const T* image, T* best_out, int64_t* index_out, InsideWindows d) {
  using Lanes = SimdLanes<T>;
  using Values = typename Lanes::Values;
  using Integers = typename Lanes::Integers;
  constexpr int kLanes = Lanes::kCount;
  Integers even_lanes, odd_lanes;
  for (int lane = 0; lane < kLanes; ++lane) {
    even_lanes[lane] = 2 * lane;
    odd_lanes[lane] = 2 * lane + 1;
  }
  // Lanes `pick` of the 2 * kLanes values from p: the even or the odd ones.
  const auto load = [](const T* p, Integers pick) {
    Values low, high;
    std::memcpy(&low, p, sizeof(Values));
    std::memcpy(&high, p + kLanes, sizeof(Values));
    return __builtin_shuffle(low, high, pick);
  };
  const auto splat = [](int64_t value) { return Integers{} + static_cast<typename Lanes::Integer>(value); };
  const Integers offsets[3] = {splat(1), splat(d.width), splat(d.width + 1)};
  using Positions = typename Lanes::Positions;
  Positions lane_columns;
  for (int lane = 0; lane < kLanes; ++lane) lane_columns[lane] = 2 * lane;
  for (int64_t oh = 0; oh < d.out_h; ++oh) {
    const int64_t row_start = 2 * oh * d.width;
    const T* top = image + row_start;
    const T* bottom = top + d.width;
    T* out = best_out + oh * d.out_w;
    int64_t* index = index_out + oh * d.out_w;
    if (d.out_w < kLanes) {
      for (int64_t ow = 0; ow < d.out_w; ++ow) {
        max_of_window_inside(image, row_start + 2 * ow, d.width, 2, 2, out + ow, index + ow);
      }
      continue;
    }
    for (int64_t next = 0; next < d.out_w; next += kLanes) {
      const int64_t ow = std::min(next, d.out_w - kLanes);
      const Values candidates[3] = {load(top + 2 * ow, odd_lanes), load(bottom + 2 * ow, even_lanes),
                                    load(bottom + 2 * ow, odd_lanes)};
      Values best = load(top + 2 * ow, even_lanes);
      Integers offset{};
      for (int k = 0; k < 3; ++k) {
        const Integers take = takes_over(candidates[k], best);
        best = take ? candidates[k] : best;
        offset = take ? offsets[k] : offset;
      }
      std::memcpy(out + ow, &best, sizeof(Values));
      const Positions positions = __builtin_convertvector(offset, Positions) + lane_columns + (row_start + 2 * ow);
      std::memcpy(index + ow, &positions, sizeof(Positions));
    }
  }
}

// Any window: positions in the padding are skipped (padding never wins).
template <typename T>
void max_pool_plane(const T* image, T* best_out, int64_t* index_out, Window2d w) {
  for (int64_t oh = 0; oh < w.out_h; ++oh) {
    for (int64_t ow = 0; ow < w.out_w; ++ow) {
      T best = -std::numeric_limits<T>::infinity();
      int64_t best_index = -1;
      for (int64_t ki = 0; ki < w.kernel_h; ++ki) {
        const int64_t ih = oh * w.stride_h - w.pad_h + ki * w.dilation_h;
        if (ih < 0 || ih >= w.height) continue;
        for (int64_t kj = 0; kj < w.kernel_w; ++kj) {
          const int64_t iw = ow * w.stride_w - w.pad_w + kj * w.dilation_w;
          if (iw < 0 || iw >= w.width) continue;
          const T value = image[ih * w.width + iw];
          if (best_index < 0 || takes_over(value, best)) {
            best = value;
            best_index = ih * w.width + iw;
          }
        }
      }
      best_out[oh * w.out_w + ow] = best;
      index_out[oh * w.out_w + ow] = best_index;
    }
  }
}

// Whether every window lies inside the image: no padding, no dilation, no ceil_mode overhang.
bool windows_inside(const Window2d& w) {
  return w.pad_h == 0 && w.pad_w == 0 && w.dilation_h == 1 && w.dilation_w == 1 &&
         (w.out_h - 1) * w.stride_h + w.kernel_h <= w.height && (w.out_w - 1) * w.stride_w + w.kernel_w <= w.width;
}

bool two_by_two_windows(const Window2d& w) {
  return w.kernel_h == 2 && w.kernel_w == 2 && w.stride_h == 2 && w.stride_w == 2;
}

void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& in, const Window2d& w) {
  dispatch_floating(in.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    int64_t* idx = static_cast<int64_t*>(indices.data_ptr());
    const int64_t planes = w.batch * w.channels, plane = w.height * w.width, out_plane = w.out_h * w.out_w;
    const bool inside = windows_inside(w), two_by_two = two_by_two_windows(w);
    const InsideWindows d{w.width, w.out_h, w.out_w, w.stride_h, w.stride_w};
#pragma omp parallel for if (planes * out_plane >= cpu::kParallelGrain)
    for (int64_t p = 0; p < planes; ++p) {
      const T* image = src + p * plane;
      T* best_out = dst + p * out_plane;
      int64_t* index_out = idx + p * out_plane;
      if (inside && two_by_two) {
        max_pool_plane_2x2(image, best_out, index_out, d);
      } else if (inside) {
        max_pool_plane_inside(image, best_out, index_out, d, w.kernel_h, w.kernel_w);
      } else {
        max_pool_plane(image, best_out, index_out, w);
      }
    }
  });
}

// The adjoint of max_pool_plane_2x2 when every index names a position of its own window (as
// max_pool2d's do): each window's four positions are written once, the output's gradient where
// its index points and 0 elsewhere, a vector of windows at a time (the last vector of a row may
// overlap the one before), and what no window covers (the last row or column of an odd size)
// is zeroed. Returns false, having written part of the plane, when an index lies outside its
// window, or when rows are narrower than a vector of windows or the plane too large for int32
// offsets.
template <typename T>
bool max_pool_plane_2x2_backward(T* image, const T* g, const int64_t* from, InsideWindows d, int64_t height) {
  using Lanes = SimdLanes<T>;
  using Values = typename Lanes::Values;
  using Integers = typename Lanes::Integers;
  using Positions = typename Lanes::Positions;
  constexpr int kLanes = Lanes::kCount;
  if (d.out_w < kLanes || height * d.width > std::numeric_limits<int32_t>::max()) return false;
  Positions lane_columns;
  Integers first_half, second_half;  // interleaving picks: lane k of one vector, then of the other
  for (int lane = 0; lane < kLanes; ++lane) {
    lane_columns[lane] = 2 * lane;
    first_half[lane] = lane / 2 + lane % 2 * kLanes;
    second_half[lane] = (kLanes + lane) / 2 + lane % 2 * kLanes;
  }
  const auto splat = [](int64_t value) { return Integers{} + static_cast<typename Lanes::Integer>(value); };
  const Integers window_offsets[4] = {splat(0), splat(1), splat(d.width), splat(d.width + 1)};
  const auto put = [&](T* line, Values even, Values odd) {
    const Values first = __builtin_shuffle(even, odd, first_half), second = __builtin_shuffle(even, odd, second_half);
    std::memcpy(line, &first, sizeof(Values));
    std::memcpy(line + kLanes, &second, sizeof(Values));
  };
  for (int64_t oh = 0; oh < d.out_h; ++oh) {
    const int64_t row_start = 2 * oh * d.width;
    T* top = image + row_start;
    T* bottom = top + d.width;
    for (int64_t next = 0; next < d.out_w; next += kLanes) {
      const int64_t ow = std::min(next, d.out_w - kLanes);
      Positions index;
      Values grad;
      std::memcpy(&index, from + oh * d.out_w + ow, sizeof(Positions));
      std::memcpy(&grad, g + oh * d.out_w + ow, sizeof(Values));
      const Integers offset = __builtin_convertvector(index - lane_columns - (row_start + 2 * ow), Integers);
      Integers at[4], anywhere{};
      for (int k = 0; k < 4; ++k) anywhere |= at[k] = offset == window_offsets[k];
      for (int lane = 0; lane < kLanes; ++lane) {
        if (anywhere[lane] == 0) return false;
      }
      const Values zero{};
      put(top + 2 * ow, at[0] ? grad : zero, at[1] ? grad : zero);
      put(bottom + 2 * ow, at[2] ? grad : zero, at[3] ? grad : zero);
    }
    if (d.width % 2 != 0) top[d.width - 1] = bottom[d.width - 1] = T(0);
  }
  if (height % 2 != 0) std::fill(image + (height - 1) * d.width, image + height * d.width, T(0));
  return true;
}

// Each plane of grad_input is zeroed and filled while it is in cache; 2 x 2 windows with stride
// 2 write each position once instead, unless an index lies outside its window.
int64_t max_pool2d_backward(const Tensor& grad_input, const Tensor& grad_output, const Tensor& indices,
                            const Window2d& w) {
  int64_t outside = 0;
  dispatch_floating(grad_input.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* grad = static_cast<const T*>(grad_output.data_ptr());
    const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
    T* dst = static_cast<T*>(grad_input.data_ptr());
    const int64_t planes = w.batch * w.channels, plane = w.height * w.width, out_plane = w.out_h * w.out_w;
    const bool two_by_two = windows_inside(w) && two_by_two_windows(w);
    const InsideWindows d{w.width, w.out_h, w.out_w, w.stride_h, w.stride_w};
    int64_t count = 0;  // a local: the reduction's variable, not the captured reference
#pragma omp parallel for reduction(+ : count) if (planes * plane >= cpu::kParallelGrain)
    for (int64_t p = 0; p < planes; ++p) {
      T* image = dst + p * plane;
      const T* g = grad + p * out_plane;
      const int64_t* from = idx + p * out_plane;
      if (two_by_two && max_pool_plane_2x2_backward(image, g, from, d, w.height)) continue;
      std::fill(image, image + plane, T(0));
      for (int64_t o = 0; o < out_plane; ++o) {
        const int64_t position = from[o];
        const bool valid = static_cast<uint64_t>(position) < static_cast<uint64_t>(plane);
        count += !valid;
        if (valid) image[position] += g[o];
      }
    }
    outside = count;
  });
  return outside;
}

void avg_pool2d(const Tensor& out, const Tensor& in, const Window2d& w, bool count_include_pad) {
  dispatch_floating(in.dtype(), "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    const int64_t planes = w.batch * w.channels;
#pragma omp parallel for if (planes * w.out_h * w.out_w >= cpu::kParallelGrain)
    for (int64_t p = 0; p < planes; ++p) {
      const T* image = src + p * w.height * w.width;
      for (int64_t oh = 0; oh < w.out_h; ++oh) {
        for (int64_t ow = 0; ow < w.out_w; ++ow) {
          int64_t h0 = oh * w.stride_h - w.pad_h, w0 = ow * w.stride_w - w.pad_w;
          int64_t h1 = std::min(h0 + w.kernel_h, w.height + w.pad_h);
          int64_t w1 = std::min(w0 + w.kernel_w, w.width + w.pad_w);
          const int64_t padded_count = (h1 - h0) * (w1 - w0);
          h0 = std::max<int64_t>(h0, 0);
          w0 = std::max<int64_t>(w0, 0);
          h1 = std::min(h1, w.height);
          w1 = std::min(w1, w.width);
          AccumulateType<T> total = 0;
          for (int64_t ih = h0; ih < h1; ++ih) {
            for (int64_t iw = w0; iw < w1; ++iw) total += image[ih * w.width + iw];
          }
          const int64_t divisor = count_include_pad ? padded_count : (h1 - h0) * (w1 - w0);
          dst[(p * w.out_h + oh) * w.out_w + ow] = static_cast<T>(total / divisor);
        }
      }
    }
  });
}

}  // namespace

const DeviceKernels& cpu_kernels() {
  static const DeviceKernels table{
      .fill = fill,
      .copy = copy,
      .unary = unary,
      .binary = binary,
      .binary_scalar = binary_scalar,
      .where = where,
      .reduce = reduce,
      .reduce_products = reduce_products,
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
      .winograd_input_tiles = cpu_winograd::input_tiles,
      .winograd_input_tiles_adjoint = cpu_winograd::input_tiles_adjoint,
      .winograd_output_tiles = cpu_winograd::output_tiles,
      .winograd_output_grad_tiles = cpu_winograd::output_grad_tiles,
      .winograd_filters = cpu_winograd::filters,
      .winograd_filters_adjoint = cpu_winograd::filters_adjoint,
      .batch_norm = cpu_batch_norm::forward,
      .batch_norm_backward = cpu_batch_norm::backward,
      .batch_norm_double_backward = cpu_batch_norm::double_backward,
  };
  return table;
}

}  // namespace distgrad::kernels
