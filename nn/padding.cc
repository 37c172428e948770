#include "nn/padding.h"

#include "absl/strings/str_join.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/ops.h"

namespace distgrad::nn {
namespace {

const char* mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::kConstant: return "constant";
    case PadMode::kReflect: return "reflect";
    case PadMode::kReplicate: return "replicate";
    case PadMode::kCircular: return "circular";
  }
  return "unknown";
}

// The positions along a dim of `size` that pad `before` and `after` take from, in order, for
// the modes that copy elements of the input.
std::vector<int64_t> source_positions(PadMode mode, int64_t size, int64_t before, int64_t after) {
  std::vector<int64_t> positions;
  for (int64_t i = -before; i < size + after; ++i) {
    int64_t source = i;
    if (mode == PadMode::kReflect) {
      source = i < 0 ? -i : (i >= size ? 2 * (size - 1) - i : i);
    } else if (mode == PadMode::kReplicate) {
      source = i < 0 ? 0 : (i >= size ? size - 1 : i);
    } else {
      source = ((i % size) + size) % size;
    }
    positions.push_back(source);
  }
  return positions;
}

// `x` padded with `value` (or cropped, for negative amounts) along dim.
Tensor pad_constant(const Tensor& x, int64_t dim, int64_t before, int64_t after, double value) {
  Tensor result = x;
  if (before < 0) result = narrow(result, dim, -before, result.size(dim) + before);
  if (after < 0) result = narrow(result, dim, 0, result.size(dim) + after);
  std::vector<Tensor> parts;
  const auto filler = [&](int64_t count) {
    Shape sizes = result.sizes();
    sizes[dim] = count;
    return full(sizes, value, {.dtype = x.dtype(), .device = x.device()});
  };
  if (before > 0) parts.push_back(filler(before));
  parts.push_back(result);
  if (after > 0) parts.push_back(filler(after));
  return parts.size() == 1 ? result : cat(parts, dim);
}

}  // namespace

Tensor pad(const Tensor& input, const std::vector<int64_t>& pad, PadMode mode, double value) {
  input.check_defined("pad");
  const int64_t pairs = static_cast<int64_t>(pad.size()) / 2;
  DISTGRAD_CHECK(pad.size() % 2 == 0 && pairs <= input.dim(), "pad: expected (before, after) pairs for at most the ",
                 input.dim(), " dims of input ", shape_str(input.sizes()), ", found pad {", absl::StrJoin(pad, ", "),
                 "}");
  DISTGRAD_CHECK(mode == PadMode::kConstant || value == 0, "pad: a value is only used in constant mode, found mode ",
                 mode_name(mode), " with value ", value);
  Tensor result = input;
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t dim = input.dim() - 1 - pair;
    const int64_t before = pad[2 * pair], after = pad[2 * pair + 1];
    const int64_t size = input.size(dim);
    if (mode == PadMode::kConstant) {
      DISTGRAD_CHECK(size + before + after >= 0, "pad: cropping dim ", dim, " of size ", size, " by ", before, " and ",
                     after, " leaves a negative size");
      result = pad_constant(result, dim, before, after, value);
      continue;
    }
    DISTGRAD_CHECK(before >= 0 && after >= 0, "pad: expected non-negative amounts in ", mode_name(mode),
                   " mode, found ", before, " and ", after, " for dim ", dim);
    if (before == 0 && after == 0) continue;
    const int64_t limit = mode == PadMode::kReflect ? size - 1 : (mode == PadMode::kCircular ? size : -1);
    DISTGRAD_CHECK(size > 0 && (limit < 0 || (before <= limit && after <= limit)), "pad: ", mode_name(mode),
                   " padding of ", before, " and ", after, " needs ",
                   mode == PadMode::kReflect ? "amounts smaller than" : "amounts at most", " the size ", size,
                   " of dim ", dim, " of input ", shape_str(input.sizes()));
    const std::vector<int64_t> positions = source_positions(mode, size, before, after);
    const Tensor index = from_vector(positions, input.device());
    result = index_select(result, dim, index);
  }
  return result;
}

}  // namespace distgrad::nn
