// Distributed MAML through a small Transformer: few-shot sequence regression on generated tasks.
//
// Each task is a causal filter y_t = a x_t + b x_{t-1} + c with its own a, b, c, seen through K
// support and K query sequences; the model is one causal TransformerEncoderLayer between an
// embedding (with learned positions) and a linear head (examples/sequence_tasks.h). MAML adapts
// a copy of its weights to each task's support set with --inner_steps differentiable SGD steps
// and differentiates the query loss back through every step (second order, through attention,
// layer norm and dropout) to the initial weights.
//
// Rank 0 drives: each meta-iteration one call per task through `parallelize`, round-robin over
// the ranks (itself included), the mean of the query losses differentiated across the workers
// (distributed autograd), Adam on the initial weights. It prints the meta-test loss (on fresh
// tasks, dropout off) before and after, and writes a plot of adapted predictions.
//
//   build/launcher/distgrad-run --standalone --nproc-per-node 2 build/examples/maml_transformer
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "distgrad.h"
#include "examples/command_line.h"
#include "examples/progress.h"
#include "examples/sequence_tasks.h"
#include "examples/svg_plot.h"

ABSL_FLAG(int, iterations, 600, "meta-training iterations");
ABSL_FLAG(int, meta_batch, 8, "tasks per meta-iteration");
ABSL_FLAG(int, shots, 10, "support (and query) sequences per task");
ABSL_FLAG(int, length, 8, "time steps per sequence");
ABSL_FLAG(int, inner_steps, 2, "SGD steps on each task's support set");
ABSL_FLAG(double, inner_lr, 0.1, "learning rate of the inner SGD steps");
ABSL_FLAG(double, outer_lr, 2e-3, "learning rate of the outer Adam optimizer");
ABSL_FLAG(int, eval_tasks, 64, "fresh tasks for the meta-test loss");
ABSL_FLAG(uint64_t, seed, 0, "random seed");
ABSL_FLAG(std::string, plot, "maml_transformer.svg",
          "where rank 0 writes the plot of adapted predictions (empty: none)");
ABSL_FLAG(double, min_improvement, 0,
          "exit non-zero unless training lowers the meta-test loss at least this many times (0: never)");

namespace dg = distgrad;
using sequence_tasks::adapt;
using sequence_tasks::SequenceNet;
using sequence_tasks::Tasks;

namespace {

// The architecture functional_call runs on this process, in training mode (dropout on) or
// evaluation mode: one module each, shared by the threads that serve calls.
SequenceNet& shared_net(bool training) {
  static SequenceNet train_net(absl::GetFlag(FLAGS_length));
  static SequenceNet eval_net(absl::GetFlag(FLAGS_length), /*training=*/false);
  return training ? train_net : eval_net;
}

}  // namespace

// Runs on a worker: the query loss of one task ([K, L, 1] tensors) after adapting `params`.
dg::Tensor adapt_and_eval(dg::nn::ParamDict params, sequence_tasks::Tasks task, int inner_steps, double inner_lr,
                          bool training) {
  SequenceNet& net = shared_net(training);
  params = adapt(net, std::move(params), task, inner_steps, inner_lr);
  return dg::nn::mse_loss(dg::nn::functional_call(net, params, task.x_query), task.y_query);
}
DISTGRAD_REMOTE(adapt_and_eval);

// Runs on a worker: the adapted model's predictions on the task's query sequences, for the plot.
dg::Tensor adapted_predictions(dg::nn::ParamDict params, sequence_tasks::Tasks task, int inner_steps, double inner_lr) {
  SequenceNet& net = shared_net(false);
  params = adapt(net, std::move(params), task, inner_steps, inner_lr);
  dg::autograd::NoGradGuard no_grad;
  return dg::nn::functional_call(net, params, task.x_query);
}
DISTGRAD_REMOTE(adapted_predictions);

