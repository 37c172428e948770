// Trains an MLP or a small CNN on Fashion-MNIST (Debian's dataset-fashion-mnist package) and
// reports test accuracy after every epoch. A checkpoint (weights, Adam state, epoch) is saved
// after each epoch; --resume continues from it.
//
//   build/examples/fashion_mnist_train --model mlp --epochs 2
//   build/examples/fashion_mnist_train --model cnn --epochs 2 --checkpoint /tmp/cnn.safetensors
//   build/examples/fashion_mnist_train --model cnn --epochs 3 --checkpoint /tmp/cnn.safetensors --resume
//
// Exits non-zero when the final test accuracy is below --min_accuracy (0 disables the check).
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/random.h"
#include "data/data_loader.h"
#include "data/fashion_mnist.h"
#include "examples/command_line.h"
#include "examples/fashion_mnist_models.h"
#include "examples/progress.h"
#include "examples/training_checkpoint.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "optim/adam.h"

ABSL_FLAG(std::string, model, "mlp", "mlp or cnn");
ABSL_FLAG(int, epochs, 2, "epochs to train (in total, counting resumed ones)");
ABSL_FLAG(int, batch_size, 64, "training batch size");
ABSL_FLAG(double, lr, 1e-3, "Adam learning rate");
ABSL_FLAG(std::string, checkpoint, "", "checkpoint file (default: /tmp/fashion_mnist_<model>.safetensors)");
ABSL_FLAG(bool, resume, false, "continue from --checkpoint");
ABSL_FLAG(int64_t, train_limit, 0, "use only the first N training images (0: all), for quick runs");
ABSL_FLAG(double, min_accuracy, 0, "exit non-zero when the final test accuracy is below this");
ABSL_FLAG(uint64_t, seed, 0, "random seed (initialisation and shuffling)");

namespace dg = distgrad;
namespace nn = distgrad::nn;

namespace {

std::shared_ptr<nn::Sequential> make_model(const std::string& kind) {
  if (kind == "mlp") return examples::fashion_mnist_mlp();
  if (kind == "cnn") return examples::fashion_mnist_cnn();
  std::fprintf(stderr, "fashion_mnist_train: --model must be mlp or cnn, found '%s'\n", kind.c_str());
  std::exit(2);
}

double test_accuracy(nn::Module& model, const dg::data::FashionMnist& test) {
  dg::autograd::NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  for (const dg::data::Batch& batch : dg::data::DataLoader(test.images, test.labels, {.batch_size = 1000})) {
    const dg::Tensor predicted = dg::argmax(model.forward(batch.inputs), 1);
    correct += dg::sum(dg::eq(predicted, batch.targets)).item<int64_t>();
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(test.labels.numel());
}

// One file holds the weights ("model.*"), the Adam state ("optimizer.*"), the epoch count and
// the test accuracy reached, which a resumed run checks it reproduces.
void save_checkpoint(const std::string& path, const nn::Module& model, const dg::optim::Adam& optimizer, int epoch,
                     double accuracy) {
  examples::save_training_checkpoint(path, model, optimizer,
                                     {{"epoch", std::to_string(epoch)},
                                      {"model", absl::GetFlag(FLAGS_model)},
                                      {"test_accuracy", std::to_string(accuracy)}});
}

struct Resumed {
  int epoch;
  double test_accuracy;
};

Resumed load_checkpoint(const std::string& path, nn::Module& model, dg::optim::Adam& optimizer) {
  const std::map<std::string, std::string> metadata =
      examples::load_training_checkpoint(path, model, optimizer, "fashion_mnist_train", absl::GetFlag(FLAGS_model));
  return {std::stoi(metadata.at("epoch")), std::stod(metadata.at("test_accuracy"))};
}

// Trains as the flags say; returns the exit status (1 below --min_accuracy).
int train() {
  const std::string kind = absl::GetFlag(FLAGS_model);
  const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint).empty() ? "/tmp/fashion_mnist_" + kind + ".safetensors"
                                                                         : absl::GetFlag(FLAGS_checkpoint);
  dg::manual_seed(absl::GetFlag(FLAGS_seed));

  dg::data::FashionMnist train = dg::data::load_fashion_mnist(dg::data::Split::kTrain);
  const dg::data::FashionMnist test = dg::data::load_fashion_mnist(dg::data::Split::kTest);
  if (const int64_t limit = absl::GetFlag(FLAGS_train_limit); limit > 0 && limit < train.labels.numel()) {
    train = {dg::narrow(train.images, 0, 0, limit), dg::narrow(train.labels, 0, 0, limit)};
  }

  std::shared_ptr<nn::Sequential> model = make_model(kind);
  dg::optim::Adam optimizer(model->parameters(), absl::GetFlag(FLAGS_lr));
  int first_epoch = 0;
  if (absl::GetFlag(FLAGS_resume)) {
    const Resumed resumed = load_checkpoint(checkpoint, *model, optimizer);
    first_epoch = resumed.epoch;
    const double accuracy = test_accuracy(*model, test);
    std::printf("resumed from %s after epoch %d (test accuracy %.2f%%)\n", checkpoint.c_str(), first_epoch,
                100 * accuracy);
    if (std::to_string(accuracy) != std::to_string(resumed.test_accuracy)) {
      std::fprintf(stderr, "fashion_mnist_train: the checkpoint recorded test accuracy %s, the loaded model gives %s\n",
                   std::to_string(resumed.test_accuracy).c_str(), std::to_string(accuracy).c_str());
      return 1;
    }
  }
  dg::data::DataLoader loader(
      train.images, train.labels,
      {.batch_size = absl::GetFlag(FLAGS_batch_size), .shuffle = true, .seed = absl::GetFlag(FLAGS_seed)});
  double accuracy = 0;
  for (int epoch = first_epoch; epoch < absl::GetFlag(FLAGS_epochs); ++epoch) {
    loader.set_epoch(epoch);
    examples::Progress progress("epoch " + std::to_string(epoch + 1), loader.size());
    int64_t step = 0;
    for (const dg::data::Batch& batch : loader) {
      optimizer.zero_grad();
      const dg::Tensor loss = nn::cross_entropy(model->forward(batch.inputs), batch.targets);
      loss.backward();
      optimizer.step();
      progress.update(++step, loss.item<double>());
    }
    progress.finish();
    accuracy = test_accuracy(*model, test);
    save_checkpoint(checkpoint, *model, optimizer, epoch + 1, accuracy);
    std::printf("epoch %d: test accuracy %.2f%% (checkpoint %s)\n", epoch + 1, 100 * accuracy, checkpoint.c_str());
  }
  if (first_epoch >= absl::GetFlag(FLAGS_epochs)) accuracy = test_accuracy(*model, test);
  return accuracy >= absl::GetFlag(FLAGS_min_accuracy) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  examples::parse_command_line(argc, argv, "Trains an MLP or a CNN on Fashion-MNIST");
  try {
    return train();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fashion_mnist_train: error: %s\n", error.what());
    return 1;
  }
}
