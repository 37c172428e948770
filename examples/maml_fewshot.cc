// Distributed few-shot MAML on Fashion-MNIST: the workload of TorchOpt's distributed benchmark
// (second-order MAML, Omniglot 5-way 5-shot) on the images Debian ships (examples/fewshot.h).
//
// Rank 0 drives: each meta-iteration it draws --meta_batch tasks from the meta-train classes
// and calls adapt_and_evaluate once per task through `parallelize`, round-robin over every rank
// (itself included). Each call adapts a copy of the weights to its task's support set with
// --inner_steps differentiable SGD steps and returns the adapted network's query loss and
// accuracy, which mean_reducer averages field by field. The mean loss is differentiated back
// through the workers (distributed autograd) to the initial weights, which Adam updates.
//
// Classes: meta-training draws from the training images, the meta-test from the test images,
// which the network never sees, of all 10 classes (5 of them per task, in a random order: 252
// class sets, 120 orders each). Fashion-MNIST's 10 classes leave only 5 to each side of a
// disjoint split (--held_out_classes 0,2,4,6,8 keeps those out of meta-training and meta-tests
// on them alone); with 5 classes to meta-train on, MAML learns those classes rather than how to
// adapt, and the held-out accuracy stayed at the untrained network's (docs/examples.md).
// Since each task orders its classes at random, a network that did not adapt scores chance.
//
// Every --iterations_per_epoch meta-iterations make an epoch: rank 0 then reports the epoch's
// mean meta-train query accuracy and the accuracy on --eval_tasks fixed held-out tasks, saves a
// checkpoint (weights, Adam state, history) and redraws the accuracy plot. --resume continues
// from the checkpoint; an epoch's tasks depend only on --seed and its number, so a resumed run
// repeats the uninterrupted one.
//
//   build/launcher/distgrad-run --standalone --nproc-per-node 4 build/examples/maml_fewshot [--epochs 10]
//   build/examples/maml_fewshot --local                    (one process, no RPC: the reference)
//
// With --device cuda, the driver keeps the weights on the GPU of its local rank and every
// worker computes on its own local-rank GPU: the RPC device maps send the driver's CUDA tensors
// there. With --dump_gradients PATH, rank 0 runs --dump_iterations meta-iterations, writes their
// meta-gradients to PATH (safetensors, "iteration<i>/<parameter>") and stops: the same seed
// gives the same gradients at every world size and with --local (tests/examples checks it).
// With --local_loader, each worker loads its own shard of the training images as a remote object
// (fewshot::TaskShard, rpc/rref.h) and the driver sends each call only a task's seed with the
// weights: the workers draw the tasks (the meta-test's still come from the driver).
// --precision bf16 or fp16 runs every forward pass of the workers (the inner steps and the
// query loss) under autocast: convolutions and the linear layer in that dtype, batch norm and
// the losses in float32, the weights in float32; fp16 scales the outer loss (examples/precision.h).
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "examples/command_line.h"
#include "examples/fewshot_program.h"
#include "examples/progress.h"
#include "examples/svg_plot.h"
#include "examples/training_checkpoint.h"

ABSL_FLAG(int, epochs, 10, "epochs in total, counting resumed ones");
ABSL_FLAG(int, iterations_per_epoch, 50, "meta-iterations per epoch");
ABSL_FLAG(int, eval_tasks, 100, "held-out tasks of each meta-test");
ABSL_FLAG(std::vector<std::string>, held_out_classes, {},
          "classes kept out of meta-training, the meta-test's only ones (default: none, every class on both sides)");
ABSL_FLAG(std::string, checkpoint, "maml_fewshot.safetensors", "the checkpoint written after every epoch");
ABSL_FLAG(bool, resume, false, "continue from --checkpoint");
ABSL_FLAG(std::string, plot, "maml_fewshot.svg", "where rank 0 draws the accuracies per epoch (empty: no plot)");
ABSL_FLAG(std::string, dump_gradients, "", "write the first --dump_iterations meta-gradients here and stop");
ABSL_FLAG(int, dump_iterations, 2, "meta-iterations whose gradients --dump_gradients writes");
ABSL_FLAG(double, min_test_accuracy, 0, "exit non-zero when the last meta-test accuracy is below this");

