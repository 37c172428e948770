// Core op costs: dispatch overhead on tiny tensors, elementwise bandwidth on 16M floats
// against memcpy, sgemm through untracked::matmul against calling OpenBLAS directly, and the conv
// net's window kernels (max-pool forward and its backward scatter, im2col, col2im) on the first
// layer of the Fashion-MNIST CNN (batch 64, 32 channels, 28 x 28). With a
// CUDA device visible, the same workloads on cuda:0 (names starting with "Cuda"), each
// iteration queuing kCudaOpsPerIteration ops and then waiting for them.
//
//   build/bench/core_ops_bench --benchmark_format=json   (bench/run_bench.py compares with PyTorch)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstring>
#include <vector>

#include "core/cuda.h"
#include "core/ops.h"

namespace dg = distgrad;
namespace untracked = distgrad::untracked;

namespace {

constexpr int64_t kLarge = 16 << 20;  // 16M floats = 64 MiB per tensor

void BM_AddOneElement(benchmark::State& state) {
  const dg::Tensor a = dg::ones({1}), b = dg::ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(untracked::add(a, b));
}
BENCHMARK(BM_AddOneElement);

void BM_AddOneElementInPlace(benchmark::State& state) {
  const dg::Tensor a = dg::ones({1}), b = dg::ones({1});
  for (auto _ : state) untracked::add_(a, b);
}
BENCHMARK(BM_AddOneElementInPlace);

// The reference for elementwise bandwidth: bytes read plus bytes written per second.
void BM_Memcpy64MiB(benchmark::State& state) {
  std::vector<float> source(kLarge, 1.0f), target(kLarge, 0.0f);
  for (auto _ : state) {
    std::memcpy(target.data(), source.data(), kLarge * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * kLarge * sizeof(float));
}
BENCHMARK(BM_Memcpy64MiB)->UseRealTime()->Unit(benchmark::kMillisecond);

// Out of place: includes allocating (and first-touching) the 64 MiB result.
void BM_Add16M(benchmark::State& state) {
  const dg::Tensor a = dg::rand({kLarge}), b = dg::rand({kLarge});
  for (auto _ : state) benchmark::DoNotOptimize(untracked::add(a, b));
  state.SetBytesProcessed(state.iterations() * 3 * kLarge * sizeof(float));
}
BENCHMARK(BM_Add16M)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_AddInPlace16M(benchmark::State& state) {
  const dg::Tensor a = dg::rand({kLarge}), b = dg::rand({kLarge});
  for (auto _ : state) untracked::add_(a, b);
  state.SetBytesProcessed(state.iterations() * 3 * kLarge * sizeof(float));
}
BENCHMARK(BM_AddInPlace16M)->UseRealTime()->Unit(benchmark::kMillisecond);

// n x n by n x n products per second, in GFLOP/s.
void set_gflops(benchmark::State& state, int64_t n, int products_per_iteration = 1) {
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * n * n * n * products_per_iteration * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
}

void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  const dg::Tensor a = dg::randn({n, n}), b = dg::randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(untracked::matmul(a, b));
  set_gflops(state, n);
}
BENCHMARK(BM_Matmul)->Arg(512)->Arg(1024)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);

// OpenBLAS called directly into a preallocated result: the ceiling for BM_Matmul.
void BM_CblasSgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  const dg::Tensor a = dg::randn({n, n}), b = dg::randn({n, n}), c = dg::zeros({n, n});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f,
                c.data<float>(), n);
    benchmark::ClobberMemory();
  }
  set_gflops(state, n);
}
BENCHMARK(BM_CblasSgemm)->Arg(512)->Arg(1024)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);

// The first conv block of examples/fashion_mnist_models.h: a [64, 32, 28, 28] activation.
const dg::Shape kActivation{64, 32, 28, 28};

