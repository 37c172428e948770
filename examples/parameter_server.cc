// A parameter server on Fashion-MNIST: the weights of an MLP (784 -> --hidden -> 10) live on
// --servers workers, remote objects that hand out RRefs to them; trainers pull the weights,
// compute gradients on their own shard of the training images and push them back through
// distributed autograd; each trainer's DistributedOptimizer has every server step its weights.
//
// Ranks 1..--servers are the servers: the first layer lives on worker1, the second on worker2
// (both on worker1 with --servers 1). Every other rank trains, rank 0 included, each --steps
// steps of --batch images of its shard (the rows i with i % trainers == its index), at once and
// without waiting for each other (asynchronous SGD). A step pulls each server's weights in one
// call (inside a distributed autograd context, so the copies record where they came from),
// computes the loss locally, runs the backward pass (which accumulates each server's
// gradients in the context, there), and steps: each server updates its weights in place with
// the gradients of that context. Pulling the weights, rather than running the layers on the
// servers, keeps a trainer's backward pass off the weights that other trainers' steps change.
// Rank 0 then pulls the trained weights and reports the test accuracy.
//
//   build/launcher/distgrad-run --standalone --nproc-per-node 4 build/examples/parameter_server
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "distgrad.h"
#include "examples/command_line.h"

ABSL_FLAG(int, servers, 2, "workers that hold the weights (1 or 2)");
ABSL_FLAG(int, steps, 300, "steps of each trainer");
ABSL_FLAG(int64_t, batch, 64, "images per step");
ABSL_FLAG(int64_t, hidden, 128, "hidden units");
ABSL_FLAG(double, lr, 0.1, "SGD's learning rate");
ABSL_FLAG(uint64_t, seed, 0, "random seed");
ABSL_FLAG(double, min_test_accuracy, 0, "exit non-zero when the test accuracy is below this");

namespace dg = distgrad;
using dg::Tensor;
using dg::rpc::RRef;

namespace examples {

// Some layers' weights and biases (PyTorch's Linear initialisation), and RRefs to them.
class ParameterServer {
 public:
  // Linear layers of the sizes given in turn (784, 128: one layer of 784 inputs, 128 outputs).
  ParameterServer(std::vector<int64_t> sizes, uint64_t seed) {
    dg::manual_seed(seed);
    for (size_t layer = 0; layer + 1 < sizes.size(); ++layer) {
      const dg::nn::Linear linear(sizes[layer], sizes[layer + 1]);
      for (const Tensor& parameter : linear.parameters()) {
        parameters_.push_back(parameter);
        rrefs_.emplace_back(parameter);
      }
    }
  }
  // The weights themselves: inside a distributed autograd context the copies that reach the
  // caller carry their gradients back here.
  std::vector<Tensor> pull() const { return parameters_; }
  // RRefs to them, for a DistributedOptimizer.
  std::vector<RRef<Tensor>> parameter_rrefs() const { return rrefs_; }

