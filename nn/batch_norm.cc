#include "nn/batch_norm.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad::nn {
namespace {

// (input - mean) / sqrt(var + eps) * weight + bias with per-channel (dim 1) mean and var [C], as
// x * scale + shift with the per-channel scale = weight / sqrt(var + eps) and shift = bias - mean
// * scale (as PyTorch's CPU kernel): two full-size ops instead of four. weight and bias may be
// undefined (ones and zeros).
Tensor normalized_with(const Tensor& input, const Tensor& mean, const Tensor& var, const Tensor& weight,
                       const Tensor& bias, double eps) {
  Shape channel_shape(input.dim(), 1);
  channel_shape[1] = input.size(1);
  const Tensor centre = reshape(mean, channel_shape);
  Tensor scale = rsqrt(reshape(var, channel_shape) + eps);
  if (weight.defined()) scale = scale * reshape(weight, channel_shape);
  const Tensor shift = bias.defined() ? reshape(bias, channel_shape) - centre * scale : -(centre * scale);
  return input * scale + shift;
}

// Moves the running statistics towards the batch's mean and unbiased variance (from its biased
// `batch_var` over `count` values) by `factor`, in place.
void move_running_stats(const Tensor& running_mean, const Tensor& running_var, const Tensor& batch_mean,
                        const Tensor& batch_var, int64_t count, double factor) {
  const double bessel = static_cast<double>(count) / static_cast<double>(count - 1);
  const Tensor unbiased_var = untracked::mul(batch_var, bessel);
  untracked::mul_(running_mean, 1.0 - factor);
  untracked::add_(running_mean, untracked::mul(batch_mean, factor));
  untracked::mul_(running_var, 1.0 - factor);
  untracked::add_(running_var, untracked::mul(unbiased_var, factor));
}

}  // namespace

BatchNorm::BatchNorm(std::string kind, int64_t min_dim, int64_t max_dim, int64_t num_features, BatchNormOptions options,
                     TensorOptions tensor_options)
    : kind_(std::move(kind)), min_dim_(min_dim), max_dim_(max_dim), num_features_(num_features), options_(options) {
  DISTGRAD_CHECK(num_features > 0, kind_, ": expected a positive num_features, found ", num_features);
  DISTGRAD_CHECK(is_floating(tensor_options.dtype), kind_, ": expected a floating dtype, found ",
                 dtype_name(tensor_options.dtype));
  DISTGRAD_CHECK(options.eps > 0, kind_, ": expected a positive eps, found ", options.eps);
  const TensorOptions plain{.dtype = tensor_options.dtype, .device = tensor_options.device};
  if (options.affine) {
    weight = ones({num_features}, plain);
    bias = zeros({num_features}, plain);
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  if (options.track_running_stats) {
    running_mean = zeros({num_features}, plain);
    running_var = ones({num_features}, plain);
    num_batches_tracked = scalar_tensor(0, {.dtype = kInt64, .device = tensor_options.device});
    register_buffer("running_mean", running_mean);
    register_buffer("running_var", running_var);
    register_buffer("num_batches_tracked", num_batches_tracked);
  }
}

std::string BatchNorm::name() const {
  return absl::StrCat(kind_, "(", num_features_, ", eps=", options_.eps,
                      ", momentum=", options_.momentum ? absl::StrCat(*options_.momentum) : "none",
                      ", affine=", options_.affine ? "true" : "false",
                      ", track_running_stats=", options_.track_running_stats ? "true" : "false", ")");
}

Tensor BatchNorm::forward(const Tensor& input) {
  if (autograd::casts_to_float32({&input})) {
    return forward(autograd::autocast_to_float32(input));
  }
  input.check_defined(kind_.c_str());
  const int64_t rank = input.dim();
  DISTGRAD_CHECK(rank >= min_dim_ && rank <= max_dim_ && input.size(1) == num_features_, name(),
                 ": expected input of shape ",
                 min_dim_ == 4 ? absl::StrCat("[N, ", num_features_, ", H, W]")
                               : absl::StrCat("[N, ", num_features_, "] or [N, ", num_features_, ", L]"),
                 ", found ", shape_str(input.sizes()));
  // Per-channel statistics reduce every dim but 1.
  Shape dims = {0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  if (is_training() || !options_.track_running_stats) {
    const NormalizedBatch batch = normalize_batch(input, dims);
    DISTGRAD_CHECK(!is_training() || batch.count > 1, name(),
                   ": expected more than 1 value per channel when training, found input of shape ",
                   shape_str(input.sizes()));
    if (is_training() && options_.track_running_stats) update_running_stats(batch.mean, batch.var, batch.count);
    return batch.output;
  }
  return normalize(input, running_mean, running_var);
}

BatchNorm::NormalizedBatch BatchNorm::normalize_batch(const Tensor& input, const Shape& /*dims*/) {
  const BatchNormOutputs result = distgrad::batch_norm(input, weight, bias, options_.eps);
  return {result.output, result.mean, result.var, input.numel() / num_features_};
}

Tensor BatchNorm::normalize(const Tensor& input, const Tensor& mean, const Tensor& var) const {
  return normalized_with(input, mean, var, weight, bias, options_.eps);
}

void BatchNorm::update_running_stats(const Tensor& batch_mean, const Tensor& batch_var, int64_t count) {
  autograd::NoGradGuard no_grad;
  untracked::add_(num_batches_tracked, 1.0);
  const double factor =
      options_.momentum ? *options_.momentum : 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  move_running_stats(running_mean, running_var, batch_mean, batch_var, count, factor);
}

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  if (autograd::casts_to_float32({&input, &weight, &bias})) {
    return batch_norm(autograd::autocast_to_float32(input), running_mean, running_var,
                      autograd::autocast_to_float32(weight), autograd::autocast_to_float32(bias), training, momentum,
                      eps);
  }
  input.check_defined("batch_norm");
  DISTGRAD_CHECK(is_floating(input.dtype()) && input.dim() >= 2,
                 "batch_norm: expected a floating input of shape [N, C, *], found a ", input.describe());
  const int64_t channels = input.size(1);
  for (const auto& [t, what] : {std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"},
                                std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->defined()) continue;
    DISTGRAD_CHECK(t->sizes() == Shape{channels} && t->dtype() == input.dtype() && t->device() == input.device(),
                   "batch_norm: expected a ", what, " of shape [", channels, "], dtype ", dtype_name(input.dtype()),
                   " on ", input.device().str(), ", found a ", t->describe());
  }
  DISTGRAD_CHECK(running_mean.defined() == running_var.defined(),
                 "batch_norm: expected both running_mean and running_var, or neither");
  DISTGRAD_CHECK(eps > 0, "batch_norm: expected a positive eps, found ", eps);
  if (!training) {
    DISTGRAD_CHECK(running_mean.defined(), "batch_norm: evaluation (training = false) needs running_mean and ",
                   "running_var");
    return normalized_with(input, running_mean, running_var, weight, bias, eps);
  }
  const int64_t count = input.numel() / channels;
  DISTGRAD_CHECK(count > 1, "batch_norm: expected more than 1 value per channel when training, found input of shape ",
                 shape_str(input.sizes()));
  const BatchNormOutputs batch = distgrad::batch_norm(input, weight, bias, eps);
  if (running_mean.defined()) {
    autograd::NoGradGuard no_grad;
    move_running_stats(running_mean, running_var, batch.mean, batch.var, count, momentum);
  }
  return batch.output;
}

}  // namespace distgrad::nn
