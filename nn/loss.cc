#include "nn/loss.h"

#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad::nn {
namespace {

using autograd::BackwardContext;
using autograd::TensorList;

Tensor reduce(const Tensor& losses, Reduction reduction) {
  switch (reduction) {
    case Reduction::kNone: return losses;
    case Reduction::kMean: return mean(losses);
    case Reduction::kSum: return sum(losses);
  }
  DISTGRAD_FAIL("unknown Reduction ", static_cast<int>(reduction));
}

// Checks what every elementwise loss needs: defined, floating, the same dtype and shape.
void check_same_floating(const char* loss, const char* input_name, const Tensor& input, const Tensor& target) {
  input.check_defined(loss);
  target.check_defined(loss);
  DISTGRAD_CHECK(is_floating(input.dtype()), loss, ": expected a float32 or float64 ", input_name, ", found a ",
                 input.describe());
  DISTGRAD_CHECK(input.sizes() == target.sizes(), loss, ": expected ", input_name,
                 " and target of the same shape, found ", input_name, " ", shape_str(input.sizes()), " and target ",
                 shape_str(target.sizes()));
  DISTGRAD_CHECK(input.dtype() == target.dtype() && input.device() == target.device(), loss,
                 ": expected a target with the dtype and device of the ", input_name, " (", dtype_name(input.dtype()),
                 " on ", input.device().str(), "), found a ", target.describe());
}

// -scores[i, target[i]], with the arguments checked under the name `loss`.
Tensor negative_gathered(const char* loss, const char* scores_name, const Tensor& scores, const Tensor& target) {
  scores.check_defined(loss);
  target.check_defined(loss);
  DISTGRAD_CHECK(is_floating(scores.dtype()) && scores.dim() == 2, loss, ": expected ", scores_name,
                 " of shape [N, C] and a floating dtype, found a ", scores.describe());
  DISTGRAD_CHECK(target.dtype() == kInt64, loss, ": expected a target of int64 class indices, found a ",
                 target.describe());
  DISTGRAD_CHECK(target.dim() == 1 && target.size(0) == scores.size(0), loss, ": expected a target of shape [",
                 scores.size(0), "] for ", scores_name, " of shape ", shape_str(scores.sizes()), ", found ",
                 shape_str(target.sizes()));
  DISTGRAD_CHECK(target.device() == scores.device(), loss, ": expected the target on ", scores.device().str(),
                 ", found a ", target.describe());
  const int64_t classes = scores.size(1);
  if (target.numel() > 0) {
    const int64_t lowest = untracked::min(target).item<int64_t>();
    const int64_t highest = untracked::max(target).item<int64_t>();
    const int64_t offending = lowest < 0 ? lowest : highest;
    DISTGRAD_CHECK(lowest >= 0 && highest < classes, loss, ": target index ", offending, " is out of range for ",
                   classes, " classes [0, ", classes, ")");
  }
  return neg(squeeze(gather(scores, 1, untracked::unsqueeze(target, 1)), 1));
}

// The elementwise binary cross entropy, recorded as one op whose gradients are PyTorch's
// formulas (finite where a probability is exactly 0 or 1), written with differentiable ops so
// that they can be differentiated again.
Tensor binary_cross_entropy_elementwise(const Tensor& p, const Tensor& target) {
  Tensor losses = untracked::neg(
      untracked::add(untracked::mul(target, untracked::clamp(untracked::log(p), -100.0, std::nullopt)),
                     untracked::mul(untracked::sub(ones_like(target), target),
                                    untracked::clamp(untracked::log1p(untracked::neg(p)), -100.0, std::nullopt))));
  if (auto node =
          autograd::record("BinaryCrossEntropyBackward", {&p, &target}, {&losses}, [](const BackwardContext& ctx) {
            const Tensor &p = ctx.saved[0], &target = ctx.saved[1];
            const Tensor& g = ctx.grads[0];
            Tensor grad_p, grad_target;
            if (ctx.needs(0)) {
              grad_p = g * (p - target) / distgrad::clamp(p * (1.0 - p), 1e-12, std::nullopt);
            }
            if (ctx.needs(1)) grad_target = g * (distgrad::log1p(-p) - distgrad::log(p));
            return TensorList{grad_p, grad_target};
          })) {
    node->save(p);
    node->save(target);
  }
  return losses;
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_same_floating("mse_loss", "input", input, target);
  const Tensor difference = input - target;
  return reduce(difference * difference, reduction);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction) {
  return reduce(negative_gathered("nll_loss", "log_probs", log_probs, target), reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction) {
  logits.check_defined("cross_entropy");
  DISTGRAD_CHECK(is_floating(logits.dtype()) && logits.dim() == 2,
                 "cross_entropy: expected logits of shape [N, C] and a floating dtype, found a ", logits.describe());
  return reduce(negative_gathered("cross_entropy", "logits", log_softmax(logits, 1), target), reduction);
}

Tensor binary_cross_entropy(const Tensor& probabilities, const Tensor& target, Reduction reduction) {
  check_same_floating("binary_cross_entropy", "probabilities", probabilities, target);
  if (probabilities.numel() > 0) {
    const double lowest = untracked::min(probabilities).item<double>();
    const double highest = untracked::max(probabilities).item<double>();
    DISTGRAD_CHECK(lowest >= 0 && highest <= 1, "binary_cross_entropy: expected probabilities in [0, 1], found ",
                   lowest < 0 ? lowest : highest);
  }
  return reduce(binary_cross_entropy_elementwise(probabilities, target), reduction);
}

}  // namespace distgrad::nn
