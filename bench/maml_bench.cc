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
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "bench/maml_timing.h"
#include "distgrad.h"
#include "examples/maml_flags.h"
#include "examples/sinusoid.h"

ABSL_FLAG(int, warmup, 5, "outer iterations before timing");
ABSL_FLAG(bool, local, false, "one process, no RPC: the tasks adapted in turn");
ABSL_FLAG(int, num_worker_threads, distgrad::rpc::RpcOptions{}.num_worker_threads,
          "each rank's executor threads (RpcOptions::num_worker_threads)");
ABSL_FLAG(bool, reissue_lost_partitions, false,
          "the map-reduce calls under RemoteCallOptions::reissue_lost_partitions");

namespace dg = distgrad;
using sinusoid::Tasks;

// Runs on a worker: the query loss of one task after --inner_steps MetaSGD steps on its support
// set. One network for the process, shared by the threads serving calls at once.
dg::Tensor maml_task_loss(dg::nn::ParamDict params, Tasks task, int inner_steps, double inner_lr) {
  static sinusoid::Net net;
  return sinusoid::adapted_query_loss(net, std::move(params), task, inner_steps, inner_lr);
}
DISTGRAD_REMOTE(maml_task_loss);

namespace {

const dg::DimPartitioner kOneTaskPerCall = dg::dim_partitioner(0, {.exclusive = true, .keepdim = false});

// The mean query loss of a meta-batch, one task per call in this process.
dg::Tensor local_meta_loss(const dg::nn::ParamDict& params, const Tasks& tasks, int inner_steps, double inner_lr) {
  std::vector<dg::Tensor> losses;
  for (const auto& [rank, arguments] : kOneTaskPerCall(dg::args(params, tasks, inner_steps, inner_lr))) {
    losses.push_back(std::apply(maml_task_loss, arguments));
  }
  return dg::mean_reducer(losses);
}

// Times the outer iterations and prints the JSON line (bench/maml_timing.h).
void run() {
  const bool local = absl::GetFlag(FLAGS_local);
  const int meta_batch = absl::GetFlag(FLAGS_meta_batch), shots = absl::GetFlag(FLAGS_shots);
  const int inner_steps = absl::GetFlag(FLAGS_inner_steps);
  const double inner_lr = absl::GetFlag(FLAGS_inner_lr);
  dg::manual_seed(absl::GetFlag(FLAGS_seed));
  dg::Generator task_generator(absl::GetFlag(FLAGS_seed) + 2);
  sinusoid::Net net;
  dg::optim::Adam outer(net.parameters(), absl::GetFlag(FLAGS_outer_lr));
  const auto meta_loss = dg::parallelize(maml_task_loss, kOneTaskPerCall, dg::mean_reducer,
                                         {.reissue_lost_partitions = absl::GetFlag(FLAGS_reissue_lost_partitions)});

  auto outer_iteration = [&] {
    const Tasks tasks = sinusoid::sample_tasks(meta_batch, shots, task_generator);
    outer.zero_grad();
    const bench::OuterIterationPhases phases = bench::forward_and_backward(local, dg::Device::cpu(), [&](auto) {
      const dg::nn::ParamDict params = dg::nn::module_clone(net, dg::nn::CloneBy::kClone);
      return local ? local_meta_loss(params, tasks, inner_steps, inner_lr)
                   : meta_loss(params, tasks, inner_steps, inner_lr);
    });
    outer.step();
    return phases;
  };
  bench::time_outer_iterations(local ? "maml/local" : "maml/world" + std::to_string(dg::get_world_size()),
                               absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_iterations), outer_iteration);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "maml_bench [--local] [--warmup 5] [--iterations 30] [--num_worker_threads 16] (one process per rank)");
  absl::SetFlag(&FLAGS_iterations, 30);  // timed outer iterations (the examples' default is 2000)
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_local)) {
    run();
    return 0;
  }
  dg::rpc::RpcOptions options;
  options.num_worker_threads = absl::GetFlag(FLAGS_num_worker_threads);
  options.max_worker_threads = std::max(options.max_worker_threads, options.num_worker_threads);
  return dg::auto_init_rpc([] { dg::manual_seed(absl::GetFlag(FLAGS_seed) + dg::get_rank()); }, dg::rank_zero_only(run),
                           options);
}
