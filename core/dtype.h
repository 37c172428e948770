// Element types of a Tensor and the compile-time dispatch from a DType to a C++ type.
//
//   dispatch_dtype(t.dtype(), "sum", [&](auto tag) {
//     using T = typename decltype(tag)::type;   // float, double, int64_t or bool
//     ...
//   });
//
// float16 and bfloat16 (core/half.h) are computed in float32 and rounded back once per op
// (Note [Half precision compute] in core/op_checks.h): the ops widen them before reaching a
// kernel, so dispatch_dtype refuses them, naming the op; the kernels that only move data use
// dispatch_storage_dtype, which includes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/half.h"

namespace distgrad {

// The values are the wire's (proto TensorMeta.dtype): new dtypes go at the end.
enum class DType : uint8_t { kFloat32, kFloat64, kInt64, kBool, kFloat16, kBFloat16 };

inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kFloat64 = DType::kFloat64;
inline constexpr DType kInt64 = DType::kInt64;
inline constexpr DType kBool = DType::kBool;
inline constexpr DType kFloat16 = DType::kFloat16;
inline constexpr DType kBFloat16 = DType::kBFloat16;
inline constexpr DType kLastDType = DType::kBFloat16;

constexpr size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt64: return 8;
    case DType::kBool: return 1;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
  }
  return 0;
}

constexpr const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

constexpr bool is_half(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16; }
// The floating dtypes (torch.is_floating_point): float32, float64 and the half ones.
constexpr bool is_floating(DType dtype) { return dtype == kFloat32 || dtype == kFloat64 || is_half(dtype); }

// The dtype two floating dtypes compute in together (torch.promote_types): the wider one, and
// float32 for float16 with bfloat16 (neither holds the other's values).
constexpr DType promote_floating(DType a, DType b) {
  if (a == b) return a;
  if (a == kFloat64 || b == kFloat64) return kFloat64;
  return kFloat32;
}

inline std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return kFloat32;
  else if constexpr (std::is_same_v<T, double>) return kFloat64;
  else if constexpr (std::is_same_v<T, int64_t>) return kInt64;
  else if constexpr (std::is_same_v<T, bool>) return kBool;
  else if constexpr (std::is_same_v<T, Float16>) return kFloat16;
  else if constexpr (std::is_same_v<T, BFloat16>) return kBFloat16;
  else static_assert(!sizeof(T), "distgrad tensors hold float, double, int64_t, bool, Float16 or BFloat16");
}

template <typename T>
struct TypeTag {
  using type = T;
};

// The error of a kernel reached with float16 or bfloat16, which ops widen to float32 first.
[[noreturn]] void fail_on_half_kernel(DType dtype, const char* op);

// Calls `fn(TypeTag<T>{})` with the C++ type of `dtype`; float16 and bfloat16 are an error
// naming `op` (the ops widen them to float32 before calling a kernel).
template <typename Fn>
decltype(auto) dispatch_dtype(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(TypeTag<float>{});
    case DType::kFloat64: return fn(TypeTag<double>{});
    case DType::kInt64: return fn(TypeTag<int64_t>{});
    case DType::kBool: return fn(TypeTag<bool>{});
    case DType::kFloat16:
    case DType::kBFloat16: fail_on_half_kernel(dtype, op);
  }
  DISTGRAD_FAIL(op, ": unknown dtype ", static_cast<int>(dtype));
}

// Like dispatch_dtype, and float16 and bfloat16 too (as Float16 and BFloat16): for the kernels
// that only move or convert elements (fill, copy).
template <typename Fn>
decltype(auto) dispatch_storage_dtype(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat16: return fn(TypeTag<Float16>{});
    case DType::kBFloat16: return fn(TypeTag<BFloat16>{});
    default: return dispatch_dtype(dtype, op, std::forward<Fn>(fn));
  }
}

// Like dispatch_dtype, but only for float32 and float64; other dtypes are an error naming `op`.
template <typename Fn>
decltype(auto) dispatch_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(TypeTag<float>{});
    case DType::kFloat64: return fn(TypeTag<double>{});
    default: break;
  }
  DISTGRAD_FAIL(op, ": expected a floating tensor, found ", dtype_name(dtype));
}

}  // namespace distgrad
