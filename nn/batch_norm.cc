#include "nn/batch_norm.h"

#include "absl/strings/str_cat.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad::nn {

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
  // x * scale + shift with the per-channel scale = weight / sqrt(var + eps) and shift = bias -
  // mean * scale (as PyTorch's CPU kernel): two full-size ops instead of four. The [C]
  // per-channel tensors broadcast as [1, C, 1, ...].
  Shape channel_shape(input.dim(), 1);
  channel_shape[1] = num_features_;
  const Tensor centre = reshape(mean, channel_shape);
  Tensor scale = rsqrt(reshape(var, channel_shape) + options_.eps);
  if (options_.affine) scale = scale * reshape(weight, channel_shape);
  const Tensor shift = options_.affine ? reshape(bias, channel_shape) - centre * scale : -(centre * scale);
  return input * scale + shift;
}

void BatchNorm::update_running_stats(const Tensor& batch_mean, const Tensor& batch_var, int64_t count) {
  autograd::NoGradGuard no_grad;
  untracked::add_(num_batches_tracked, 1.0);
  const double factor =
      options_.momentum ? *options_.momentum : 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  const double bessel = static_cast<double>(count) / static_cast<double>(count - 1);
  const Tensor unbiased_var = untracked::mul(batch_var, bessel);
  untracked::mul_(running_mean, 1.0 - factor);
  untracked::add_(running_mean, untracked::mul(batch_mean, factor));
  untracked::mul_(running_var, 1.0 - factor);
  untracked::add_(running_var, untracked::mul(unbiased_var, factor));
}

}  // namespace distgrad::nn
