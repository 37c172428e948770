// Distributed MAML on sinusoid regression (Finn et al., 2017, section 5.1): the main example.
//
// Rank 0 drives: each meta-iteration it samples a meta-batch of tasks and calls
// adapt_and_eval once per task through `parallelize`, round-robin over every rank (itself
// included). Each call adapts a copy of the weights to its task's support set with
// --inner_steps differentiable SGD steps (MetaSGD) and returns the adapted model's loss on the
// query set; the mean over the batch is differentiated back through the workers (distributed
// autograd) to the initial weights, which Adam updates. The other ranks only serve calls.
//
// Rank 0 prints the meta-test loss (the query loss after adaptation, averaged over fresh tasks)
// before and after training, and writes an SVG plot of a few adapted fits against the true
// sinusoids; with --save_parameters PATH, the trained parameters too. With --min_improvement F
// it exits non-zero when training did not lower the meta-test loss F-fold (the tests ask 2).
//
//   build/launcher/distgrad-run --standalone --nproc-per-node 4 build/examples/maml_sinusoid [--iterations 2000]
//
// With --dump_gradients PATH, rank 0 instead writes the meta-gradients of the first iteration
// to PATH (safetensors, one entry per parameter) and stops: the same seed gives the same
// gradients at every world size and in maml_sinusoid_local (tests/partition checks it).
#include <cmath>
#include <cstdio>
#include <numbers>
#include <stdexcept>
#include <string>

#include "absl/flags/flag.h"
#include "distgrad.h"
#include "examples/command_line.h"
#include "examples/maml_flags.h"
#include "examples/progress.h"
#include "examples/sinusoid.h"
#include "examples/svg_plot.h"

ABSL_FLAG(std::string, plot, "maml_sinusoid.svg", "where rank 0 writes the plot of adapted fits (empty: no plot)");
ABSL_FLAG(bool, reissue_lost_partitions, false,
          "survive lost workers: their tasks go to live ones, an iteration whose backward pass lost one runs "
          "again, and the loss curve stays that of an undisturbed run (docs/fault-tolerance.md)");

namespace dg = distgrad;
using sinusoid::Tasks;

// Runs on a worker: the query loss of one task after adapting `params` to its support set.
dg::Tensor adapt_and_eval(dg::nn::ParamDict params, Tasks task, int inner_steps, double inner_lr) {
  return sinusoid::adapted_query_loss(sinusoid::shared_net(), std::move(params), task, inner_steps, inner_lr);
}
DISTGRAD_REMOTE(adapt_and_eval);

// Runs on a worker: the adapted model's predictions at `x` ([G, 1]), for the plot.
dg::Tensor adapted_fit(dg::nn::ParamDict params, Tasks task, dg::Tensor x, int inner_steps, double inner_lr) {
  sinusoid::Net& net = sinusoid::shared_net();
  params = sinusoid::adapt(net, std::move(params), task, inner_steps, inner_lr);
  dg::autograd::NoGradGuard no_grad;
  return dg::nn::functional_call(net, params, x);
}
DISTGRAD_REMOTE(adapted_fit);

