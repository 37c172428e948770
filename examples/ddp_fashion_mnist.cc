// Trains the CNN (or the MLP) of fashion_mnist_train on Fashion-MNIST with data parallelism:
// every rank holds a replica wrapped in DistributedDataParallel and trains on its share of each
// global batch (--global_batch / world size samples, from a DistributedSampler), and the
// gradients are averaged over the ranks. The union of the ranks' batches is the batch of a
// single process with the same seed (ddp/distributed_sampler.h), so a run at world size 1 is
// the single-process reference run, with the same sample order.
//
//   build/launcher/distgrad-run --nproc-per-node 2 build/examples/ddp_fashion_mnist --epochs 1
//   build/launcher/distgrad-run --nproc-per-node 2 --max-restarts 2 build/examples/ddp_fashion_mnist --epochs 3
//   build/examples/ddp_fashion_mnist --model mlp --epochs 1        # world size 1, no launcher
//   build/launcher/distgrad-run --nproc-per-node 2 build/examples/ddp_fashion_mnist --precision bf16
// (--standalone makes distgrad-run take a free port for the rendezvous instead of 29500.)
//
// After each epoch the ranks evaluate the test set together (each a share of its batches),
// rank 0 prints "epoch E test accuracy XX.XX%" and saves a checkpoint (weights, Adam state,
// epoch; the format of fashion_mnist_train, written atomically), and every rank waits for it at
// a barrier. At the end rank 0 prints the machine-readable line "final_test_accuracy=0.xxxx".
// With --resume, or when the launcher restarted the group (DISTGRAD_RESTART_COUNT > 0), every
// rank loads the checkpoint if it exists and continues after its epoch ("resumed from epoch E"):
// the checkpoint must be on storage that every rank sees (a shared filesystem across nodes).
//
// --precision bf16 or fp16 runs the forward passes (training and test) under autocast: the
// convolutions and linear layers in that dtype, the loss in float32, the weights and their
// gradients (and so the all-reduce) in float32; fp16 scales the loss (examples/precision.h).
//
// Exits non-zero when the final test accuracy is below --min_accuracy (0 disables the check),
// and with 2 on a bad flag.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "distgrad.h"
#include "examples/command_line.h"
#include "examples/fashion_mnist_models.h"
#include "examples/precision.h"
#include "examples/progress.h"
#include "examples/training_checkpoint.h"

ABSL_FLAG(std::string, model, "cnn", "mlp or cnn");
ABSL_FLAG(std::string, precision, "fp32", examples::kPrecisionHelp);
ABSL_FLAG(int, epochs, 2, "epochs to train (in total, counting resumed ones)");
ABSL_FLAG(int64_t, global_batch, 64, "samples per step over all ranks (each rank takes global_batch / world size)");
ABSL_FLAG(double, lr, 1e-3, "Adam learning rate");
ABSL_FLAG(std::string, checkpoint, "",
          "checkpoint file, on storage every rank sees (default: /tmp/ddp_fashion_mnist_<model>.safetensors)");
ABSL_FLAG(bool, resume, false, "continue from --checkpoint when it exists (implied after a launcher restart)");
ABSL_FLAG(int64_t, train_limit, 0, "use only the first N training images (0: all), for quick runs");
ABSL_FLAG(int64_t, test_limit, 0, "use only the first N test images (0: all), for quick runs");
ABSL_FLAG(double, min_accuracy, 0, "exit non-zero when the final test accuracy is below this");
ABSL_FLAG(uint64_t, seed, 0, "random seed (initialisation and shuffling), the same on every rank");
ABSL_FLAG(int, fail_at_epoch, -1,
          "test hook: in the first attempt only (DISTGRAD_RESTART_COUNT unset or 0), rank 1 (rank 0 at world size 1) "
          "exits with code 3 once this many epochs are done, before the next begins (-1: never)");

namespace dg = distgrad;
namespace nn = distgrad::nn;

