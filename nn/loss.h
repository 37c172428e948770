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

enum class Reduction { kNone, kMean, kSum };

// (input - target)^2 elementwise. input and target must have the same shape and floating
// dtype (PyTorch broadcasts with a warning; a [N, 1] prediction against a [N] target is
// almost always a bug, so here it is an error).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);

// -log_probs[i, target[i]] per sample, for log-probabilities [N, C] and class indices target,
// int64 [N], each in [0, C). kMean divides by N.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::kMean);

// nll_loss(log_softmax(logits, 1), target) for unnormalised scores [N, C].
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::kMean);

// -(target * log(p) + (1 - target) * log(1 - p)) elementwise, for probabilities p in [0, 1]
// and a target of the same shape and dtype (usually 0/1 labels). As in PyTorch, each log is
// clamped at -100 so that the loss stays finite at p = 0 or 1, and the gradient with respect
// to p is (p - target) / max(p (1 - p), 1e-12), finite there too.
Tensor binary_cross_entropy(const Tensor& probabilities, const Tensor& target, Reduction reduction = Reduction::kMean);

}  // namespace distgrad::nn