void BM_MaxPool2d(benchmark::State& state) {
  const dg::Tensor x = dg::randn(kActivation);
  for (auto _ : state) benchmark::DoNotOptimize(untracked::max_pool2d(x, {.kernel_size = {2, 2}}));
  state.SetBytesProcessed(state.iterations() * x.numel() * sizeof(float));
}
BENCHMARK(BM_MaxPool2d)->UseRealTime()->Unit(benchmark::kMillisecond);

// ReLU and its backward on the same activation: the conv blocks' memory-bound elementwise passes.
void BM_Relu(benchmark::State& state) {
  const dg::Tensor x = dg::randn(kActivation);
  for (auto _ : state) benchmark::DoNotOptimize(untracked::relu(x));
  state.SetBytesProcessed(state.iterations() * 2 * x.numel() * sizeof(float));
}
BENCHMARK(BM_Relu)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_ReluBackward(benchmark::State& state) {
  const dg::Tensor y = untracked::relu(dg::randn(kActivation)), grad = dg::randn(kActivation);
  for (auto _ : state) benchmark::DoNotOptimize(untracked::relu_backward(grad, y));
  state.SetBytesProcessed(state.iterations() * 3 * y.numel() * sizeof(float));
}
BENCHMARK(BM_ReluBackward)->UseRealTime()->Unit(benchmark::kMillisecond);

// What autograd does when the engine alone holds the incoming gradient (Note [Reused gradients]):
// the mask written into it. Repeating it changes nothing (the mask is idempotent).
void BM_ReluBackwardInPlace(benchmark::State& state) {
  const dg::Tensor y = untracked::relu(dg::randn(kActivation)), grad = dg::randn(kActivation);
  for (auto _ : state) untracked::relu_backward_(grad, y);
  state.SetBytesProcessed(state.iterations() * 3 * y.numel() * sizeof(float));
}
BENCHMARK(BM_ReluBackwardInPlace)->UseRealTime()->Unit(benchmark::kMillisecond);

// The gradient of BatchNorm's per-channel scale, few-shot MAML's shape (100 images, 64 channels,
// 14 x 14): the sum over images and pixels of the incoming gradient times the input, with the
// product's tensor (mul, then sum) and without it (sum_of_product).
const dg::Shape kBatchNormInput{100, 64, 14, 14};

void BM_MulThenSum(benchmark::State& state) {
  const dg::Tensor a = dg::randn(kBatchNormInput), b = dg::randn(kBatchNormInput);
  for (auto _ : state) benchmark::DoNotOptimize(untracked::sum(untracked::mul(a, b), {0, 2, 3}, true));
  state.SetBytesProcessed(state.iterations() * 2 * a.numel() * sizeof(float));
}
BENCHMARK(BM_MulThenSum)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_SumOfProduct(benchmark::State& state) {
  const dg::Tensor a = dg::randn(kBatchNormInput), b = dg::randn(kBatchNormInput);
  for (auto _ : state) benchmark::DoNotOptimize(untracked::sum_of_product(a, b, {0, 2, 3}, true));
  state.SetBytesProcessed(state.iterations() * 2 * a.numel() * sizeof(float));
}
BENCHMARK(BM_SumOfProduct)->UseRealTime()->Unit(benchmark::kMillisecond);

// Training-mode batch normalisation on the same shape (fused, core/batch_norm.h), its backward and
// the backward of that (second-order MAML's outer backward runs both).
void BM_BatchNorm(benchmark::State& state) {
  const dg::Tensor x = dg::randn(kBatchNormInput), w = dg::randn({64}), b = dg::randn({64});
  for (auto _ : state) benchmark::DoNotOptimize(untracked::batch_norm(x, w, b, 1e-5));
  state.SetBytesProcessed(state.iterations() * 2 * x.numel() * sizeof(float));
}
BENCHMARK(BM_BatchNorm)->UseRealTime()->Unit(benchmark::kMillisecond);