namespace dg = distgrad;
using fewshot::Episodes;
using fewshot::InnerLoop;

namespace {

// The classes of --held_out_classes (meta-test) and the others (meta-training); all 10 on both
// sides when none is held out.
std::pair<std::vector<int64_t>, std::vector<int64_t>> class_split() {
  std::vector<int64_t> held_out, others;
  for (const std::string& text : absl::GetFlag(FLAGS_held_out_classes)) {
    size_t end = 0;
    const int64_t value = std::stoll(text, &end);
    DISTGRAD_CHECK(end == text.size() && value >= 0 && value < 10,
                   "--held_out_classes expects class numbers 0..9, found '", text, "'");
    held_out.push_back(value);
  }
  for (int64_t c = 0; c < 10; ++c) {
    if (std::find(held_out.begin(), held_out.end(), c) == held_out.end()) others.push_back(c);
  }
  if (held_out.empty()) held_out = others;
  return {others, held_out};
}

std::string class_names(const std::vector<int64_t>& classes) {
  std::string names;
  for (int64_t c : classes) names += (names.empty() ? "" : ", ") + std::string(dg::data::kFashionMnistClassNames[c]);
  return names;
}

// The accuracies after each epoch, kept in the checkpoint's metadata as comma-separated lists.
struct History {
  std::vector<double> train_accuracy, test_accuracy;
};

std::string join(const std::vector<double>& values) {
  std::ostringstream out;
  out.precision(17);
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  return out.str();
}

std::vector<double> split(const std::string& text) {
  std::vector<double> values;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) values.push_back(std::stod(item));
  return values;
}

void plot_history(const History& history, const std::string& path) {
  std::vector<double> epochs;
  for (size_t i = 1; i <= history.test_accuracy.size(); ++i) epochs.push_back(static_cast<double>(i));
  examples::SvgPlot plot("Few-shot MAML on Fashion-MNIST: 5-way 5-shot query accuracy", "epoch", "accuracy");
  plot.add("meta-train", epochs, history.train_accuracy, "#1f77b4");
  plot.add("meta-test", epochs, history.test_accuracy, "#d62728");
  plot.add("chance", epochs, std::vector<double>(epochs.size(), 1.0 / static_cast<double>(absl::GetFlag(FLAGS_ways))),
           "#7f7f7f", /*dashed=*/true);
  plot.write(path);
}

void add_gradients(const dg::nn::Module& net, int iteration, dg::NamedTensors& gradients) {
  for (const auto& [name, parameter] : net.named_parameters()) {
    gradients.emplace_back("iteration" + std::to_string(iteration) + "/" + name,
                           dg::to(parameter.grad(), dg::Device::cpu()));
  }
}

void check_positive(const char* flag, int64_t value) {
  DISTGRAD_CHECK(value >= 1, "expected --", flag, " >= 1, found ", value);
}

