// The CPU's fused batch normalisation. Each thread takes a block of channels (one block without
// OpenMP threads) and visits their runs (`inner` contiguous values per image and channel) image
// by image, in memory order, which the hardware prefetches: a channel at a time would read runs a
// whole image apart, as short as 9 values in few-shot MAML's last block. Per-channel sums go into
// arrays and accumulate as the CPU's sum does (core/cpu/accumulate.h: float32 in float64), in an
// order that does not depend on the threads.
#include "core/cpu/batch_norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/accumulate.h"
#include "core/cpu/strided_loop.h"
#include "core/dtype.h"

namespace distgrad::kernels::cpu_batch_norm {
namespace {

using cpu::AccumulateType;

// Runs body(first, end) on blocks of channels [first, end) covering all of them, in parallel
// when the tensors are large enough.
template <typename Body>
void for_channel_blocks(const BatchNormLayout& layout, Body body) {
  if (layout.batch * layout.channels * layout.inner < cpu::kParallelGrain || layout.channels < 2 ||
      omp_get_max_threads() == 1 || omp_in_parallel()) {
    body(0, layout.channels);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t block = (layout.channels + threads - 1) / threads;
    const int64_t first = std::min(layout.channels, omp_get_thread_num() * block);
    const int64_t end = std::min(layout.channels, first + block);
    if (first < end) body(first, end);
  }
}

// Calls visit(c, first) for every channel c in [first_channel, end_channel) of every image, first
// being the flat position where the channel's run in that image starts, in memory order.
template <typename Visit>
void for_each_run(const BatchNormLayout& layout, int64_t first_channel, int64_t end_channel, Visit visit) {
  for (int64_t n = 0; n < layout.batch; ++n) {
    for (int64_t c = first_channel; c < end_channel; ++c) visit(c, (n * layout.channels + c) * layout.inner);
  }
}

// The sum over a run of element(k), k the flat position from `first`.
template <typename T, typename Element>
AccumulateType<T> run_sum(const BatchNormLayout& layout, int64_t first, Element element) {
  return cpu::accumulate_run<T>(
      ReduceOp::kSum, [&](int64_t j) { return element(first + j); }, layout.inner);
}

}  // namespace

void forward(const BatchNormLayout& layout, const Tensor& out, const Tensor& mean, const Tensor& var,
             const Tensor& invstd, const Tensor& input, const Tensor& weight, const Tensor& bias, double eps) {
  dispatch_floating(input.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = AccumulateType<T>;
    const T* x = static_cast<const T*>(input.data_ptr());
    const T *w = data_or_null<T>(weight), *b = data_or_null<T>(bias);
    T* y = static_cast<T*>(out.data_ptr());
    T *means = static_cast<T*>(mean.data_ptr()), *vars = static_cast<T*>(var.data_ptr());
    T* inverses = static_cast<T*>(invstd.data_ptr());
    const Acc count = static_cast<Acc>(layout.batch * layout.inner);
    for_channel_blocks(layout, [&](int64_t first_channel, int64_t end_channel) {
      const int64_t channels = end_channel - first_channel;
      std::vector<Acc> sums(channels, Acc(0)), squares(channels, Acc(0));
      std::vector<T> scale(channels), shift(channels);
      for_each_run(layout, first_channel, end_channel, [&](int64_t c, int64_t first) {
        sums[c - first_channel] += run_sum<T>(layout, first, [x](int64_t k) { return x[k]; });
      });
      for (int64_t i = 0; i < channels; ++i) sums[i] /= count;  // the means
      for_each_run(layout, first_channel, end_channel, [&](int64_t c, int64_t first) {
        const Acc mu = sums[c - first_channel];
        squares[c - first_channel] += run_sum<T>(layout, first, [x, mu](int64_t k) {
          const Acc deviation = Acc(x[k]) - mu;
          return deviation * deviation;
        });
      });
      for (int64_t c = first_channel; c < end_channel; ++c) {
        const int64_t i = c - first_channel;
        const Acc mu = sums[i], variance = squares[i] / count, inverse = Acc(1) / std::sqrt(variance + Acc(eps));
        means[c] = static_cast<T>(mu);
        vars[c] = static_cast<T>(variance);
        inverses[c] = static_cast<T>(inverse);
        // (x - mean) * invstd * weight + bias as x * scale + shift, as PyTorch's CPU kernel has it.
        scale[i] = static_cast<T>(inverse * (w ? Acc(w[c]) : Acc(1)));
        shift[i] = static_cast<T>((b ? Acc(b[c]) : Acc(0)) - mu * Acc(scale[i]));
      }
      for_each_run(layout, first_channel, end_channel, [&](int64_t c, int64_t first) {
        const T by = scale[c - first_channel], plus = shift[c - first_channel];
        for (int64_t k = first; k < first + layout.inner; ++k) y[k] = x[k] * by + plus;
      });
    });
  });
}

