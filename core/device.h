// Where a tensor's memory lives: the CPU, or one CUDA device by index.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace distgrad {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  static constexpr Device cpu() { return {DeviceType::kCPU, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }

  constexpr bool is_cpu() const { return type == DeviceType::kCPU; }
  constexpr bool is_cuda() const { return type == DeviceType::kCUDA; }
  friend constexpr bool operator==(Device a, Device b) = default;

  // "cpu" or "cuda:N".
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

inline std::ostream& operator<<(std::ostream& out, Device device) { return out << device.str(); }

}  // namespace distgrad
