// MAML with a data-parallel inner loop, on sinusoid regression: the second-order gradients cross
// the workers (distributed create_graph, docs/distributed-autograd.md, "Higher-order gradients
// across workers").
//
// The main example (maml_sinusoid) runs each task's whole inner loop on one worker. Here each
// task is adapted by the driver, but its support set is split across every worker (the
// partitioner batch_partitioner: a chunk of the points per rank, rank 0 included): each inner
// step sums the workers' squared errors (`parallelize` with sum_reducer), and the inner gradient
// is a distributed autograd::grad of that loss with create_graph = true at the adapted weights.
// The query loss after --inner_steps such steps is differentiated back, through every inner step
// and every worker, to the initial weights, which Adam updates. With --local, the same
// arithmetic in one process with the local engine (the reference of the tests).
//
//   build/launcher/distgrad-run --standalone --nproc-per-node 4 build/examples/maml_data_parallel
//
// With --dump_gradients PATH, rank 0 writes the meta-gradients of the first iteration and stops:
// at every world size they equal --local's (tests/examples/maml_data_parallel_test.sh).
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "distgrad.h"
#include "examples/command_line.h"
#include "examples/data_parallel_maml.h"
#include "examples/maml_flags.h"
#include "examples/progress.h"
#include "examples/sinusoid.h"
#include "examples/svg_plot.h"

ABSL_FLAG(std::string, plot, "maml_data_parallel.svg", "where rank 0 plots the meta-test loss (empty: no plot)");
ABSL_FLAG(std::string, dtype, "float32", "float32, or float64 for the weights and the tasks");
ABSL_FLAG(bool, local, false, "one process, no RPC: the same arithmetic with the local engine");
ABSL_FLAG(int, eval_every, 50, "meta-iterations between two meta-test losses (the plot's points)");

namespace dg = distgrad;
using sinusoid::Tasks;

