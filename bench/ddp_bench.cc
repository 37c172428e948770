// The DDP benchmark, distgrad's side (bench/peer/ddp_torch.py is PyTorch's, on gloo; both print
// the same rows, and bench/run_ddp_bench.py runs them alternately):
//   --mode allreduce: all_reduce (sum; with --nocheck_calls, without the ranks' agreement check)
//     of float32 tensors of each --sizes byte count (default
//     1 KB .. 64 MB), timed one call at a time after a barrier (sizes >= 16 MB run
//     max(5, iters / 4) iterations); rank 0 prints {"bench": "allreduce", "impl": "distgrad-shm"
//     or "distgrad-gloo" (the group's CPU backend), "world", "bytes", "median_ms", "busbw_gbps",
//     "iters"}, the bus bandwidth
//     as NCCL-tests define it: bytes * 2 (W - 1) / W / median time, in GB/s (1e9 bytes).
//   --mode ddp_step: the MLP 784-256-256-10 or the small CNN of the Fashion-MNIST example in
//     DistributedDataParallel (bucket_cap_mb 25), SGD lr 0.01, a random batch of --batch per rank;
//     a step is zero_grad, forward, cross entropy, backward (gradients averaged), step; rank 0
//     prints {"bench": "ddp_step", "impl": "distgrad-ddp", "world", "model", "batch",
//     "median_ms", "p10_ms", "p90_ms", "iters"}.
//
//   RANK=0 WORLD_SIZE=2 MASTER_PORT=29521 build/bench/ddp_bench --mode allreduce &
//   RANK=1 WORLD_SIZE=2 MASTER_PORT=29521 build/bench/ddp_bench --mode allreduce
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "distgrad.h"
#include "examples/fashion_mnist_models.h"

ABSL_FLAG(std::string, mode, "allreduce", "allreduce or ddp_step");
ABSL_FLAG(std::string, sizes, "1024,16384,262144,1048576,4194304,16777216,67108864",
          "allreduce: comma-separated byte counts");
ABSL_FLAG(std::string, model, "mlp", "ddp_step: mlp or cnn");
ABSL_FLAG(int, batch, 64, "ddp_step: samples per rank");
ABSL_FLAG(bool, check_calls, true,
          "ProcessGroupOptions::check_calls: check before each collective that the ranks agree (DDP's buckets skip "
          "it either way)");
ABSL_FLAG(int, warmup, -1, "untimed calls first (default 3 for allreduce, 5 for ddp_step)");
ABSL_FLAG(int, iters, -1, "timed calls (default 20 for allreduce, 50 for ddp_step)");

namespace dg = distgrad;
namespace nn = distgrad::nn;