void train() {
  check_positive("meta_batch", absl::GetFlag(FLAGS_meta_batch));
  dg::optim::GradScaler scaler = examples::grad_scaler_for(absl::GetFlag(FLAGS_precision));  // checks the flag
  check_positive("iterations_per_epoch", absl::GetFlag(FLAGS_iterations_per_epoch));
  check_positive("eval_tasks", absl::GetFlag(FLAGS_eval_tasks));
  check_positive("dump_iterations", absl::GetFlag(FLAGS_dump_iterations));
  const fewshot::EpisodeShape shape = fewshot::episode_shape_flags();
  const fewshot::InnerLoop inner = fewshot::inner_loop_flags();
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const auto [train_classes, test_classes] = class_split();
  const bool local_loader = absl::GetFlag(FLAGS_local_loader);
  DISTGRAD_CHECK(!(local_loader && absl::GetFlag(FLAGS_local)),
                 "--local_loader gives each worker its shard; it needs workers, not --local");
  // The training tasks: drawn here, or by the workers from their shards (--local_loader).
  std::optional<fewshot::TaskSampler> train_tasks;
  std::vector<dg::rpc::RRef<fewshot::TaskShard>> shards;
  if (local_loader) {
    shards = fewshot::task_shards(train_classes, shape);
  } else {
    train_tasks.emplace(dg::data::load_fashion_mnist(dg::data::Split::kTrain), train_classes, shape);
  }
  const fewshot::TaskSampler test_tasks(dg::data::load_fashion_mnist(dg::data::Split::kTest), test_classes, shape);
  const dg::Device device = fewshot::compute_device();

  dg::manual_seed(seed);
  const std::shared_ptr<dg::nn::Sequential> net = fewshot::conv_net_for(device);
  dg::optim::Adam outer(net->parameters(), absl::GetFlag(FLAGS_outer_lr));
  std::printf(
      "few-shot MAML, %lld-way %lld-shot, %s; meta-train on %s (training images%s); meta-test on %s (test images)\n",
      static_cast<long long>(shape.ways), static_cast<long long>(shape.shots),
      absl::GetFlag(FLAGS_local) ? "one process"
                                 : ("over " + std::to_string(dg::get_world_size()) + " workers").c_str(),
      class_names(train_classes).c_str(), local_loader ? ", a shard on each worker" : "",
      class_names(test_classes).c_str());

  // One meta-iteration on tasks drawn with `random`: returns the mean query loss and accuracy.
  auto meta_iteration = [&](std::mt19937_64& random) {
    std::optional<dg::autograd::Context> context;  // distributed autograd, unless --local
    if (!absl::GetFlag(FLAGS_local)) context.emplace();
    const dg::nn::ParamDict params = dg::nn::module_clone(*net, dg::nn::CloneBy::kClone);
    std::tuple<dg::Tensor, double> result;
    if (local_loader) {
      std::vector<uint64_t> seeds(static_cast<size_t>(absl::GetFlag(FLAGS_meta_batch)));
      for (uint64_t& task_seed : seeds) task_seed = random();
      result = fewshot::meta_loss_and_accuracy_on_shards(shards, params, seeds, inner);
    } else {
      const Episodes tasks = fewshot::to_device(train_tasks->sample(absl::GetFlag(FLAGS_meta_batch), random), device);
      result = fewshot::meta_loss_and_accuracy(params, tasks, inner);
    }
    const auto& [loss, accuracy] = result;
    outer.zero_grad();
    const dg::Tensor scaled = scaler.scale(loss);  // the loss itself but with --precision fp16
    if (context) {
      dg::autograd::backward(*context, {scaled});
    } else {
      scaled.backward();
    }
    return std::pair{loss.item<double>(), accuracy};
  };

  const std::string dump_path = absl::GetFlag(FLAGS_dump_gradients);
  if (!dump_path.empty()) {
    std::mt19937_64 random(seed);
    dg::NamedTensors gradients;
    for (int iteration = 1; iteration <= absl::GetFlag(FLAGS_dump_iterations); ++iteration) {
      meta_iteration(random);
      scaler.unscale_(outer);  // the true gradients, with --precision fp16 too
      add_gradients(*net, iteration, gradients);
      scaler.step(outer);
      scaler.update();
    }
    dg::save_safetensors(dump_path, gradients);
    std::printf("wrote the meta-gradients of %d iterations to %s\n", absl::GetFlag(FLAGS_dump_iterations),
                dump_path.c_str());
    return;
  }

  // The meta-test: the same held-out tasks every epoch, adapted from detached weights in
  // batches of --meta_batch (each task's inner-loop graph lives until its call returns).
  std::vector<Episodes> held_out;
  {
    std::mt19937_64 random(seed + 1);
    for (int64_t drawn = 0; drawn < absl::GetFlag(FLAGS_eval_tasks); drawn += absl::GetFlag(FLAGS_meta_batch)) {
      const int64_t count = std::min<int64_t>(absl::GetFlag(FLAGS_meta_batch), absl::GetFlag(FLAGS_eval_tasks) - drawn);
      held_out.push_back(fewshot::to_device(test_tasks.sample(count, random), device));
    }
  }
  auto meta_test_accuracy = [&] {
    const dg::nn::ParamDict params = dg::nn::module_clone(*net, dg::nn::CloneBy::kDeepcopy);
    double correct = 0;
    for (const Episodes& tasks : held_out) {
      correct += std::get<1>(fewshot::meta_loss_and_accuracy(params, tasks, inner)) *
                 static_cast<double>(tasks.x_support.size(0));
    }
    return correct / static_cast<double>(absl::GetFlag(FLAGS_eval_tasks));
  };

  const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint);
  History history;
  int first_epoch = 0;
  if (absl::GetFlag(FLAGS_resume)) {
    const std::map<std::string, std::string> metadata =
        examples::load_training_checkpoint(checkpoint, *net, outer, "maml_fewshot", "maml_fewshot");
    first_epoch = std::stoi(metadata.at("epoch"));
    history = {split(metadata.at("train_accuracy")), split(metadata.at("test_accuracy"))};
    std::printf("resumed from %s after epoch %d\n", checkpoint.c_str(), first_epoch);
  } else {
    std::printf("meta-test accuracy before training: %.2f%% (chance: %.0f%%)\n", 100 * meta_test_accuracy(),
                100.0 / static_cast<double>(shape.ways));
  }

  const int epochs = absl::GetFlag(FLAGS_epochs), iterations = absl::GetFlag(FLAGS_iterations_per_epoch);
  for (int epoch = first_epoch; epoch < epochs; ++epoch) {
    std::seed_seq epoch_seed{seed, static_cast<uint64_t>(epoch)};
    std::mt19937_64 random(epoch_seed);
    examples::Progress progress("epoch " + std::to_string(epoch + 1), iterations);
    double accuracy_sum = 0;
    for (int iteration = 0; iteration < iterations; ++iteration) {
      const auto [loss, accuracy] = meta_iteration(random);
      scaler.step(outer);  // outer.step(), unless fp16 gradients overflowed
      scaler.update();
      accuracy_sum += accuracy;
      progress.update(iteration + 1, loss);
    }
    progress.finish();
    history.train_accuracy.push_back(accuracy_sum / iterations);
    history.test_accuracy.push_back(meta_test_accuracy());
    examples::save_training_checkpoint(checkpoint, *net, outer,
                                       {{"epoch", std::to_string(epoch + 1)},
                                        {"model", "maml_fewshot"},
                                        {"train_accuracy", join(history.train_accuracy)},
                                        {"test_accuracy", join(history.test_accuracy)}});
    std::printf("epoch %d: meta-train accuracy %.2f%%, meta-test accuracy %.2f%% (checkpoint %s)\n", epoch + 1,
                100 * history.train_accuracy.back(), 100 * history.test_accuracy.back(), checkpoint.c_str());
    if (!absl::GetFlag(FLAGS_plot).empty()) plot_history(history, absl::GetFlag(FLAGS_plot));
  }
  const double last = history.test_accuracy.empty() ? meta_test_accuracy() : history.test_accuracy.back();
  if (last < absl::GetFlag(FLAGS_min_test_accuracy)) {
    throw std::runtime_error("maml_fewshot: the meta-test accuracy " + std::to_string(last) +
                             " is below --min_test_accuracy " + std::to_string(absl::GetFlag(FLAGS_min_test_accuracy)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  examples::parse_command_line(argc, argv, "distributed few-shot MAML on Fashion-MNIST; start it with distgrad-run");
  return fewshot::run_program("maml_fewshot", train);
}
