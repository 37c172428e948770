// BatchNorm1d and BatchNorm2d: batch normalisation over the channel dim (torch.nn.BatchNorm*).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"

namespace distgrad::nn {

// torch.nn.functional.batch_norm: input [N, C, *] normalised per channel (dim 1). In training,
// with the batch's statistics (distgrad::batch_norm, differentiable to any order), and the
// running statistics, when given ([C], both or neither), moved towards the batch's mean and
// unbiased variance by `momentum` in place; in evaluation, with the running statistics (which
// must be given). weight and bias ([C]) may be undefined.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight = {},
                  const Tensor& bias = {}, bool training = false, double momentum = 0.1, double eps = 1e-5);

struct BatchNormOptions {
  double eps = 1e-5;
  // Weight of the new batch in the running statistics; nullopt keeps a cumulative average
  // (each batch weighs 1 / num_batches_tracked), as momentum=None in PyTorch.
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learnable per-channel weight (ones) and bias (zeros)
  bool track_running_stats = true;  // keep running_mean / running_var for evaluation
};

// Normalises each channel (dim 1) of the input to zero mean and unit variance, then scales by
// `weight` and shifts by `bias`: y = (x - mean) / sqrt(var + eps) * weight + bias.
//
// Which statistics, as in PyTorch:
//   - training mode, or track_running_stats = false: the batch's mean and biased variance
//     over every dim but 1 (distgrad::batch_norm: fused on the CPU). The result is
//     differentiable to any order through them, as second-order MAML needs. In training mode with
//     running stats, running_mean and running_var then move towards the batch's mean and
//     unbiased variance by `momentum` (without recording: they are buffers), and
//     num_batches_tracked counts the update;
//   - evaluation mode with running stats: running_mean and running_var.
// Under functional_call the updates go to whatever tensors stand in the buffer slots.
//
//   dg::nn::BatchNorm2d bn(64, {.momentum = 1.0});   // TorchOpt's MAML-Omniglot setting
//   dg::Tensor y = bn.forward(x);                     // x: [N, 64, H, W]
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

  int64_t num_features() const { return num_features_; }
  const BatchNormOptions& options() const { return options_; }

  Tensor weight;               // [num_features], with affine
  Tensor bias;                 // [num_features], with affine
  Tensor running_mean;         // [num_features], with track_running_stats
  Tensor running_var;          // [num_features], with track_running_stats
  Tensor num_batches_tracked;  // int64, 0-dim, with track_running_stats

 protected:
  // `kind` names the layer; `min_dim`..`max_dim` are the input ranks it accepts.
  BatchNorm(std::string kind, int64_t min_dim, int64_t max_dim, int64_t num_features, BatchNormOptions options,
            TensorOptions tensor_options);

  // A training batch normalised with its own statistics: the output, the per-channel mean and
  // biased variance ([C]) and the number of values per channel they were taken
  // over. `dims` are the dims they reduce (all but 1). BatchNorm takes them over the input alone
  // (distgrad::batch_norm); SyncBatchNorm overrides this to take them over every rank's batch.
  struct NormalizedBatch {
    Tensor output;
    Tensor mean;
    Tensor var;
    int64_t count;
  };
  virtual NormalizedBatch normalize_batch(const Tensor& input, const Shape& dims);
  // (input - mean) / sqrt(var + eps) * weight + bias with per-channel mean and var [C].
  Tensor normalize(const Tensor& input, const Tensor& mean, const Tensor& var) const;

 private:
  void update_running_stats(const Tensor& batch_mean, const Tensor& batch_var, int64_t count);

  std::string kind_;
  int64_t min_dim_;
  int64_t max_dim_;
  int64_t num_features_;
  BatchNormOptions options_;
};

// Over [N, C] or [N, C, L] input.
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {}, TensorOptions tensor_options = {})
      : BatchNorm("BatchNorm1d", 2, 3, num_features, options, tensor_options) {}
};

// Over [N, C, H, W] input.
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {}, TensorOptions tensor_options = {})
      : BatchNorm("BatchNorm2d", 4, 4, num_features, options, tensor_options) {}
};

}  // namespace distgrad::nn
