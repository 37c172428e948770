// Seconds per outer iteration of distributed few-shot MAML on Fashion-MNIST: the workload of
// TorchOpt's distributed benchmark as examples/maml_fewshot runs it, with its flags and
// defaults (examples/fewshot_program.h): a meta-batch of 32 5-way 5-shot tasks with 15 queries
// per class, one call per task, 5 second-order inner SGD steps at 0.1 on MAML's Omniglot conv
// net (75,205 parameters), the mean query loss differentiated back through the workers, and an
// Adam step at 1e-3 on rank 0.
//
// Every rank runs this program with the launcher's environment; rank 0 drives: --warmup outer
// iterations, then --iterations timed one by one, and prints one JSON line (bench/maml_timing.h)
// named "maml_fewshot/worldN", or "maml_fewshot/local" with --local (one process, no RPC).
// --device cuda computes on the GPUs (each rank on its local rank's).
//
//   build/launcher/distgrad-run --standalone --nproc-per-node 4 build/bench/maml_fewshot_bench
//   build/bench/maml_fewshot_bench --local
// bench/run_maml_bench.py --workload fewshot runs the worlds beside TorchOpt's
// torchopt.distributed and hand-written torch.distributed.rpc (bench/peer/maml_*.py).
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "bench/maml_timing.h"
#include "examples/fewshot_program.h"

ABSL_FLAG(int, warmup, 2, "outer iterations before timing");
ABSL_FLAG(int, iterations, 10, "timed outer iterations");

namespace dg = distgrad;

namespace {

void run() {
  const fewshot::TaskSampler tasks(dg::data::load_fashion_mnist(dg::data::Split::kTrain),
                                   {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, fewshot::episode_shape_flags());
  const fewshot::InnerLoop inner = fewshot::inner_loop_flags();
  const dg::Device device = fewshot::compute_device();
  const bool local = absl::GetFlag(FLAGS_local);
  dg::manual_seed(absl::GetFlag(FLAGS_seed));
  std::mt19937_64 random(absl::GetFlag(FLAGS_seed));
  const auto net = fewshot::conv_net_for(device);
  dg::optim::Adam outer(net->parameters(), absl::GetFlag(FLAGS_outer_lr));

  auto outer_iteration = [&] {
    const fewshot::Episodes batch = fewshot::to_device(tasks.sample(absl::GetFlag(FLAGS_meta_batch), random), device);
    outer.zero_grad();
    const bench::OuterIterationPhases phases = bench::forward_and_backward(local, device, [&](auto) {
      return std::get<0>(
          fewshot::meta_loss_and_accuracy(dg::nn::module_clone(*net, dg::nn::CloneBy::kClone), batch, inner));
    });
    outer.step();
    if (device.is_cuda()) dg::cuda::synchronize(device.index);
    return phases;
  };
  bench::time_outer_iterations(
      local ? "maml_fewshot/local" : "maml_fewshot/world" + std::to_string(dg::get_world_size()),
      absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_iterations), outer_iteration);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("maml_fewshot_bench [--local] [--warmup 2] [--iterations 10] (one process per rank)");
  absl::ParseCommandLine(argc, argv);
  return fewshot::run_program("maml_fewshot_bench", run);
}