namespace {

constexpr int64_t kTestBatch = 1000;

// The networks of fashion_mnist_train.
std::shared_ptr<nn::Sequential> make_model(const std::string& kind) {
  if (kind == "mlp") return examples::fashion_mnist_mlp();
  if (kind == "cnn") return examples::fashion_mnist_cnn();
  std::fprintf(stderr, "ddp_fashion_mnist: --model must be mlp or cnn, found '%s'\n", kind.c_str());
  std::exit(2);
}

// The first `limit` samples (all when limit is 0 or not below the count).
dg::data::FashionMnist first(dg::data::FashionMnist data, int64_t limit) {
  if (limit <= 0 || limit >= data.labels.numel()) return data;
  return {dg::narrow(data.images, 0, 0, limit), dg::narrow(data.labels, 0, 0, limit)};
}

// Test accuracy computed by the whole group: rank r classifies test batches r, r + world, ...
// (batches of kTestBatch, cut the same way at every world size, so the count does not depend on
// it) and the ranks sum their counts. Every rank gets the result.
double test_accuracy(nn::Module& model, const dg::data::FashionMnist& test, dg::ddp::ProcessGroup& pg) {
  dg::autograd::NoGradGuard no_grad;
  const examples::MixedPrecisionScope precision(absl::GetFlag(FLAGS_precision), test.images.device());
  model.eval();
  const int64_t n = test.labels.numel();
  int64_t correct = 0;
  for (int64_t begin = pg.rank() * kTestBatch; begin < n; begin += pg.size() * kTestBatch) {
    const int64_t size = std::min(kTestBatch, n - begin);
    const dg::Tensor predicted = dg::argmax(model.forward(dg::narrow(test.images, 0, begin, size)), 1);
    correct += dg::sum(dg::eq(predicted, dg::narrow(test.labels, 0, begin, size))).item<int64_t>();
  }
  model.train();
  dg::Tensor total = dg::from_vector(std::vector<int64_t>{correct});
  pg.all_reduce(total);
  return static_cast<double>(total.to_vector<int64_t>()[0]) / static_cast<double>(n);
}

// fashion_mnist_train's format: the weights ("model.*"), the Adam state ("optimizer.*"), and as
// metadata the epochs done, the model kind and the test accuracy reached; plus the number of
// test images that accuracy was measured on, so a resumed run can check it reproduces it.
void save_checkpoint(const std::string& path, const nn::Module& model, const dg::optim::Adam& optimizer, int epoch,
                     double accuracy, int64_t test_images) {
  examples::save_training_checkpoint(path, model, optimizer,
                                     {{"epoch", std::to_string(epoch)},
                                      {"model", absl::GetFlag(FLAGS_model)},
                                      {"test_accuracy", std::to_string(accuracy)},
                                      {"test_images", std::to_string(test_images)}});
}

struct Resumed {
  int epoch = 0;  // epochs done; 0 when nothing was loaded
  std::string test_accuracy;
  std::string test_images;
};

Resumed load_checkpoint(const std::string& path, nn::Module& model, dg::optim::Adam& optimizer) {
  const std::map<std::string, std::string> metadata =
      examples::load_training_checkpoint(path, model, optimizer, "ddp_fashion_mnist", absl::GetFlag(FLAGS_model));
  const auto get = [&](const std::string& key) { return metadata.count(key) ? metadata.at(key) : std::string(); };
  return {std::stoi(metadata.at("epoch")), get("test_accuracy"), get("test_images")};
}

// The launcher's restart count (torchrun's under torchrun), 0 in the first attempt.
int restart_count() {
  for (const char* name : {"DISTGRAD_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::atoi(value);
  }
  return 0;
}

}  // namespace

// The whole run; main reports what it throws (a failed collective when a rank died, ...).
int train() {
  const std::string kind = absl::GetFlag(FLAGS_model);
  const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint).empty()
                                     ? "/tmp/ddp_fashion_mnist_" + kind + ".safetensors"
                                     : absl::GetFlag(FLAGS_checkpoint);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const int epochs = absl::GetFlag(FLAGS_epochs);

  std::shared_ptr<dg::ddp::ProcessGroup> pg = dg::ddp::init_process_group();
  const bool lead = pg->rank() == 0;
  const int64_t global_batch = absl::GetFlag(FLAGS_global_batch);
  if (global_batch <= 0 || global_batch % pg->size() != 0) {
    std::fprintf(stderr,
                 "ddp_fashion_mnist: --global_batch must be a positive multiple of the world size %d, found %lld\n",
                 pg->size(), static_cast<long long>(global_batch));
    return 2;
  }
  const int64_t rank_batch = global_batch / pg->size();
  const std::string precision = absl::GetFlag(FLAGS_precision);
  try {
    examples::autocast_dtype(precision);
  } catch (const dg::Error& error) {
    std::fprintf(stderr, "ddp_fashion_mnist: %s\n", error.what());
    return 2;
  }
  dg::optim::GradScaler scaler = examples::grad_scaler_for(precision);

  dg::manual_seed(seed);
  const dg::data::FashionMnist train =
      first(dg::data::load_fashion_mnist(dg::data::Split::kTrain), absl::GetFlag(FLAGS_train_limit));
  const dg::data::FashionMnist test =
      first(dg::data::load_fashion_mnist(dg::data::Split::kTest), absl::GetFlag(FLAGS_test_limit));

