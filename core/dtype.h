// Element types of a Tensor and the compile-time dispatch from a DType to a C++ type.
//
//   dispatch_dtype(t.dtype(), "sum", [&](auto tag) {
//     using T = typename decltype(tag)::type;   // float, double, int64_t or bool
//     ...
//   });
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "core/error.h"

namespace distgrad {

enum class DType : uint8_t { kFloat32, kFloat64, kInt64, kBool };

inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kFloat64 = DType::kFloat64;
inline constexpr DType kInt64 = DType::kInt64;
inline constexpr DType kBool = DType::kBool;

constexpr size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt64: return 8;
    case DType::kBool: return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
  }
  return "unknown";
}

constexpr bool is_floating(DType dtype) { return dtype == kFloat32 || dtype == kFloat64; }

inline std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return kFloat32;
  else if constexpr (std::is_same_v<T, double>) return kFloat64;
  else if constexpr (std::is_same_v<T, int64_t>) return kInt64;
  else if constexpr (std::is_same_v<T, bool>) return kBool;
  else static_assert(!sizeof(T), "distgrad tensors hold float, double, int64_t or bool");
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls `fn(TypeTag<T>{})` with the C++ type of `dtype`.
template <typename Fn>
decltype(auto) dispatch_dtype(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(TypeTag<float>{});
    case DType::kFloat64: return fn(TypeTag<double>{});
    case DType::kInt64: return fn(TypeTag<int64_t>{});
    case DType::kBool: return fn(TypeTag<bool>{});
  }
  DISTGRAD_FAIL(op, ": unknown dtype ", static_cast<int>(dtype));
}

// Like dispatch_dtype, but only for float32 and float64; other dtypes are an error naming `op`.
template <typename Fn>
decltype(auto) dispatch_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(TypeTag<float>{});
    case DType::kFloat64: return fn(TypeTag<double>{});
    default: break;
  }
  DISTGRAD_FAIL(op, ": expected a float32 or float64 tensor, found ", dtype_name(dtype));
}

}  // namespace distgrad
