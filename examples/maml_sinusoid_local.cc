// MAML on sinusoid regression in one process (Finn et al., 2017, section 5.1): the baseline
// of the distributed example.
//
// Each meta-iteration samples a meta-batch of tasks; for each task, the fast weights take
// --inner-steps SGD steps on its support set (MetaSGD: differentiable, second order), and the
// adapted model's loss on the query set is the task's meta-loss; the mean over the batch is
// differentiated back to the initial weights, which Adam updates. Before and after training,
// the meta-test loss (the query loss after adaptation, averaged over fresh tasks) is printed;
// with --min_improvement F the program exits non-zero when training did not lower it F-fold.
//
//   build/examples/maml_sinusoid_local [--iterations 2000] [--meta_batch 16] [--inner_steps 5]
//
// With --dump_gradients PATH it writes the meta-gradients of the first iteration to PATH
// (safetensors) and stops, for comparison with the distributed example (examples/maml_sinusoid).
#include <cstdio>
#include <string>

#include "examples/command_line.h"
#include "examples/maml_flags.h"
#include "examples/progress.h"
#include "examples/sinusoid.h"
#include "optim/adam.h"

namespace dg = distgrad;

namespace {

// The query loss of one task of the batch after adapting `net`'s weights to its support set.
dg::Tensor adapted_query_loss(sinusoid::Net& net, const sinusoid::Tasks& tasks, int64_t task) {
  return sinusoid::adapted_query_loss(net, dg::nn::module_clone(net, dg::nn::CloneBy::kReference),
                                      sinusoid::select_task(tasks, task), absl::GetFlag(FLAGS_inner_steps),
                                      absl::GetFlag(FLAGS_inner_lr));
}

// The meta-test loss: the mean adapted query loss over fresh tasks (no outer gradient).
double meta_test_loss(sinusoid::Net& net, dg::Generator& generator) {
  const int64_t count = absl::GetFlag(FLAGS_eval_tasks);
  const sinusoid::Tasks tasks = sinusoid::sample_tasks(count, absl::GetFlag(FLAGS_shots), generator);
  double total = 0;
  for (int64_t task = 0; task < count; ++task) total += adapted_query_loss(net, tasks, task).item<double>();
  return total / static_cast<double>(count);
}

}  // namespace

int main(int argc, char** argv) {
  examples::parse_command_line(argc, argv, "MAML on sinusoid regression, in one process");
  dg::manual_seed(absl::GetFlag(FLAGS_seed));
  dg::Generator test_tasks(absl::GetFlag(FLAGS_seed) + 1);  // the same fresh tasks before and after
  dg::Generator train_tasks(absl::GetFlag(FLAGS_seed) + 2);

  sinusoid::Net net;
  dg::optim::Adam outer(net.parameters(), absl::GetFlag(FLAGS_outer_lr));
  const std::string dump_path = absl::GetFlag(FLAGS_dump_gradients);
  double before = 0;
  if (dump_path.empty()) {
    before = meta_test_loss(net, test_tasks);
    std::printf("meta-test loss before training: %.4f\n", before);
  }

  const int iterations = absl::GetFlag(FLAGS_iterations);
  examples::Progress progress("meta-train", iterations);
  for (int it = 0; it < iterations; ++it) {
    const sinusoid::Tasks tasks =
        sinusoid::sample_tasks(absl::GetFlag(FLAGS_meta_batch), absl::GetFlag(FLAGS_shots), train_tasks);
    std::vector<dg::Tensor> losses;
    for (int64_t task = 0; task < absl::GetFlag(FLAGS_meta_batch); ++task) {
      losses.push_back(adapted_query_loss(net, tasks, task));
    }
    const dg::Tensor meta_loss = dg::mean(dg::stack(losses));
    outer.zero_grad();
    meta_loss.backward();
    if (!dump_path.empty()) {
      sinusoid::write_gradients(net, dump_path);
      std::printf("wrote the meta-gradients of iteration 1 to %s\n", dump_path.c_str());
      return 0;
    }
    outer.step();
    progress.update(it + 1, meta_loss.item<double>());
  }
  progress.finish();

  test_tasks.manual_seed(absl::GetFlag(FLAGS_seed) + 1);
  const double after = meta_test_loss(net, test_tasks);
  std::printf("meta-test loss after training:  %.4f (%.1fx lower)\n", after, before / after);
  if (const std::string path = absl::GetFlag(FLAGS_save_parameters); !path.empty()) {
    sinusoid::write_parameters(net, path);
    std::printf("wrote the trained parameters to %s\n", path.c_str());
  }
  const double wanted = absl::GetFlag(FLAGS_min_improvement);
  if (after * wanted <= before) return 0;
  std::fprintf(stderr, "training lowered the meta-test loss %.2f-fold, less than --min_improvement %g\n",
               before / after, wanted);
  return 1;
}