  std::shared_ptr<nn::Sequential> model = make_model(kind);
  dg::optim::Adam optimizer(model->parameters(), absl::GetFlag(FLAGS_lr));
  Resumed resumed;
  if ((absl::GetFlag(FLAGS_resume) || restart_count() > 0) && std::filesystem::exists(checkpoint)) {
    resumed = load_checkpoint(checkpoint, *model, optimizer);
  }
  // Every rank must continue from the same epoch: one that did not find the checkpoint (not on
  // shared storage) would train other steps and desynchronize the collectives.
  dg::Tensor epoch_range = dg::from_vector(std::vector<int64_t>{resumed.epoch, -resumed.epoch});
  pg->all_reduce(epoch_range, dg::ddp::ReduceOp::kMax);
  if (const std::vector<int64_t> range = epoch_range.to_vector<int64_t>(); range[0] != -range[1]) {
    std::fprintf(stderr,
                 "ddp_fashion_mnist: the ranks resumed from different epochs (%lld to %lld); %s must be on "
                 "storage every rank sees\n",
                 static_cast<long long>(-range[1]), static_cast<long long>(range[0]), checkpoint.c_str());
    return 2;
  }
  double accuracy = 0;
  if (resumed.epoch > 0) {
    accuracy = test_accuracy(*model, test, *pg);
    if (lead) {
      std::printf("resumed from epoch %d (checkpoint %s, test accuracy %.2f%%)\n", resumed.epoch, checkpoint.c_str(),
                  100 * accuracy);
    }
    if (resumed.test_images == std::to_string(test.labels.numel()) &&
        resumed.test_accuracy != std::to_string(accuracy)) {
      std::fprintf(stderr, "ddp_fashion_mnist: the checkpoint recorded test accuracy %s, the loaded model gives %s\n",
                   resumed.test_accuracy.c_str(), std::to_string(accuracy).c_str());
      return 1;
    }
  }

  // Construction checks that every rank has the same model and broadcasts rank 0's weights.
  dg::ddp::DistributedDataParallel ddp(*model, pg);
  dg::ddp::DistributedSampler sampler(train.labels.numel(), *pg, {.shuffle = true, .seed = seed});
  for (int epoch = resumed.epoch; epoch < epochs; ++epoch) {
    if (epoch == absl::GetFlag(FLAGS_fail_at_epoch) && restart_count() == 0 &&
        pg->rank() == std::min(1, pg->size() - 1)) {
      std::fprintf(stderr, "ddp_fashion_mnist: rank %d exits with code 3 before epoch %d (--fail_at_epoch %d)\n",
                   pg->rank(), epoch + 1, epoch);
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(3);
    }
    sampler.set_epoch(epoch);
    const std::vector<int64_t> indices = sampler.indices();
    const dg::data::DataLoader loader(train.images, train.labels, indices, {.batch_size = rank_batch});
    std::unique_ptr<examples::Progress> progress;
    if (lead) progress = std::make_unique<examples::Progress>("epoch " + std::to_string(epoch + 1), loader.size());
    int64_t step = 0;
    for (const dg::data::Batch& batch : loader) {
      optimizer.zero_grad();
      dg::Tensor loss;
      {
        const examples::MixedPrecisionScope autocast(precision, batch.inputs.device());
        loss = nn::cross_entropy(ddp.forward(batch.inputs), batch.targets);
      }
      scaler.scale(loss).backward();  // returns with the gradients averaged over the ranks
      scaler.step(optimizer);         // optimizer.step(), unless fp16 gradients overflowed
      scaler.update();
      ++step;
      if (progress) progress->update(step, loss.item<double>());  // rank 0's share of the batch
    }
    if (progress) progress->finish();
    accuracy = test_accuracy(*model, test, *pg);
    if (lead) {
      save_checkpoint(checkpoint, *model, optimizer, epoch + 1, accuracy, test.labels.numel());
      std::printf("epoch %d test accuracy %.2f%% (checkpoint %s)\n", epoch + 1, 100 * accuracy, checkpoint.c_str());
      std::fflush(stdout);
    }
    pg->barrier();  // no rank starts the next epoch (or fails) before the checkpoint is written
  }
  if (resumed.epoch == 0 && epochs <= 0) accuracy = test_accuracy(*model, test, *pg);
  if (lead) std::printf("final_test_accuracy=%.4f\n", accuracy);
  dg::ddp::destroy_process_group();
  return accuracy >= absl::GetFlag(FLAGS_min_accuracy) ? 0 : 1;
}

int main(int argc, char** argv) {
  examples::parse_command_line(argc, argv, "Trains an MLP or a CNN on Fashion-MNIST with DistributedDataParallel");
  try {
    return train();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ddp_fashion_mnist: error: %s\n", error.what());
    return 1;
  }
}