namespace {

const auto per_task = dg::dim_partitioner(0, {.exclusive = true, .keepdim = false});
const auto meta_loss = dg::parallelize(adapt_and_eval, per_task, dg::mean_reducer);

Tasks fresh_tasks(int64_t count, dg::Generator& generator) {
  return sequence_tasks::sample_tasks(count, absl::GetFlag(FLAGS_shots), absl::GetFlag(FLAGS_length), generator);
}

double meta_test_loss(const SequenceNet& net, uint64_t seed) {
  dg::Generator generator(seed);
  return meta_loss(dg::nn::module_clone(net, dg::nn::CloneBy::kDeepcopy),
                   fresh_tasks(absl::GetFlag(FLAGS_eval_tasks), generator), absl::GetFlag(FLAGS_inner_steps),
                   absl::GetFlag(FLAGS_inner_lr), false)
      .item<double>();
}

std::vector<double> to_vector(const dg::Tensor& tensor) {
  const dg::Tensor flat = dg::to(dg::reshape(tensor.detach(), {-1}), dg::kFloat64);
  std::vector<double> values(static_cast<size_t>(flat.numel()));
  for (int64_t i = 0; i < flat.numel(); ++i) values[static_cast<size_t>(i)] = flat.at<double>({i});
  return values;
}

// Three fresh tasks: the first query sequence's targets and the adapted model's predictions.
void plot_predictions(const SequenceNet& net, uint64_t seed, const std::string& path) {
  constexpr int64_t kTasks = 3;
  dg::Generator generator(seed);
  const Tasks tasks = fresh_tasks(kTasks, generator);
  const std::vector<dg::Tensor> predictions =
      dg::remote_sync_call(adapted_predictions,
                           dg::args(dg::nn::module_clone(net, dg::nn::CloneBy::kDeepcopy), tasks,
                                    absl::GetFlag(FLAGS_inner_steps), absl::GetFlag(FLAGS_inner_lr)),
                           per_task);
  examples::SvgPlot plot("MAML through a Transformer: " + std::to_string(absl::GetFlag(FLAGS_inner_steps)) +
                             " steps on " + std::to_string(absl::GetFlag(FLAGS_shots)) + " sequences",
                         "time step", "y");
  const char* colors[kTasks] = {"#1f77b4", "#d62728", "#2ca02c"};
  std::vector<double> steps;
  for (int t = 0; t < absl::GetFlag(FLAGS_length); ++t) steps.push_back(t + 1);
  for (int64_t task = 0; task < kTasks; ++task) {
    const std::string label = "task " + std::to_string(task + 1);
    plot.add(label + " target", steps, to_vector(dg::select(dg::select(tasks.y_query, 0, task), 0, 0)), colors[task],
             /*dashed=*/true);
    plot.add(label + " adapted", steps, to_vector(dg::select(predictions[static_cast<size_t>(task)], 0, 0)),
             colors[task]);
  }
  plot.write(path);
  std::printf("wrote %s\n", path.c_str());
}

void train() {
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  dg::manual_seed(seed);
  dg::Generator train_tasks(seed + 2);
  SequenceNet net(absl::GetFlag(FLAGS_length));
  dg::optim::Adam outer(net.parameters(), absl::GetFlag(FLAGS_outer_lr));
  std::printf("distributed MAML through a Transformer over %d workers\n", dg::get_world_size());
  const double before = meta_test_loss(net, seed + 1);
  std::printf("meta-test loss before training: %.4f\n", before);

  const int iterations = absl::GetFlag(FLAGS_iterations);
  examples::Progress progress("meta-train", iterations);
  for (int it = 0; it < iterations; ++it) {
    dg::autograd::Context context;
    const dg::Tensor loss = meta_loss(dg::nn::module_clone(net, dg::nn::CloneBy::kClone),
                                      fresh_tasks(absl::GetFlag(FLAGS_meta_batch), train_tasks),
                                      absl::GetFlag(FLAGS_inner_steps), absl::GetFlag(FLAGS_inner_lr), true);
    outer.zero_grad();
    dg::autograd::backward(context, {loss});
    outer.step();
    progress.update(it + 1, loss.item<double>());
  }
  progress.finish();

  const double after = meta_test_loss(net, seed + 1);
  std::printf("meta-test loss after training:  %.4f (%.1fx lower)\n", after, before / after);
  if (!absl::GetFlag(FLAGS_plot).empty()) plot_predictions(net, seed + 1, absl::GetFlag(FLAGS_plot));
  const double wanted = absl::GetFlag(FLAGS_min_improvement);
  if (!(after * wanted <= before)) {
    throw std::runtime_error("training lowered the meta-test loss " + std::to_string(before / after) + "-fold (" +
                             std::to_string(before) + " -> " + std::to_string(after) +
                             "), less than --min_improvement " + std::to_string(wanted));
  }
}

}  // namespace

int main(int argc, char** argv) {
  examples::parse_command_line(argc, argv,
                               "distributed MAML through a small Transformer on few-shot sequence regression; start "
                               "it with distgrad-run");
  return dg::auto_init_rpc([] { dg::manual_seed(absl::GetFlag(FLAGS_seed) + dg::get_rank()); },
                           [] { dg::rank_zero_only(train)(); });
}
