#include "ddp/sync_batch_norm.h"

#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/copy.h"
#include "core/creation.h"
#include "core/views.h"

namespace distgrad::ddp {
namespace {

// The sum of `tensor` over the group's ranks, differentiable: the gradient of each rank's input
// is the sum of every rank's output gradient, itself all-reduced the same way (so that higher
// orders work too).
Tensor all_reduce_sum(const Tensor& tensor, const std::shared_ptr<ProcessGroup>& group) {
  Tensor result = untracked::contiguous(tensor);
  if (result.is_same(tensor)) {
    result = empty_like(tensor);
    untracked::copy_(result, tensor);
  }
  group->all_reduce(result, ReduceOp::kSum);
  autograd::record("AllReduceSumBackward", {&tensor}, {&result}, [group](const autograd::BackwardContext& ctx) {
    return autograd::TensorList{all_reduce_sum(ctx.grad_or_zeros(0), group)};
  });
  return result;
}

}  // namespace

nn::BatchNorm::NormalizedBatch SyncBatchNorm::normalize_batch(const Tensor& input, const Shape& dims) {
  if (!group_) group_ = default_process_group();
  const int64_t channels = num_features();
  const double local_count = static_cast<double>(input.numel() / channels);
  // [sum | sum of squares | count]: one all-reduce for all three.
  const Tensor local = cat({sum(input, dims), sum(input * input, dims),
                            full({1}, local_count, {.dtype = input.dtype(), .device = input.device()})});
  const Tensor global = all_reduce_sum(local, group_);
  const double count = untracked::narrow(global, 0, 2 * channels, 1).item<double>();
  const Tensor mean = narrow(global, 0, 0, channels) / count;
  const Tensor var = narrow(global, 0, channels, channels) / count - mean * mean;  // biased
  return {normalize(input, mean, var), mean, var, static_cast<int64_t>(count)};
}

}  // namespace distgrad::ddp