 private:
  std::vector<Tensor> parameters_;
  std::vector<RRef<Tensor>> rrefs_;
};
DISTGRAD_REMOTE_CLASS(ParameterServer, std::vector<int64_t>, uint64_t);
DISTGRAD_REMOTE_METHOD(ParameterServer, pull);
DISTGRAD_REMOTE_METHOD(ParameterServer, parameter_rrefs);

// The MLP on pulled weights [w1, b1, w2, b2]: logits of images [N, 1, 28, 28].
Tensor mlp(const std::vector<Tensor>& weights, const Tensor& images) {
  const Tensor x = dg::reshape(images, {images.size(0), -1});
  const Tensor hidden = dg::relu(dg::nn::linear(x, weights[0], weights[1]));
  return dg::nn::linear(hidden, weights[2], weights[3]);
}

// Every server's weights, in the model's order: one call per server.
std::vector<Tensor> pull_all(const std::vector<RRef<ParameterServer>>& servers) {
  std::vector<dg::rpc::Future<std::vector<Tensor>>> pulls;
  for (const RRef<ParameterServer>& server : servers) pulls.push_back(server.rpc_async(&ParameterServer::pull));
  std::vector<Tensor> weights;
  for (const std::vector<Tensor>& pulled : dg::rpc::wait_all(pulls)) {
    weights.insert(weights.end(), pulled.begin(), pulled.end());
  }
  return weights;
}

struct TrainerOptions {
  int64_t index = 0, trainers = 1;
  int steps = 0;
  int64_t batch = 0;
  double lr = 0;
  uint64_t seed = 0;
};
DISTGRAD_CODEC(TrainerOptions, index, trainers, steps, batch, lr, seed);

// One trainer: `options.steps` steps on its shard; returns its mean loss over the last 50.
double train(std::vector<RRef<ParameterServer>> servers, TrainerOptions options) {
  const dg::data::FashionMnist data = dg::data::load_fashion_mnist(dg::data::Split::kTrain);
  const Tensor rows = dg::arange(options.index, data.labels.size(0), options.trainers);
  const Tensor images = dg::index_select(data.images, 0, rows), labels = dg::index_select(data.labels, 0, rows);
  std::vector<RRef<Tensor>> parameters;
  for (const RRef<ParameterServer>& server : servers) {
    for (const RRef<Tensor>& parameter : server.rpc_sync(&ParameterServer::parameter_rrefs)) {
      parameters.push_back(parameter);
    }
  }
  dg::optim::DistributedOptimizer<dg::optim::SGD> optimizer(parameters, {.lr = options.lr});
  std::mt19937_64 random(options.seed + static_cast<uint64_t>(options.index));
  std::uniform_int_distribution<int64_t> row(0, rows.size(0) - 1);
  double recent_loss = 0;
  int recent = 0;
  for (int step = 0; step < options.steps; ++step) {
    std::vector<int64_t> picked(static_cast<size_t>(options.batch));
    for (int64_t& index : picked) index = row(random);
    const Tensor batch = dg::from_vector(picked);
    dg::autograd::Context context;
    const Tensor loss = dg::nn::cross_entropy(mlp(pull_all(servers), dg::index_select(images, 0, batch)),
                                              dg::index_select(labels, 0, batch));
    dg::autograd::backward(context, {loss});
    optimizer.step(context);
    if (step >= options.steps - 50) {
      recent_loss += loss.item<double>();
      ++recent;
    }
  }
  return recent == 0 ? 0 : recent_loss / recent;
}
DISTGRAD_REMOTE(train);

double test_accuracy(const std::vector<RRef<ParameterServer>>& servers) {
  const dg::data::FashionMnist test = dg::data::load_fashion_mnist(dg::data::Split::kTest);
  const dg::autograd::NoGradGuard no_grad;
  const Tensor predicted = dg::argmax(mlp(pull_all(servers), test.images), 1);
  return dg::mean(dg::to(dg::eq(predicted, test.labels), dg::kFloat64)).item<double>();
}

void drive() {
  const int servers = absl::GetFlag(FLAGS_servers), world = dg::get_world_size();
  DISTGRAD_CHECK(servers == 1 || servers == 2, "--servers must be 1 or 2, found ", servers);
  DISTGRAD_CHECK(world > servers, "parameter_server needs more than --servers ", servers, " workers, found ", world,
                 " (start it with distgrad-run --nproc-per-node ", servers + 2, ")");
  DISTGRAD_CHECK(absl::GetFlag(FLAGS_steps) >= 0 && absl::GetFlag(FLAGS_batch) >= 1,
                 "expected --steps >= 0 and --batch >= 1, found ", absl::GetFlag(FLAGS_steps), " and ",
                 absl::GetFlag(FLAGS_batch));
  const int64_t hidden = absl::GetFlag(FLAGS_hidden);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const std::vector<RRef<ParameterServer>> parameter_servers{
      dg::rpc::remote_object<ParameterServer>(1, std::vector<int64_t>{784, hidden}, seed),
      dg::rpc::remote_object<ParameterServer>(servers, std::vector<int64_t>{hidden, 10}, seed + 1)};
  std::vector<int> trainers{0};
  for (int rank = servers + 1; rank < world; ++rank) trainers.push_back(rank);
  std::printf("parameter server on Fashion-MNIST: the first layer on worker1, the second on %s; %zu trainers\n",
              dg::get_worker_name(servers).c_str(), trainers.size());
  std::printf("test accuracy before training: %.2f%%\n", 100 * test_accuracy(parameter_servers));

  TrainerOptions options{.trainers = static_cast<int64_t>(trainers.size()),
                         .steps = absl::GetFlag(FLAGS_steps),
                         .batch = absl::GetFlag(FLAGS_batch),
                         .lr = absl::GetFlag(FLAGS_lr),
                         .seed = seed};
  std::vector<dg::rpc::Future<double>> others;
  for (size_t index = 1; index < trainers.size(); ++index) {
    options.index = static_cast<int64_t>(index);
    others.push_back(dg::rpc::rpc_async(trainers[index], &train, parameter_servers, options));
  }
  options.index = 0;
  std::vector<double> losses{train(parameter_servers, options)};
  for (double loss : dg::rpc::wait_all(others)) losses.push_back(loss);
  for (size_t index = 0; index < trainers.size(); ++index) {
    std::printf("trainer %s: mean loss of its last 50 steps %.4f\n", dg::get_worker_name(trainers[index]).c_str(),
                losses[index]);
  }
  const double accuracy = test_accuracy(parameter_servers);
  std::printf("test accuracy after %d steps of %zu trainers: %.2f%%\n", options.steps, trainers.size(), 100 * accuracy);
  if (accuracy < absl::GetFlag(FLAGS_min_test_accuracy)) {
    throw std::runtime_error("parameter_server: the test accuracy " + std::to_string(accuracy) +
                             " is below --min_test_accuracy " + std::to_string(absl::GetFlag(FLAGS_min_test_accuracy)));
  }
}

}  // namespace examples

int main(int argc, char** argv) {
  examples::parse_command_line(argc, argv, "a parameter server on Fashion-MNIST; start it with distgrad-run");
  try {
    return dg::auto_init_rpc(nullptr, dg::rank_zero_only(examples::drive));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "parameter_server: %s\n", error.what());
    return 1;
  }
}
