// Seconds per outer iteration of distributed MAML on sinusoid regression, the workload of
// examples/maml_sinusoid with its flags and defaults (examples/maml_flags.h): a meta-batch of
// 16 tasks of 10 shots, 5 second-order inner SGD steps at 0.01 (MetaSGD) on an MLP 1-40-40-1
// with ReLU, the mean query loss differentiated back through the workers (distributed
// autograd), and an Adam step at 1e-3 on rank 0.
//
// Every rank runs this program with the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT); rank 0 drives: --warmup outer iterations, then --iterations (here 30 by
// default) timed one by one, and prints one JSON line: {"name": "maml/worldN",
// "seconds_per_iter": median, "p10", "p90", "iterations", "forward_seconds", "backward_seconds"}
// (the last two: medians of the calls up to the mean loss, and of the backward pass). With
// --local the same iteration runs in one process without RPC (the tasks split by the same
// partitioner and adapted in turn, the mean loss backward): "maml/local".
//
//   RANK=0 WORLD_SIZE=2 MASTER_PORT=29511 build/bench/maml_bench &
//   RANK=1 WORLD_SIZE=2 MASTER_PORT=29511 build/bench/maml_bench
//   build/bench/maml_bench --local
// bench/run_maml_bench.py starts the worlds and compares with TorchOpt's torchopt.distributed
// and with hand-written torch.distributed.rpc (bench/peer/maml_*.py print the same names).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "distgrad.h"
#include "examples/maml_flags.h"
#include "examples/sinusoid.h"

ABSL_FLAG(int, warmup, 5, "outer iterations before timing");
ABSL_FLAG(bool, local, false, "one process, no RPC: the tasks adapted in turn");

namespace dg = distgrad;
using sinusoid::Tasks;

// Runs on a worker: the query loss of one task after --inner_steps MetaSGD steps on its support
// set. One network per serving thread: functional_call swaps tensors into the module.
dg::Tensor maml_task_loss(dg::nn::ParamDict params, Tasks task, int inner_steps, double inner_lr) {
  thread_local sinusoid::Net net;
  return sinusoid::adapted_query_loss(net, std::move(params), task, inner_steps, inner_lr);
}
DISTGRAD_REMOTE(maml_task_loss);

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// The q-quantile of samples, interpolated linearly between neighbours (numpy's default, as the
// peer's statistics.quantiles(method="inclusive")).
double quantile(std::vector<double> samples, double q) {
  std::sort(samples.begin(), samples.end());
  const double position = q * static_cast<double>(samples.size() - 1);
  const size_t below = static_cast<size_t>(position), above = std::min(below + 1, samples.size() - 1);
  return samples[below] + (position - static_cast<double>(below)) * (samples[above] - samples[below]);
}

const dg::DimPartitioner kOneTaskPerCall = dg::dim_partitioner(0, {.exclusive = true, .keepdim = false});

// The mean query loss of a meta-batch, one task per call in this process.
dg::Tensor local_meta_loss(const dg::nn::ParamDict& params, const Tasks& tasks, int inner_steps, double inner_lr) {
  std::vector<dg::Tensor> losses;
  for (const auto& [rank, arguments] : kOneTaskPerCall(dg::args(params, tasks, inner_steps, inner_lr))) {
    losses.push_back(std::apply(maml_task_loss, arguments));
  }
  return dg::mean_reducer(losses);
}

// Runs the warm-up and the timed outer iterations and prints the JSON line.
void run() {
  const bool local = absl::GetFlag(FLAGS_local);
  const int meta_batch = absl::GetFlag(FLAGS_meta_batch), shots = absl::GetFlag(FLAGS_shots);
  const int inner_steps = absl::GetFlag(FLAGS_inner_steps);
  const double inner_lr = absl::GetFlag(FLAGS_inner_lr);
  dg::manual_seed(absl::GetFlag(FLAGS_seed));
  dg::Generator task_generator(absl::GetFlag(FLAGS_seed) + 2);
  sinusoid::Net net;
  dg::optim::Adam outer(net.parameters(), absl::GetFlag(FLAGS_outer_lr));
  const auto meta_loss = dg::parallelize(maml_task_loss, kOneTaskPerCall, dg::mean_reducer);

  // One outer iteration; adds its time, and that of its forward part (the calls and the mean)
  // and of its backward pass, to the samples.
  std::vector<double> samples, forward_samples, backward_samples;
  auto outer_iteration = [&] {
    const auto start = Clock::now();
    const Tasks tasks = sinusoid::sample_tasks(meta_batch, shots, task_generator);
    outer.zero_grad();
    {
      std::optional<dg::autograd::Context> context;
      if (!local) context.emplace();
      const auto forward_start = Clock::now();
      const dg::nn::ParamDict params = dg::nn::module_clone(net, dg::nn::CloneBy::kClone);
      const dg::Tensor loss = local ? local_meta_loss(params, tasks, inner_steps, inner_lr)
                                    : meta_loss(params, tasks, inner_steps, inner_lr);
      const auto backward_start = Clock::now();
      if (local) {
        loss.backward();
      } else {
        dg::autograd::backward(*context, {loss});
      }
      forward_samples.push_back(seconds_between(forward_start, backward_start));
      backward_samples.push_back(seconds_between(backward_start, Clock::now()));
    }
    outer.step();
    samples.push_back(seconds_between(start, Clock::now()));
  };

  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) outer_iteration();
  samples.clear(), forward_samples.clear(), backward_samples.clear();
  for (int i = 0; i < absl::GetFlag(FLAGS_iterations); ++i) outer_iteration();
  DISTGRAD_CHECK(!samples.empty(), "maml_bench: expected --iterations >= 1, found ", absl::GetFlag(FLAGS_iterations));
  const std::string name = local ? "maml/local" : "maml/world" + std::to_string(dg::get_world_size());
  std::printf(
      "{\"name\": \"%s\", \"seconds_per_iter\": %.9g, \"p10\": %.9g, \"p90\": %.9g, \"iterations\": %zu, "
      "\"forward_seconds\": %.9g, \"backward_seconds\": %.9g}\n",
      name.c_str(), quantile(samples, 0.5), quantile(samples, 0.1), quantile(samples, 0.9), samples.size(),
      quantile(forward_samples, 0.5), quantile(backward_samples, 0.5));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("maml_bench [--local] [--warmup 5] [--iterations 30] (one process per rank)");
  absl::SetFlag(&FLAGS_iterations, 30);  // timed outer iterations (the examples' default is 2000)
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_local)) {
    run();
    return 0;
  }
  return dg::auto_init_rpc([] { dg::manual_seed(absl::GetFlag(FLAGS_seed) + dg::get_rank()); },
                           dg::rank_zero_only(run));
}
