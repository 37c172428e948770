#include "nn/loss.h"

#include "absl/strings/str_cat.h"
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad::nn {
namespace {

using autograd::BackwardContext;
using autograd::TensorList;

// `loss` names the loss in the error for kBatchMean, which only kl_div takes.
Tensor reduce(const char* loss, const Tensor& losses, Reduction reduction) {
  switch (reduction) {
    case Reduction::kNone: return losses;
    case Reduction::kMean: return mean(losses);
    case Reduction::kSum: return sum(losses);
    case Reduction::kBatchMean:
      DISTGRAD_FAIL(loss, ": Reduction::kBatchMean is kl_div's only; expected kNone, kMean or kSum");
  }
  DISTGRAD_FAIL(loss, ": unknown Reduction ", static_cast<int>(reduction));
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

// A class weight [C] for scores [N, C], checked; undefined when not given.
Tensor checked_class_weight(const char* loss, const Tensor& weight, const Tensor& scores) {
  if (!weight.defined()) return weight;
  DISTGRAD_CHECK(
      weight.sizes() == Shape{scores.size(1)} && weight.dtype() == scores.dtype() && weight.device() == scores.device(),
      loss, ": expected a class weight of shape [", scores.size(1), "], dtype ", dtype_name(scores.dtype()), " on ",
      scores.device().str(), ", found a ", weight.describe());
  return weight;
}

// The negative log-likelihood of each sample, weighted and reduced, with what cross_entropy's
// label smoothing needs: which samples count and kMean's divisor.
struct WeightedNll {
  Tensor loss;
  Tensor kept;          // bool [N]: target != ignore_index
  Tensor mean_divisor;  // 0-dim: the sum of the kept samples' weights (their count without weights)
};

WeightedNll weighted_nll(const char* loss, const char* scores_name, const Tensor& scores, const Tensor& target,
                         const Tensor& class_weight, int64_t ignore_index, Reduction reduction) {
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
  const Tensor weight = checked_class_weight(loss, class_weight, scores);
  const int64_t classes = scores.size(1);
  const Tensor kept = untracked::ne(target, ignore_index);
  const Tensor safe_target = untracked::where(kept, target, zeros_like(target));
  if (target.numel() > 0) {
    const Tensor counted = untracked::masked_fill(target, untracked::logical_not(kept), 0.0);
    const int64_t lowest = untracked::min(counted).item<int64_t>();
    const int64_t highest = untracked::max(counted).item<int64_t>();
    const int64_t offending = lowest < 0 ? lowest : highest;
    DISTGRAD_CHECK(lowest >= 0 && highest < classes, loss, ": target index ", offending, " is out of range for ",
                   classes, " classes [0, ", classes, ")",
                   ignore_index == -100 ? "" : absl::StrCat(" (ignore_index is ", ignore_index, ")"));
  }
  const Tensor picked = neg(squeeze(gather(scores, 1, untracked::unsqueeze(safe_target, 1)), 1));
  const bool all_kept = untracked::all(kept);
  if (!weight.defined() && all_kept) {  // the plain loss: its mean is a mean
    return {reduce(loss, picked, reduction), kept,
            scalar_tensor(static_cast<double>(target.numel()), {.dtype = scores.dtype(), .device = scores.device()})};
  }
  // Each sample's weight, 0 where ignored; not differentiated, as in PyTorch.
  const Tensor kept_factor = untracked::to(kept, scores.dtype());
  const Tensor sample_weight =
      weight.defined() ? untracked::mul(untracked::index_select(weight, 0, safe_target), kept_factor) : kept_factor;
  const Tensor losses = masked_fill(picked * sample_weight, untracked::logical_not(kept), 0.0);
  WeightedNll result{Tensor(), kept, untracked::sum(sample_weight)};
  switch (reduction) {
    case Reduction::kNone: result.loss = losses; break;
    case Reduction::kSum: result.loss = sum(losses); break;
    case Reduction::kMean: result.loss = sum(losses) / result.mean_divisor; break;
    case Reduction::kBatchMean: result.loss = reduce(loss, losses, reduction); break;
  }
  return result;
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
  if (autograd::casts_to_float32({&input, &target})) {
    return mse_loss(autograd::autocast_to_float32(input), autograd::autocast_to_float32(target), reduction);
  }
  check_same_floating("mse_loss", "input", input, target);
  const Tensor difference = input - target;
  return reduce("mse_loss", difference * difference, reduction);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction) {
  return nll_loss(log_probs, target, NllLossOptions{.reduction = reduction});
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options) {
  if (autograd::casts_to_float32({&log_probs, &target})) {
    return nll_loss(autograd::autocast_to_float32(log_probs), autograd::autocast_to_float32(target), options);
  }
  return weighted_nll("nll_loss", "log_probs", log_probs, target, options.weight, options.ignore_index,
                      options.reduction)
      .loss;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction) {
  return cross_entropy(logits, target, CrossEntropyOptions{.reduction = reduction});
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  if (autograd::casts_to_float32({&logits, &target})) {
    return cross_entropy(autograd::autocast_to_float32(logits), autograd::autocast_to_float32(target), options);
  }
  logits.check_defined("cross_entropy");
  target.check_defined("cross_entropy");
  DISTGRAD_CHECK(is_floating(logits.dtype()) && logits.dim() == 2,
                 "cross_entropy: expected logits of shape [N, C] and a floating dtype, found a ", logits.describe());
  const double smoothing = options.label_smoothing;
  DISTGRAD_CHECK(smoothing >= 0 && smoothing <= 1, "cross_entropy: expected label_smoothing in [0, 1], found ",
                 smoothing);
  const int64_t classes = logits.size(1);
  const Tensor log_probs = log_softmax(logits, 1);
  const Tensor weight = checked_class_weight("cross_entropy", options.weight, log_probs);
  // Per class, -log p weighted: the summand of the smoothing term and of probability targets.
  const Tensor weighted_log_probs = weight.defined() ? log_probs * weight : log_probs;
  if (is_floating(target.dtype())) {
    check_same_floating("cross_entropy", "logits", logits, target);
    const Tensor soft_target =
        smoothing > 0 ? target * (1.0 - smoothing) + smoothing / static_cast<double>(classes) : target;
    const Tensor losses = -sum(weighted_log_probs * soft_target, {1});
    return reduce("cross_entropy", losses, options.reduction);
  }
  const WeightedNll nll =
      weighted_nll("cross_entropy", "logits", log_probs, target, weight, options.ignore_index, options.reduction);
  if (smoothing == 0) return nll.loss;
  const Tensor smooth = masked_fill(-sum(weighted_log_probs, {1}), logical_not(nll.kept), 0.0);
  Tensor smooth_loss;
  switch (options.reduction) {
    case Reduction::kNone: smooth_loss = smooth; break;
    case Reduction::kSum: smooth_loss = sum(smooth); break;
    default: smooth_loss = sum(smooth) / nll.mean_divisor; break;
  }
  return nll.loss * (1.0 - smoothing) + smooth_loss * (smoothing / static_cast<double>(classes));
}

Tensor binary_cross_entropy(const Tensor& probabilities, const Tensor& target, Reduction reduction) {
  if (autograd::casts_to_float32({&probabilities, &target})) {
    return binary_cross_entropy(autograd::autocast_to_float32(probabilities), autograd::autocast_to_float32(target),
                                reduction);
  }
  check_same_floating("binary_cross_entropy", "probabilities", probabilities, target);
  if (probabilities.numel() > 0) {
    const double lowest = untracked::min(probabilities).item<double>();
    const double highest = untracked::max(probabilities).item<double>();
    DISTGRAD_CHECK(lowest >= 0 && highest <= 1, "binary_cross_entropy: expected probabilities in [0, 1], found ",
                   lowest < 0 ? lowest : highest);
  }
  return reduce("binary_cross_entropy", binary_cross_entropy_elementwise(probabilities, target), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const BinaryCrossEntropyWithLogitsOptions& options) {
  if (autograd::casts_to_float32({&logits, &target})) {
    return binary_cross_entropy_with_logits(autograd::autocast_to_float32(logits),
                                            autograd::autocast_to_float32(target), options);
  }
  const char* loss = "binary_cross_entropy_with_logits";
  check_same_floating(loss, "logits", logits, target);
  const auto check_broadcastable = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return;
    DISTGRAD_CHECK(t.dtype() == logits.dtype() && t.device() == logits.device(), loss, ": expected a ", name,
                   " with the logits' dtype and device (", dtype_name(logits.dtype()), " on ", logits.device().str(),
                   "), found a ", t.describe());
    bool broadcasts = t.dim() <= logits.dim();
    for (int64_t d = 1; broadcasts && d <= t.dim(); ++d) broadcasts = t.size(-d) == 1 || t.size(-d) == logits.size(-d);
    DISTGRAD_CHECK(broadcasts, loss, ": expected a ", name, " that broadcasts to the logits' shape ",
                   shape_str(logits.sizes()), ", found ", shape_str(t.sizes()));
  };
  check_broadcastable(options.weight, "weight");
  check_broadcastable(options.pos_weight, "pos_weight");
  Tensor log_weight_of_positives = options.pos_weight.defined() ? (options.pos_weight - 1.0) * target + 1.0 : Tensor();
  const Tensor log_sigmoid = logsigmoid(logits);
  Tensor losses = (1.0 - target) * logits -
                  (log_weight_of_positives.defined() ? log_weight_of_positives * log_sigmoid : log_sigmoid);
  if (options.weight.defined()) losses = losses * options.weight;
  return reduce(loss, losses, options.reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  if (autograd::casts_to_float32({&input, &target})) {
    return smooth_l1_loss(autograd::autocast_to_float32(input), autograd::autocast_to_float32(target), reduction, beta);
  }
  check_same_floating("smooth_l1_loss", "input", input, target);
  DISTGRAD_CHECK(beta >= 0, "smooth_l1_loss: expected a non-negative beta, found ", beta);
  const Tensor difference = input - target;
  const Tensor magnitude = abs(difference);
  if (beta == 0) return reduce("smooth_l1_loss", magnitude, reduction);
  const Tensor losses = where(lt(magnitude, beta), difference * difference * 0.5 / beta, magnitude - 0.5 * beta);
  return reduce("smooth_l1_loss", losses, reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  if (autograd::casts_to_float32({&input, &target})) {
    return huber_loss(autograd::autocast_to_float32(input), autograd::autocast_to_float32(target), reduction, delta);
  }
  check_same_floating("huber_loss", "input", input, target);
  DISTGRAD_CHECK(delta > 0, "huber_loss: expected a positive delta, found ", delta);
  const Tensor difference = input - target;
  const Tensor magnitude = abs(difference);
  const Tensor losses = where(lt(magnitude, delta), difference * difference * 0.5, (magnitude - 0.5 * delta) * delta);
  return reduce("huber_loss", losses, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  if (autograd::casts_to_float32({&input, &target})) {
    return kl_div(autograd::autocast_to_float32(input), autograd::autocast_to_float32(target), reduction, log_target);
  }
  check_same_floating("kl_div", "input", input, target);
  Tensor losses;
  if (log_target) {
    losses = exp(target) * (target - input);
  } else {
    // xlogy(target, target) - target * input: 0 where target is 0 (log sees 1 there).
    const Tensor positive = gt(target, 0.0);
    const Tensor safe_target = where(positive, target, ones_like(target));
    losses = where(positive, target * log(safe_target), zeros_like(target)) - target * input;
  }
  if (reduction == Reduction::kBatchMean) {
    DISTGRAD_CHECK(input.dim() >= 1, "kl_div: Reduction::kBatchMean needs a batch dim, found a 0-dim input");
    return sum(losses) / static_cast<double>(input.size(0));
  }
  return reduce("kl_div", losses, reduction);
}

}  // namespace distgrad::nn
