// CUDA's fused batch normalisation (core/cuda/batch_norm.h), the formulas of Note [Fused batch
// normalisation] in core/batch_norm.cc as core/cpu/batch_norm.cc has them: one thread block per
// channel. Its threads walk the channel's elements (consecutive threads take consecutive
// elements, so reads coalesce within an image's run), add up what the formulas need (float32 in
// float64, as on the CPU), meet in a block-wide sum, and write the channel's outputs in a second
// walk. The order of the sums depends on the block size alone.
#include <climits>

#include "core/cuda/batch_norm.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "core/dtype.h"

namespace distgrad::cuda::detail {
namespace {

using kernels::BatchNormDoubleBackwardArgs;
using kernels::BatchNormLayout;
using kernels::data_or_null;

constexpr int kWarpSize = 32;
constexpr int kWarps = kThreadsPerBlock / kWarpSize;
static_assert(kThreadsPerBlock % kWarpSize == 0, "blocks of whole warps");

// Calls visit(i) for the flat positions i of channel c's elements that this thread takes: the
// channel's element e (of batch * inner; image e / inner, offset e % inner in its run) for e =
// threadIdx.x, threadIdx.x + blockDim.x, ..., stepped without a division per element.
template <typename Visit>
__device__ void for_channel_elements(const BatchNormLayout& layout, int64_t c, Visit visit) {
  if (layout.inner == 0) return;
  const int64_t step_n = blockDim.x / layout.inner, step_k = blockDim.x % layout.inner;
  int64_t n = threadIdx.x / layout.inner, k = threadIdx.x % layout.inner;
  while (n < layout.batch) {
    visit((n * layout.channels + c) * layout.inner + k);
    n += step_n;
    k += step_k;
    if (k >= layout.inner) {
      k -= layout.inner;
      ++n;
    }
  }
}

// Replaces each of `values` by its sum over the block, in every thread: each warp's sum, then
// the warps' sums in order.
template <int kCount, typename Acc>
__device__ void block_sums(Acc (&values)[kCount]) {
  __shared__ Acc warp_sums[kCount][kWarps];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int i = 0; i < kCount; ++i) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      values[i] += __shfl_down_sync(0xffffffffu, values[i], offset);
    }
    if (lane == 0) warp_sums[i][warp] = values[i];
  }
  __syncthreads();
  for (int i = 0; i < kCount; ++i) {
    Acc total = 0;
    for (int w = 0; w < kWarps; ++w) total += warp_sums[i][w];
    values[i] = total;
  }
  __syncthreads();  // a later call writes warp_sums again
}

template <typename T>
__global__ void batch_norm_kernel(BatchNormLayout layout, T* out, T* means, T* vars, T* inverses, const T* x,
                                  const T* weight, const T* bias, double eps) {
  using Acc = AccumulateType<T>;
  const int64_t c = blockIdx.x;
  const Acc count = static_cast<Acc>(layout.batch * layout.inner);
  Acc sum[1] = {0};
  for_channel_elements(layout, c, [&](int64_t i) { sum[0] += Acc(x[i]); });
  block_sums(sum);
  const Acc mu = sum[0] / count;
  Acc squares[1] = {0};
  for_channel_elements(layout, c, [&](int64_t i) {
    const Acc deviation = Acc(x[i]) - mu;
    squares[0] += deviation * deviation;
  });
  block_sums(squares);
  const Acc variance = squares[0] / count, inverse = Acc(1) / sqrt(variance + Acc(eps));
  if (threadIdx.x == 0) {
    means[c] = static_cast<T>(mu);
    vars[c] = static_cast<T>(variance);
    inverses[c] = static_cast<T>(inverse);
  }
  const T scale = static_cast<T>(inverse * (weight ? Acc(weight[c]) : Acc(1)));
  const T shift = static_cast<T>((bias ? Acc(bias[c]) : Acc(0)) - mu * Acc(scale));
  for_channel_elements(layout, c, [&](int64_t i) { out[i] = x[i] * scale + shift; });
}