// The formulas of Note [Fused batch normalisation] (core/batch_norm.cc).
void backward(const BatchNormLayout& layout, const Tensor& grad_input, const Tensor& grad_weight,
              const Tensor& grad_bias, const Tensor& grad_output, const Tensor& input, const Tensor& weight,
              const Tensor& mean, const Tensor& invstd) {
  dispatch_floating(input.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = AccumulateType<T>;
    const T *x = static_cast<const T*>(input.data_ptr()), *g = static_cast<const T*>(grad_output.data_ptr());
    const T *w = data_or_null<T>(weight), *means = static_cast<const T*>(mean.data_ptr());
    const T* inverses = static_cast<const T*>(invstd.data_ptr());
    T* dx = data_or_null<T>(grad_input);
    T *dw = data_or_null<T>(grad_weight), *db = data_or_null<T>(grad_bias);
    const Acc count = static_cast<Acc>(layout.batch * layout.inner);
    for_channel_blocks(layout, [&](int64_t first_channel, int64_t end_channel) {
      const int64_t channels = end_channel - first_channel;
      std::vector<Acc> sum_g(channels, Acc(0)), sum_g_centered(channels, Acc(0));
      for_each_run(layout, first_channel, end_channel, [&](int64_t c, int64_t first) {
        const T mu = means[c];
        sum_g[c - first_channel] += run_sum<T>(layout, first, [g](int64_t k) { return g[k]; });
        sum_g_centered[c - first_channel] +=
            run_sum<T>(layout, first, [g, x, mu](int64_t k) { return Acc(g[k]) * Acc(x[k] - mu); });
      });
      // grad_input = a * (g - mean(g)) - a * r * invstd * (x - mean).
      std::vector<T> g_scale(channels), mean_g(channels), x_scale(channels);
      for (int64_t c = first_channel; c < end_channel; ++c) {
        const int64_t i = c - first_channel;
        const Acc inverse = inverses[c], a = inverse * (w ? Acc(w[c]) : Acc(1));
        if (db) db[c] = static_cast<T>(sum_g[i]);
        if (dw) dw[c] = static_cast<T>(sum_g_centered[i] * inverse);
        g_scale[i] = static_cast<T>(a);
        mean_g[i] = static_cast<T>(sum_g[i] / count);
        x_scale[i] = static_cast<T>(a * sum_g_centered[i] * inverse * inverse / count);
      }
      if (!dx) return;
      for_each_run(layout, first_channel, end_channel, [&](int64_t c, int64_t first) {
        const int64_t i = c - first_channel;
        const T mu = means[c], by_g = g_scale[i], g_mean = mean_g[i], by_x = x_scale[i];
        for (int64_t k = first; k < first + layout.inner; ++k) dx[k] = by_g * (g[k] - g_mean) - by_x * (x[k] - mu);
      });
    });
  });
}

