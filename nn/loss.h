// Loss functions (torch.nn.functional losses) as free functions of tensors.
//
// Each takes a Reduction, as PyTorch's `reduction=` argument: kMean (the default) averages
// the per-element (or per-sample) losses into a 0-dim tensor, kSum adds them, kNone returns
// them unreduced. Every loss is differentiable to any order. Arguments are checked, and an
// error names the loss and what was expected and found (shapes, dtypes, an offending value).
//
//   dg::Tensor loss = dg::nn::mse_loss(net.forward(x), y);               // regression
//   dg::Tensor ce = dg::nn::cross_entropy(logits, labels);               // labels: int64 [N]
//   dg::Tensor per_sample = dg::nn::nll_loss(log_probs, labels, dg::nn::Reduction::kNone);
#pragma once

#include "core/tensor.h"

namespace distgrad::nn {

// kBatchMean (the sum divided by the batch size, input.size(0)) is kl_div's alone, as in PyTorch;
// the other losses refuse it.
enum class Reduction { kNone, kMean, kSum, kBatchMean };

// (input - target)^2 elementwise. input and target must have the same shape and floating
// dtype (PyTorch broadcasts with a warning; a [N, 1] prediction against a [N] target is
// almost always a bug, so here it is an error).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);

// -log_probs[i, target[i]] per sample, for log-probabilities [N, C] and class indices target,
// int64 [N], each in [0, C). kMean divides by N.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::kMean);

// nll_loss(log_softmax(logits, 1), target) for unnormalised scores [N, C].
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::kMean);

// nll_loss's and cross_entropy's further arguments, as PyTorch's:
//   - weight [C] (not differentiated): sample i's loss is scaled by weight[target[i]], and kMean
//     divides by the sum of those weights rather than by N;
//   - ignore_index: samples with this target contribute nothing (kMean divides by the others'
//     count or weight; with every sample ignored it is NaN, as in PyTorch);
//   - label_smoothing in [0, 1] (cross_entropy): the target becomes (1 - s) one-hot + s / C, that is
//     (1 - s) * the loss above + s / C * the sum over classes of -weight[c] log p[i, c].
// cross_entropy also takes class probabilities: a floating target of the logits' shape [N, C]
// (then ignore_index does not apply and kMean divides by N).
struct NllLossOptions {
  Tensor weight{};
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::kMean;
};
struct CrossEntropyOptions {
  Tensor weight{};
  int64_t ignore_index = -100;
  double label_smoothing = 0;
  Reduction reduction = Reduction::kMean;
};
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options);

// -(target * log(p) + (1 - target) * log(1 - p)) elementwise, for probabilities p in [0, 1]
// and a target of the same shape and dtype (usually 0/1 labels). As in PyTorch, each log is
// clamped at -100 so that the loss stays finite at p = 0 or 1, and the gradient with respect
// to p is (p - target) / max(p (1 - p), 1e-12), finite there too.
Tensor binary_cross_entropy(const Tensor& probabilities, const Tensor& target, Reduction reduction = Reduction::kMean);

// binary_cross_entropy(sigmoid(logits), target) computed stably from the logits, with PyTorch's
// formula (1 - target) * x - (1 + (pos_weight - 1) * target) * logsigmoid(x), times `weight`:
// pos_weight (broadcast along the last dim, e.g. [classes]) weighs the positive examples, weight
// (broadcast to the input) each element.
struct BinaryCrossEntropyWithLogitsOptions {
  Tensor weight{};
  Tensor pos_weight{};
  Reduction reduction = Reduction::kMean;
};
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const BinaryCrossEntropyWithLogitsOptions& options = {});

// Elementwise d = input - target: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta
// (beta >= 0; beta = 0 is the L1 loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
                      double beta = 1.0);
// Elementwise: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (delta > 0).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
                  double delta = 1.0);

// The Kullback-Leibler divergence of `target` from the distribution whose log-probabilities are
// `input`, elementwise: target (log target - input), 0 where target = 0; with log_target, target
// holds log-probabilities: exp(target) (target - input). PyTorch's default kMean averages over
// every element; kBatchMean (the mathematically right one) divides the sum by input.size(0).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
              bool log_target = false);

}  // namespace distgrad::nn