// Each call gets a fresh output gradient, copied in (as autograd hands one over): the in-place
// backward (Note [Reused gradients]) would otherwise feed on its own results.
void batch_norm_backward_bench(benchmark::State& state, bool in_place) {
  const dg::Tensor x = dg::randn(kBatchNormInput), w = dg::randn({64}), g = dg::randn(kBatchNormInput);
  const dg::BatchNormOutputs forward = untracked::batch_norm(x, w, {}, 1e-5);
  const dg::Tensor fresh = dg::empty_like(g);
  for (auto _ : state) {
    untracked::copy_(fresh, g);
    benchmark::DoNotOptimize(in_place ? untracked::batch_norm_backward_(fresh, x, w, forward.mean, forward.invstd)
                                      : untracked::batch_norm_backward(fresh, x, w, forward.mean, forward.invstd));
  }
  state.SetBytesProcessed(state.iterations() * 4 * x.numel() * sizeof(float));
}
void BM_BatchNormBackward(benchmark::State& state) { batch_norm_backward_bench(state, false); }
BENCHMARK(BM_BatchNormBackward)->UseRealTime()->Unit(benchmark::kMillisecond);
void BM_BatchNormBackwardInPlace(benchmark::State& state) { batch_norm_backward_bench(state, true); }
BENCHMARK(BM_BatchNormBackwardInPlace)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_BatchNormDoubleBackward(benchmark::State& state) {
  const dg::Tensor x = dg::randn(kBatchNormInput), w = dg::randn({64}), g = dg::randn(kBatchNormInput);
  const dg::Tensor gg = dg::randn(kBatchNormInput), gg_weight = dg::randn({64});
  const dg::BatchNormOutputs forward = untracked::batch_norm(x, w, {}, 1e-5);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        untracked::batch_norm_double_backward(gg, gg_weight, {}, g, x, w, forward.mean, forward.invstd));
  }
  state.SetBytesProcessed(state.iterations() * 5 * x.numel() * sizeof(float));
}
BENCHMARK(BM_BatchNormDoubleBackward)->UseRealTime()->Unit(benchmark::kMillisecond);

// Max-pool's backward: the output's gradient added at the argmax positions of a zero image.
void BM_MaxPool2dBackward(benchmark::State& state) {
  const dg::Tensor x = dg::randn(kActivation);
  const dg::Pool2dOptions options{.kernel_size = {2, 2}};
  const dg::ValuesIndices pooled = untracked::max_pool2d(x, options);
  const dg::Tensor grad = dg::randn(pooled.values.sizes());
  for (auto _ : state)
    benchmark::DoNotOptimize(untracked::max_pool2d_backward(grad, pooled.indices, kActivation, options));
  state.SetBytesProcessed(state.iterations() * x.numel() * sizeof(float));
}
BENCHMARK(BM_MaxPool2dBackward)->UseRealTime()->Unit(benchmark::kMillisecond);

// The second conv's columns (3 x 3, padding 1) of the pooled [64, 32, 14, 14] activation, and back.
void BM_Im2col(benchmark::State& state) {
  const dg::Tensor x = dg::randn({64, 32, 14, 14});
  for (auto _ : state) benchmark::DoNotOptimize(untracked::im2col(x, {.kernel_size = {3, 3}, .padding = {1, 1}}));
  state.SetBytesProcessed(state.iterations() * 9 * x.numel() * sizeof(float));
}
BENCHMARK(BM_Im2col)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Col2im(benchmark::State& state) {
  const dg::Tensor columns = dg::randn({64, 32 * 9, 14 * 14});
  for (auto _ : state) {
    benchmark::DoNotOptimize(untracked::col2im(columns, {14, 14}, {.kernel_size = {3, 3}, .padding = {1, 1}}));
  }
  state.SetBytesProcessed(state.iterations() * columns.numel() * sizeof(float));
}
BENCHMARK(BM_Col2im)->UseRealTime()->Unit(benchmark::kMillisecond);

// The second conv of the CNN (32 -> 64 channels, 3 x 3, padding 1) on its [64, 32, 14, 14] input:
// forward, and the gradients of input, weight and bias (at once, as a training step's backward
// takes them). GFLOPS counts the products' flops.
const dg::Shape kConvInput{64, 32, 14, 14}, kConvWeight{64, 32, 3, 3};
constexpr double kConvFlops = 2.0 * 64 * 64 * (32 * 9) * (14 * 14);

