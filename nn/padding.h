// Padding (torch.nn.functional.pad): constant, reflect, replicate and circular.
//
// `pad` lists (before, after) pairs starting from the last dim, as in PyTorch: {1, 2} pads the
// last dim with 1 element before and 2 after; {1, 1, 2, 2} also pads the second-to-last dim by 2
// on each side. A negative amount crops (constant mode only). Differentiable to any order.
//
//   dg::Tensor y = dg::nn::pad(images, {1, 1, 1, 1}, dg::nn::PadMode::kReflect);   // [N, C, H + 2, W + 2]
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace distgrad::nn {

enum class PadMode {
  kConstant,   // `value`
  kReflect,    // the elements mirrored without the edge: [a b c] -> [c b | a b c | b a]; pad < size
  kReplicate,  // the edge repeated: [a b c] -> [a a | a b c | c c]
  kCircular,   // wrapped around: [a b c] -> [b c | a b c | a b]; pad <= size
};

Tensor pad(const Tensor& input, const std::vector<int64_t>& pad, PadMode mode = PadMode::kConstant, double value = 0);

}  // namespace distgrad::nn