// grad_input = a * (g - mean(g)) - a * r * invstd * (x - mean); grad_input may be grad_output
// itself (each element is read before it is written, by the same thread).
template <typename T>
__global__ void batch_norm_backward_kernel(BatchNormLayout layout, T* grad_input, T* grad_weight, T* grad_bias,
                                           const T* g, const T* x, const T* weight, const T* means, const T* inverses) {
  using Acc = AccumulateType<T>;
  const int64_t c = blockIdx.x;
  const Acc count = static_cast<Acc>(layout.batch * layout.inner);
  const T mu = means[c];
  Acc sums[2] = {0, 0};  // g, g (x - mean)
  for_channel_elements(layout, c, [&](int64_t i) {
    sums[0] += Acc(g[i]);
    sums[1] += Acc(g[i]) * Acc(x[i] - mu);
  });
  block_sums(sums);
  const Acc inverse = inverses[c], a = inverse * (weight ? Acc(weight[c]) : Acc(1));
  if (threadIdx.x == 0) {
    if (grad_bias) grad_bias[c] = static_cast<T>(sums[0]);
    if (grad_weight) grad_weight[c] = static_cast<T>(sums[1] * inverse);
  }
  if (!grad_input) return;
  const T by_g = static_cast<T>(a), mean_g = static_cast<T>(sums[0] / count);
  const T by_x = static_cast<T>(a * sums[1] * inverse * inverse / count);
  for_channel_elements(layout, c, [&](int64_t i) { grad_input[i] = by_g * (g[i] - mean_g) - by_x * (x[i] - mu); });
}

template <typename T>
struct DoubleBackwardData {
  const T *g, *x, *weight, *means, *inverses, *gg_input, *gg_weight, *gg_bias;
  T *d_grad_output, *d_input, *d_weight;
};

// With xhat = (x - mean) * invstd expanded, as on the CPU:
//   d_grad_output = by_gg * (gg_input - mean_gg) + g_by_xc * (x - mean) + gg_bias
//   d_input = x_by_xc * (x - mean) + by_gc * (g - mean_g) + by_ggc * (gg_input - mean_gg)
template <typename T>
__global__ void batch_norm_double_backward_kernel(BatchNormLayout layout, DoubleBackwardData<T> d) {
  using Acc = AccumulateType<T>;
  const int64_t c = blockIdx.x;
  const Acc count = static_cast<Acc>(layout.batch * layout.inner);
  const T mu = d.means[c];
  Acc sums[5] = {0, 0, 0, 0, 0};  // g, g (x - mean), gg_input, gg_input (x - mean), gg_input g
  for_channel_elements(layout, c, [&](int64_t i) {
    sums[0] += Acc(d.g[i]);
    sums[1] += Acc(d.g[i]) * Acc(d.x[i] - mu);
    if (d.gg_input) {
      sums[2] += Acc(d.gg_input[i]);
      sums[3] += Acc(d.gg_input[i]) * Acc(d.x[i] - mu);
      sums[4] += Acc(d.gg_input[i]) * Acc(d.g[i]);
    }
  });
  block_sums(sums);
  const Acc inverse = d.inverses[c], a = inverse * (d.weight ? Acc(d.weight[c]) : Acc(1)), ai = a * inverse;
  const Acc mean_g = sums[0] / count, r = inverse * sums[1] / count, mean_gg = sums[2] / count;
  const Acc q = inverse * sums[3] / count, p = sums[4] / count - mean_g * mean_gg;
  const Acc gg_scale = d.gg_weight ? Acc(d.gg_weight[c]) : Acc(0);
  if (threadIdx.x == 0 && d.d_weight) d.d_weight[c] = static_cast<T>(inverse * count * (p - r * q));
  if (!d.d_grad_output && !d.d_input) return;
  const T by_gg = static_cast<T>(a), g_by_xc = static_cast<T>((gg_scale - a * q) * inverse);
  const T shift = d.gg_bias ? d.gg_bias[c] : T(0);
  const T x_by_xc = static_cast<T>((ai * (3 * r * q - p) - gg_scale * inverse * r) * inverse);
  const T by_gc = static_cast<T>(gg_scale * inverse - ai * q), by_ggc = static_cast<T>(-ai * r);
  const T g_mean = static_cast<T>(mean_g), gg_mean = static_cast<T>(mean_gg);
  for_channel_elements(layout, c, [&](int64_t i) {
    const T centered = d.x[i] - mu;
    if (d.d_grad_output) {
      d.d_grad_output[i] = g_by_xc * centered + shift + (d.gg_input ? by_gg * (d.gg_input[i] - gg_mean) : T(0));
    }
    if (d.d_input) {
      d.d_input[i] =
          x_by_xc * centered + by_gc * (d.g[i] - g_mean) + (d.gg_input ? by_ggc * (d.gg_input[i] - gg_mean) : T(0));
    }
  });
}