// The formulas of Note [Fused batch normalisation] (core/batch_norm.cc), with xhat = (x - mean) *
// invstd expanded so that x - mean is the only per-element term besides the gradients.
void double_backward(const BatchNormDoubleBackwardArgs& args) {
  const BatchNormLayout& layout = args.layout;
  dispatch_floating(args.input.dtype(), "batch_norm_double_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = AccumulateType<T>;
    const T *x = static_cast<const T*>(args.input.data_ptr()), *g = static_cast<const T*>(args.grad_output.data_ptr());
    const T *w = data_or_null<T>(args.weight), *ggx = data_or_null<T>(args.gg_input);
    const T *ggw = data_or_null<T>(args.gg_weight), *ggb = data_or_null<T>(args.gg_bias);
    const T *means = static_cast<const T*>(args.mean.data_ptr()),
            *inverses = static_cast<const T*>(args.invstd.data_ptr());
    T *d_g = data_or_null<T>(args.d_grad_output), *d_x = data_or_null<T>(args.d_input);
    T* d_w = data_or_null<T>(args.d_weight);
    const Acc count = static_cast<Acc>(layout.batch * layout.inner);
    for_channel_blocks(layout, [&](int64_t first_channel, int64_t end_channel) {
      const int64_t channels = end_channel - first_channel;
      // Per channel: the sums of g, g (x - mean), gg_input, gg_input (x - mean) and gg_input g.
      std::vector<Acc> sums(5 * channels, Acc(0));
      for_each_run(layout, first_channel, end_channel, [&](int64_t c, int64_t first) {
        Acc* sum = &sums[5 * (c - first_channel)];
        const T mu = means[c];
        sum[0] += run_sum<T>(layout, first, [g](int64_t k) { return g[k]; });
        sum[1] += run_sum<T>(layout, first, [g, x, mu](int64_t k) { return Acc(g[k]) * Acc(x[k] - mu); });
        if (!ggx) return;
        sum[2] += run_sum<T>(layout, first, [ggx](int64_t k) { return ggx[k]; });
        sum[3] += run_sum<T>(layout, first, [ggx, x, mu](int64_t k) { return Acc(ggx[k]) * Acc(x[k] - mu); });
        sum[4] += run_sum<T>(layout, first, [ggx, g](int64_t k) { return Acc(ggx[k]) * Acc(g[k]); });
      });
      // d_grad_output = by_gg * (gg_input - mean_gg) + g_by_xc * (x - mean) + gg_bias
      // d_input = x_by_xc * (x - mean) + by_gc * (g - mean_g) + by_ggc * (gg_input - mean_gg)
      struct Coefficients {
        T mean_g, mean_gg, by_gg, g_by_xc, shift, x_by_xc, by_gc, by_ggc;
      };
      std::vector<Coefficients> coefficients(channels);
      for (int64_t c = first_channel; c < end_channel; ++c) {
        const Acc* sum = &sums[5 * (c - first_channel)];
        const Acc inverse = inverses[c], a = inverse * (w ? Acc(w[c]) : Acc(1)), ai = a * inverse;
        const Acc mean_g = sum[0] / count, r = inverse * sum[1] / count, mean_gg = sum[2] / count;
        const Acc q = inverse * sum[3] / count, p = sum[4] / count - mean_g * mean_gg;
        const Acc gg_scale = ggw ? Acc(ggw[c]) : Acc(0);
        if (d_w) d_w[c] = static_cast<T>(inverse * count * (p - r * q));
        coefficients[c - first_channel] = {
            .mean_g = static_cast<T>(mean_g),
            .mean_gg = static_cast<T>(mean_gg),
            .by_gg = static_cast<T>(a),
            .g_by_xc = static_cast<T>((gg_scale - a * q) * inverse),
            .shift = ggb ? ggb[c] : T(0),
            .x_by_xc = static_cast<T>((ai * (3 * r * q - p) - gg_scale * inverse * r) * inverse),
            .by_gc = static_cast<T>(gg_scale * inverse - ai * q),
            .by_ggc = static_cast<T>(-ai * r)};
      }
      if (!d_g && !d_x) return;
      for_each_run(layout, first_channel, end_channel, [&](int64_t c, int64_t first) {
        const Coefficients& k = coefficients[c - first_channel];
        const T mu = means[c];
        const int64_t end = first + layout.inner;
        if (d_g) {
          for (int64_t j = first; j < end; ++j) {
            d_g[j] = k.g_by_xc * (x[j] - mu) + k.shift + (ggx ? k.by_gg * (ggx[j] - k.mean_gg) : T(0));
          }
        }
        if (d_x) {
          for (int64_t j = first; j < end; ++j) {
            d_x[j] =
                k.x_by_xc * (x[j] - mu) + k.by_gc * (g[j] - k.mean_g) + (ggx ? k.by_ggc * (ggx[j] - k.mean_gg) : T(0));
          }
        }
      });
    });
  });
}

}  // namespace distgrad::kernels::cpu_batch_norm