namespace {

dg::DType weights_dtype() {
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  DISTGRAD_CHECK(dtype == "float32" || dtype == "float64", "--dtype must be float32 or float64, found '", dtype, "'");
  return dtype == "float32" ? dg::kFloat32 : dg::kFloat64;
}

Tasks in_dtype(Tasks tasks) {
  for (dg::Tensor* tensor : {&tasks.x_support, &tasks.y_support, &tasks.x_query, &tasks.y_query}) {
    *tensor = dg::to(*tensor, weights_dtype());
  }
  return tasks;
}

// The mean query loss of `tasks` after --inner_steps steps at --inner_lr (examples/data_parallel_maml.h).
dg::Tensor meta_loss(const dg::autograd::Context* context, const dg::nn::ParamDict& params, const Tasks& tasks) {
  return sinusoid::data_parallel::meta_loss(context, params, tasks, absl::GetFlag(FLAGS_inner_steps),
                                            absl::GetFlag(FLAGS_inner_lr));
}

// The meta-test loss on `tasks`: adapted from detached weights (the inner gradients still cross
// the workers), in a context of its own.
double meta_test_loss(const sinusoid::Net& net, const Tasks& tasks) {
  const dg::nn::ParamDict params = dg::nn::module_clone(net, dg::nn::CloneBy::kDeepcopy);
  std::optional<dg::autograd::Context> context;
  if (!absl::GetFlag(FLAGS_local)) context.emplace();
  return meta_loss(context ? &*context : nullptr, params, tasks).item<double>();
}

void train() {
  DISTGRAD_CHECK(absl::GetFlag(FLAGS_meta_batch) >= 1 && absl::GetFlag(FLAGS_inner_steps) >= 1 &&
                     absl::GetFlag(FLAGS_eval_every) >= 1,
                 "expected --meta_batch, --inner_steps and --eval_every >= 1");
  dg::manual_seed(absl::GetFlag(FLAGS_seed));
  dg::Generator test_generator(absl::GetFlag(FLAGS_seed) + 1);
  dg::Generator train_generator(absl::GetFlag(FLAGS_seed) + 2);
  sinusoid::Net net;
  net.to(weights_dtype());
  dg::optim::Adam outer(net.parameters(), absl::GetFlag(FLAGS_outer_lr));
  const bool local = absl::GetFlag(FLAGS_local);
  std::printf("MAML with a data-parallel inner loop: %s, %d support points per task\n",
              local ? "one process"
                    : ("each support set split over " + std::to_string(dg::get_world_size()) + " workers").c_str(),
              absl::GetFlag(FLAGS_shots));
  const Tasks test_tasks =
      in_dtype(sinusoid::sample_tasks(absl::GetFlag(FLAGS_eval_tasks), absl::GetFlag(FLAGS_shots), test_generator));
  const std::string dump_path = absl::GetFlag(FLAGS_dump_gradients);
  std::vector<double> curve_x, curve_loss;
  if (dump_path.empty()) {
    curve_x.push_back(0);
    curve_loss.push_back(meta_test_loss(net, test_tasks));
    std::printf("meta-test loss before training: %.4f\n", curve_loss.back());
  }

  const int iterations = absl::GetFlag(FLAGS_iterations);
  examples::Progress progress("meta-train", iterations);
  for (int it = 0; it < iterations; ++it) {
    const Tasks tasks =
        in_dtype(sinusoid::sample_tasks(absl::GetFlag(FLAGS_meta_batch), absl::GetFlag(FLAGS_shots), train_generator));
    std::optional<dg::autograd::Context> context;
    if (!local) context.emplace();
    const dg::Tensor loss =
        meta_loss(context ? &*context : nullptr, dg::nn::module_clone(net, dg::nn::CloneBy::kClone), tasks);
    outer.zero_grad();
    if (context) {
      dg::autograd::backward(*context, {loss});
    } else {
      loss.backward();
    }
    if (!dump_path.empty()) {
      sinusoid::write_gradients(net, dump_path);
      std::printf("wrote the meta-gradients of iteration 1 to %s\n", dump_path.c_str());
      return;
    }
    outer.step();
    progress.update(it + 1, loss.item<double>());
    context.reset();  // released before the meta-test opens its own
    if ((it + 1) % absl::GetFlag(FLAGS_eval_every) == 0 || it + 1 == iterations) {
      curve_x.push_back(it + 1);
      curve_loss.push_back(meta_test_loss(net, test_tasks));
    }
  }
  progress.finish();
  const double before = curve_loss.front(), after = curve_loss.back();
  std::printf("meta-test loss after training:  %.4f (%.1fx lower)\n", after, before / after);
  if (const std::string path = absl::GetFlag(FLAGS_plot); !path.empty()) {
    examples::SvgPlot plot("MAML with a data-parallel inner loop: meta-test loss", "meta-iteration", "loss");
    plot.add("meta-test loss", curve_x, curve_loss, "#1f77b4");
    plot.write(path);
    std::printf("wrote %s\n", path.c_str());
  }
  const double wanted = absl::GetFlag(FLAGS_min_improvement);
  if (!(after * wanted <= before)) {
    throw std::runtime_error("training lowered the meta-test loss " + std::to_string(before / after) +
                             "-fold, less than --min_improvement " + std::to_string(wanted));
  }
}

}  // namespace

int main(int argc, char** argv) {
  examples::parse_command_line(argc, argv, "MAML with a data-parallel inner loop; start it with distgrad-run");
  try {
    if (absl::GetFlag(FLAGS_local)) {
      train();
      return 0;
    }
    return dg::auto_init_rpc([] { dg::manual_seed(absl::GetFlag(FLAGS_seed) + dg::get_rank()); },
                             [] { dg::rank_zero_only(train)(); });
  } catch (const std::exception& error) {
    std::fprintf(stderr, "maml_data_parallel: %s\n", error.what());
    return 1;
  }
}