// The grid: one block per channel (none without channels).
unsigned channel_blocks(const char* op, const BatchNormLayout& layout) {
  DISTGRAD_CHECK(layout.channels <= INT_MAX, op, ": expected at most ", INT_MAX, " channels on CUDA, found ",
                 layout.channels);
  return static_cast<unsigned>(layout.channels);
}

}  // namespace

void batch_norm(const BatchNormLayout& layout, const Tensor& out, const Tensor& mean, const Tensor& var,
                const Tensor& invstd, const Tensor& input, const Tensor& weight, const Tensor& bias, double eps) {
  const unsigned blocks = channel_blocks("batch_norm", layout);
  if (blocks == 0) return;
  const DeviceLaunch launch(input.device());
  dispatch_floating(input.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    batch_norm_kernel<T><<<blocks, kThreadsPerBlock, 0, launch.stream()>>>(
        layout, static_cast<T*>(out.data_ptr()), static_cast<T*>(mean.data_ptr()), static_cast<T*>(var.data_ptr()),
        static_cast<T*>(invstd.data_ptr()), static_cast<const T*>(input.data_ptr()), data_or_null<T>(weight),
        data_or_null<T>(bias), eps);
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  });
}

void batch_norm_backward(const BatchNormLayout& layout, const Tensor& grad_input, const Tensor& grad_weight,
                         const Tensor& grad_bias, const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                         const Tensor& mean, const Tensor& invstd) {
  const unsigned blocks = channel_blocks("batch_norm_backward", layout);
  if (blocks == 0) return;
  const DeviceLaunch launch(input.device());
  dispatch_floating(input.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    batch_norm_backward_kernel<T><<<blocks, kThreadsPerBlock, 0, launch.stream()>>>(
        layout, data_or_null<T>(grad_input), data_or_null<T>(grad_weight), data_or_null<T>(grad_bias),
        static_cast<const T*>(grad_output.data_ptr()), static_cast<const T*>(input.data_ptr()), data_or_null<T>(weight),
        static_cast<const T*>(mean.data_ptr()), static_cast<const T*>(invstd.data_ptr()));
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  });
}

void batch_norm_double_backward(const BatchNormDoubleBackwardArgs& args) {
  const unsigned blocks = channel_blocks("batch_norm_double_backward", args.layout);
  if (blocks == 0) return;
  const DeviceLaunch launch(args.input.device());
  dispatch_floating(args.input.dtype(), "batch_norm_double_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const DoubleBackwardData<T> data{.g = static_cast<const T*>(args.grad_output.data_ptr()),
                                     .x = static_cast<const T*>(args.input.data_ptr()),
                                     .weight = data_or_null<T>(args.weight),
                                     .means = static_cast<const T*>(args.mean.data_ptr()),
                                     .inverses = static_cast<const T*>(args.invstd.data_ptr()),
                                     .gg_input = data_or_null<T>(args.gg_input),
                                     .gg_weight = data_or_null<T>(args.gg_weight),
                                     .gg_bias = data_or_null<T>(args.gg_bias),
                                     .d_grad_output = data_or_null<T>(args.d_grad_output),
                                     .d_input = data_or_null<T>(args.d_input),
                                     .d_weight = data_or_null<T>(args.d_weight)};
    batch_norm_double_backward_kernel<T><<<blocks, kThreadsPerBlock, 0, launch.stream()>>>(args.layout, data);
    DISTGRAD_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace distgrad::cuda::detail