void BM_Conv2d(benchmark::State& state) {
  const dg::Tensor x = dg::randn(kConvInput), w = dg::randn(kConvWeight), b = dg::randn({64});
  for (auto _ : state) benchmark::DoNotOptimize(untracked::conv2d(x, w, b, {.padding = {1, 1}}));
  state.counters["GFLOPS"] = benchmark::Counter(kConvFlops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Conv2d)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Conv2dBackward(benchmark::State& state) {
  const dg::Tensor x = dg::randn(kConvInput), w = dg::randn(kConvWeight), g = dg::randn({64, 64, 14, 14});
  for (auto _ : state) benchmark::DoNotOptimize(untracked::conv2d_backward(g, x, w, {}, {.padding = {1, 1}}));
  state.counters["GFLOPS"] = benchmark::Counter(2 * kConvFlops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Conv2dBackward)->UseRealTime()->Unit(benchmark::kMillisecond);

// CUDA: the device runs ops asynchronously, so an iteration queues kCudaOpsPerIteration ops
// and waits for them; the counter seconds_per_op is the figure to read (launch overhead for
// one element, bandwidth or GFLOP/s for the large ones).
constexpr int kCudaOpsPerIteration = 20;

template <typename Op>
void run_cuda_ops(benchmark::State& state, Op op) {
  op();  // warm up: module load, cuBLAS handle, caching allocator
  dg::cuda::synchronize();
  for (auto _ : state) {
    for (int i = 0; i < kCudaOpsPerIteration; ++i) op();
    dg::cuda::synchronize();
  }
  state.counters["seconds_per_op"] = benchmark::Counter(static_cast<double>(state.iterations()) * kCudaOpsPerIteration,
                                                        benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

constexpr dg::TensorOptions kOnCuda{.dtype = dg::kFloat32, .device = dg::Device::cuda(0)};

void BM_CudaAddOneElement(benchmark::State& state) {
  const dg::Tensor a = dg::ones({1}, kOnCuda), b = dg::ones({1}, kOnCuda);
  run_cuda_ops(state, [&] { benchmark::DoNotOptimize(untracked::add(a, b)); });
}

void BM_CudaAdd16M(benchmark::State& state) {
  const dg::Tensor a = dg::rand({kLarge}, kOnCuda), b = dg::rand({kLarge}, kOnCuda);
  run_cuda_ops(state, [&] { benchmark::DoNotOptimize(untracked::add(a, b)); });
  state.SetBytesProcessed(state.iterations() * kCudaOpsPerIteration * 3 * kLarge * sizeof(float));
}

void BM_CudaSum16M(benchmark::State& state) {
  const dg::Tensor a = dg::rand({kLarge}, kOnCuda);
  run_cuda_ops(state, [&] { benchmark::DoNotOptimize(untracked::sum(a)); });
  state.SetBytesProcessed(state.iterations() * kCudaOpsPerIteration * kLarge * sizeof(float));
}

void BM_CudaMatmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  const dg::Tensor a = dg::randn({n, n}, kOnCuda), b = dg::randn({n, n}, kOnCuda);
  run_cuda_ops(state, [&] { benchmark::DoNotOptimize(untracked::matmul(a, b)); });
  set_gflops(state, n, kCudaOpsPerIteration);
}

void register_cuda_benchmarks() {
  benchmark::RegisterBenchmark("BM_CudaAddOneElement", BM_CudaAddOneElement)->UseRealTime();
  benchmark::RegisterBenchmark("BM_CudaAdd16M", BM_CudaAdd16M)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_CudaSum16M", BM_CudaSum16M)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_CudaMatmul", BM_CudaMatmul)
      ->Arg(1024)
      ->Arg(2048)
      ->Arg(4096)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (dg::cuda::is_available()) register_cuda_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