namespace {

using Clock = std::chrono::steady_clock;

double quantile(const std::vector<double>& sorted, double q) {
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(position);
  const size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (position - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

// Seconds of each of `iters` calls of fn after `warmup` calls and a barrier, sorted.
std::vector<double> timed_samples(dg::ddp::ProcessGroup& pg, const std::function<void()>& fn, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  pg.barrier();
  std::vector<double> samples;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    fn();
    samples.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(samples.begin(), samples.end());
  return samples;
}

int run_allreduce(dg::ddp::ProcessGroup& pg, int warmup, int iters) {
  const int world = pg.size();
  for (const std::string& text :
       std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty()))) {
    int64_t bytes = 0;
    if (!absl::SimpleAtoi(text, &bytes) || bytes < 4) {
      std::fprintf(stderr, "ddp_bench: --sizes takes byte counts >= 4, found '%s'\n", text.c_str());
      return 2;
    }
    dg::Tensor tensor = dg::full({bytes / 4}, pg.rank() + 1);
    pg.all_reduce(tensor);  // a check, once: the sum of 1..W everywhere
    const double expected = world * (world + 1) / 2.0;
    if (dg::untracked::max(tensor).item<float>() != expected || dg::untracked::min(tensor).item<float>() != expected) {
      std::fprintf(stderr, "ddp_bench: all_reduce of %lld bytes did not give %g everywhere\n",
                   static_cast<long long>(bytes), expected);
      return 1;
    }
    dg::zero_(tensor);
    const int n = bytes < (16 << 20) ? iters : std::max(5, iters / 4);
    const std::vector<double> samples = timed_samples(
        pg, [&] { pg.all_reduce(tensor); }, warmup, n);
    const double median = quantile(samples, 0.5);
    if (pg.rank() == 0) {
      std::printf(
          "{\"bench\": \"allreduce\", \"impl\": \"distgrad-%s\", \"check_calls\": %s, \"world\": %d, "
          "\"bytes\": %lld, \"median_ms\": %.4f, \"busbw_gbps\": %.4f, \"iters\": %d}\n",
          pg.backend_name().c_str(), absl::GetFlag(FLAGS_check_calls) ? "true" : "false", world,
          static_cast<long long>(bytes), median * 1e3,
          static_cast<double>(bytes) * 2 * (world - 1) / world / median / 1e9, n);
      std::fflush(stdout);
    }
  }
  return 0;
}

// The MLP (784-256-256-10), or the CNN of the Fashion-MNIST examples.
std::shared_ptr<nn::Sequential> build_model(const std::string& name) {
  return name == "mlp" ? examples::fashion_mnist_mlp(256, 256) : examples::fashion_mnist_cnn();
}

int run_ddp_step(const std::shared_ptr<dg::ddp::ProcessGroup>& pg, int warmup, int iters) {
  const std::string model_name = absl::GetFlag(FLAGS_model);
  if (model_name != "mlp" && model_name != "cnn") {
    std::fprintf(stderr, "ddp_bench: --model must be mlp or cnn, found '%s'\n", model_name.c_str());
    return 2;
  }
  dg::manual_seed(0);
  std::shared_ptr<nn::Sequential> model = build_model(model_name);
  dg::ddp::DistributedDataParallel ddp(*model, pg, {.bucket_cap_mb = 25});
  dg::optim::SGD optimizer(model->parameters(), 0.01);
  dg::Generator generator(1 + pg->rank());
  const int batch = absl::GetFlag(FLAGS_batch);
  const dg::Tensor images = dg::rand({batch, 1, 28, 28}, {}, generator);
  const dg::Tensor labels = dg::randint(0, 10, {batch}, {.dtype = dg::kInt64}, generator);
  const std::vector<double> samples = timed_samples(
      *pg,
      [&] {
        optimizer.zero_grad();
        nn::cross_entropy(ddp.forward(images), labels).backward();
        optimizer.step();
      },
      warmup, iters);
  if (pg->rank() == 0) {
    std::printf(
        "{\"bench\": \"ddp_step\", \"impl\": \"distgrad-ddp\", \"world\": %d, \"model\": \"%s\", \"batch\": %d, "
        "\"median_ms\": %.4f, \"p10_ms\": %.4f, \"p90_ms\": %.4f, \"iters\": %d}\n",
        pg->size(), model_name.c_str(), batch, quantile(samples, 0.5) * 1e3, quantile(samples, 0.1) * 1e3,
        quantile(samples, 0.9) * 1e3, iters);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("all_reduce bandwidth and DDP step time (see the header of bench/ddp_bench.cc)");
  absl::ParseCommandLine(argc, argv);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "allreduce" && mode != "ddp_step") {
    std::fprintf(stderr, "ddp_bench: --mode must be allreduce or ddp_step, found '%s'\n", mode.c_str());
    return 2;
  }
  const bool allreduce = mode == "allreduce";
  const int warmup = absl::GetFlag(FLAGS_warmup) >= 0 ? absl::GetFlag(FLAGS_warmup) : (allreduce ? 3 : 5);
  const int iters = absl::GetFlag(FLAGS_iters) > 0 ? absl::GetFlag(FLAGS_iters) : (allreduce ? 20 : 50);
  try {
    auto pg = dg::ddp::init_process_group({.backend = dg::ddp::Backend::kCpu,
                                           .timeout = std::chrono::seconds(120),
                                           .check_calls = absl::GetFlag(FLAGS_check_calls)});
    const int code = allreduce ? run_allreduce(*pg, warmup, iters) : run_ddp_step(pg, warmup, iters);
    pg->barrier();
    dg::ddp::destroy_process_group();
    return code;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ddp_bench: error: %s\n", error.what());
    return 1;
  }
}
