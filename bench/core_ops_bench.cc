// Core op costs: dispatch overhead on tiny tensors, elementwise bandwidth on 16M floats
// against memcpy, and sgemm through ops::matmul against calling OpenBLAS directly.
//
//   build/bench/core_ops_bench --benchmark_format=json   (bench/run_core_bench.py compares with PyTorch)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstring>
#include <vector>

#include "core/ops.h"

namespace dg = distgrad;
namespace ops = distgrad::ops;

namespace {

constexpr int64_t kLarge = 16 << 20;  // 16M floats = 64 MiB per tensor

void BM_AddOneElement(benchmark::State& state) {
  const dg::Tensor a = dg::ones({1}), b = dg::ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(ops::add(a, b));
}
BENCHMARK(BM_AddOneElement);

void BM_AddOneElementInPlace(benchmark::State& state) {
  const dg::Tensor a = dg::ones({1}), b = dg::ones({1});
  for (auto _ : state) ops::add_(a, b);
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
  for (auto _ : state) benchmark::DoNotOptimize(ops::add(a, b));
  state.SetBytesProcessed(state.iterations() * 3 * kLarge * sizeof(float));
}
BENCHMARK(BM_Add16M)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_AddInPlace16M(benchmark::State& state) {
  const dg::Tensor a = dg::rand({kLarge}), b = dg::rand({kLarge});
  for (auto _ : state) ops::add_(a, b);
  state.SetBytesProcessed(state.iterations() * 3 * kLarge * sizeof(float));
}
BENCHMARK(BM_AddInPlace16M)->UseRealTime()->Unit(benchmark::kMillisecond);

void set_gflops(benchmark::State& state, int64_t n) {
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
}

void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  const dg::Tensor a = dg::randn({n, n}), b = dg::randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(ops::matmul(a, b));
  set_gflops(state, n);
}
BENCHMARK(BM_Matmul)->Arg(512)->Arg(1024)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);

// OpenBLAS called directly into a preallocated result: the ceiling for BM_Matmul.
void BM_CblasSgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  const dg::Tensor a = dg::randn({n, n}), b = dg::randn({n, n}), c = dg::zeros({n, n});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n,
                0.0f, c.data<float>(), n);
    benchmark::ClobberMemory();
  }
  set_gflops(state, n);
}
BENCHMARK(BM_CblasSgemm)->Arg(512)->Arg(1024)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