namespace {

const dg::DimPartitioner one_call_per_task = dg::dim_partitioner(0, {.exclusive = true, .keepdim = false});

dg::RemoteCallOptions call_options() {
  return {.reissue_lost_partitions = absl::GetFlag(FLAGS_reissue_lost_partitions)};
}

// One call per task (dim 0 selected away), round-robin over the ranks, the mean of the losses.
dg::Tensor meta_loss(const dg::nn::ParamDict& params, const Tasks& tasks) {
  return dg::parallelize(adapt_and_eval, one_call_per_task, dg::mean_reducer, call_options())(
      params, tasks, absl::GetFlag(FLAGS_inner_steps), absl::GetFlag(FLAGS_inner_lr));
}

double meta_test_loss(const sinusoid::Net& net, dg::Generator& generator) {
  const Tasks tasks = sinusoid::sample_tasks(absl::GetFlag(FLAGS_eval_tasks), absl::GetFlag(FLAGS_shots), generator);
  return meta_loss(dg::nn::module_clone(net, dg::nn::CloneBy::kDeepcopy), tasks).item<double>();
}

std::vector<double> to_vector(const dg::Tensor& tensor) {
  const dg::Tensor flat = dg::to(dg::reshape(tensor.detach(), {-1}), dg::kFloat64);
  std::vector<double> values(static_cast<size_t>(flat.numel()));
  for (int64_t i = 0; i < flat.numel(); ++i) values[static_cast<size_t>(i)] = flat.at<double>({i});
  return values;
}

// Adapts the trained weights to three fresh tasks (one call each, on the workers) and plots
// the fits against the true sinusoids.
void plot_fits(const sinusoid::Net& net, dg::Generator& generator, const std::string& path) {
  constexpr int64_t kTasks = 3, kPoints = 100;
  const Tasks tasks = sinusoid::sample_tasks(kTasks, absl::GetFlag(FLAGS_shots), generator);
  const dg::Tensor grid =
      dg::expand(dg::reshape(dg::linspace(-5.0, 5.0, kPoints), {1, kPoints, 1}), {kTasks, kPoints, 1});
  const std::vector<dg::Tensor> fits =
      dg::remote_sync_call(adapted_fit,
                           dg::args(dg::nn::module_clone(net, dg::nn::CloneBy::kDeepcopy), tasks, grid,
                                    absl::GetFlag(FLAGS_inner_steps), absl::GetFlag(FLAGS_inner_lr)),
                           one_call_per_task, call_options());
  // Each task's true curve A sin(x + phase) = a sin x + b cos x, with (a, b) solved by least
  // squares from its support points (exact: they lie on the curve).
  examples::SvgPlot plot("MAML on sinusoids: " + std::to_string(absl::GetFlag(FLAGS_inner_steps)) + " steps on " +
                             std::to_string(absl::GetFlag(FLAGS_shots)) + " points",
                         "x", "y");
  const char* colors[kTasks] = {"#1f77b4", "#d62728", "#2ca02c"};
  const std::vector<double> xs = to_vector(dg::linspace(-5.0, 5.0, kPoints));
  for (int64_t task = 0; task < kTasks; ++task) {
    const std::vector<double> sx = to_vector(dg::select(tasks.x_support, 0, task));
    const std::vector<double> sy = to_vector(dg::select(tasks.y_support, 0, task));
    double ss = 0, sc = 0, cc = 0, ys = 0, yc = 0;
    for (size_t i = 0; i < sx.size(); ++i) {
      const double s = std::sin(sx[i]), c = std::cos(sx[i]);
      ss += s * s, sc += s * c, cc += c * c, ys += sy[i] * s, yc += sy[i] * c;
    }
    const double det = ss * cc - sc * sc;
    const double a = (ys * cc - yc * sc) / det, b = (yc * ss - ys * sc) / det;
    std::vector<double> truth;
    for (double x : xs) truth.push_back(a * std::sin(x) + b * std::cos(x));
    const std::string label = "task " + std::to_string(task + 1);
    plot.add(label + " true", xs, truth, colors[task], /*dashed=*/true);
    plot.add(label + " adapted", xs, to_vector(fits[static_cast<size_t>(task)]), colors[task]);
  }
  plot.write(path);
  std::printf("wrote %s\n", path.c_str());
}

// The meta-loss of `tasks`, its gradients in `net`'s parameters. Under --reissue_lost_partitions
// a pass that fails (a worker lost during it) runs again from the same weights and tasks: its
// forward sends the lost worker's tasks to live ones, so the result is the undisturbed run's.
dg::Tensor meta_gradients(sinusoid::Net& net, dg::optim::Adam& outer, const Tasks& tasks, int iteration) {
  for (int attempt = 1;; ++attempt) {
    try {
      dg::autograd::Context context;
      const dg::Tensor loss = meta_loss(dg::nn::module_clone(net, dg::nn::CloneBy::kClone), tasks);
      outer.zero_grad();
      dg::autograd::backward(context, {loss});
      return loss;
    } catch (const dg::rpc::RemoteError& error) {
      if (!absl::GetFlag(FLAGS_reissue_lost_partitions) || attempt >= dg::get_world_size()) throw;
      std::printf("meta-iteration %d: %s; running it again\n", iteration + 1, error.what());
    }
  }
}

void train() {
  dg::manual_seed(absl::GetFlag(FLAGS_seed));
  dg::Generator test_tasks(absl::GetFlag(FLAGS_seed) + 1);  // the same fresh tasks before and after
  dg::Generator train_tasks(absl::GetFlag(FLAGS_seed) + 2);
  sinusoid::Net net;
  dg::optim::Adam outer(net.parameters(), absl::GetFlag(FLAGS_outer_lr));
  const std::string dump_path = absl::GetFlag(FLAGS_dump_gradients);
  std::printf("distributed MAML over %d workers\n", dg::get_world_size());

  double before = 0;
  if (dump_path.empty()) {
    before = meta_test_loss(net, test_tasks);
    std::printf("meta-test loss before training: %.4f\n", before);
  }

  const int iterations = absl::GetFlag(FLAGS_iterations);
  examples::Progress progress("meta-train", iterations);
  for (int it = 0; it < iterations; ++it) {
    DISTGRAD_TRACE_SCOPE("meta-iteration");  // a range on rank 0's track of the timeline (docs/tracing.md)
    const Tasks tasks =
        sinusoid::sample_tasks(absl::GetFlag(FLAGS_meta_batch), absl::GetFlag(FLAGS_shots), train_tasks);
    const dg::Tensor loss = meta_gradients(net, outer, tasks, it);
    if (!dump_path.empty()) {
      sinusoid::write_gradients(net, dump_path);
      std::printf("wrote the meta-gradients of iteration 1 to %s\n", dump_path.c_str());
      return;
    }
    outer.step();
    progress.update(it + 1, loss.item<double>());
    dg::trace::counter("meta-train loss", loss.item<double>());
  }
  progress.finish();

  test_tasks.manual_seed(absl::GetFlag(FLAGS_seed) + 1);
  const double after = meta_test_loss(net, test_tasks);
  std::printf("meta-test loss after training:  %.4f (%.1fx lower)\n", after, before / after);
  if (!absl::GetFlag(FLAGS_plot).empty()) plot_fits(net, test_tasks, absl::GetFlag(FLAGS_plot));
  if (const std::string path = absl::GetFlag(FLAGS_save_parameters); !path.empty()) {
    sinusoid::write_parameters(net, path);
    std::printf("wrote the trained parameters to %s\n", path.c_str());
  }
  const double wanted = absl::GetFlag(FLAGS_min_improvement);
  if (!(after * wanted <= before)) {
    throw std::runtime_error("training lowered the meta-test loss " + std::to_string(before / after) + "-fold (" +
                             std::to_string(before) + " -> " + std::to_string(after) +
                             "), less than --min_improvement " + std::to_string(wanted));
  }
}

}  // namespace

int main(int argc, char** argv) {
  examples::parse_command_line(argc, argv, "distributed MAML on sinusoid regression; start it with distgrad-run");
  return dg::auto_init_rpc([] { dg::manual_seed(absl::GetFlag(FLAGS_seed) + dg::get_rank()); },
                           [] { dg::rank_zero_only(train)(); });
}
