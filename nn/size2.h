// Size2: the height and width of a 2-D layer's kernel, stride, padding or dilation.
//
// Like PyTorch's int-or-pair arguments, a single number stands for both: `Conv2d(3, 8, 3)` is
// a 3x3 kernel, `{.stride = {2, 1}}` strides by 2 along the height and 1 along the width.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace distgrad::nn {

struct Size2 {
  // Implicit on purpose, so that a plain number can be written wherever a Size2 is expected.
  Size2(int64_t both) : values{both, both} {}  // NOLINT(google-explicit-constructor)
  Size2(int64_t height, int64_t width) : values{height, width} {}

  // "3" when height and width are equal, else "(3, 1)" (for layer names).
  std::string str() const;

  std::array<int64_t, 2> values;
};

}  // namespace distgrad::nn
