// Whole training steps, the overhead-bound workloads where a native autograd should shine:
//   MamlSinusoidStep: one meta-training step of second-order MAML on sinusoid regression
//     (MLP 1-40-40-1, meta-batch 16, 5 inner SGD steps at 0.01 with create_graph, 10 shots,
//     Adam 1e-3 outer), as examples/maml_sinusoid_local does it;
//   FashionMlpStep: one Adam step of an MLP 784-256-128-10 on a batch of 128 28x28 images.
// bench/peer/train_steps_torch.py is the PyTorch twin; bench/run_bench.py runs both.
//
//   OMP_NUM_THREADS=1 build/bench/train_steps_bench --benchmark_format=json
#include <benchmark/benchmark.h>

#include "examples/sinusoid.h"
#include "nn/activation.h"
#include "nn/flatten.h"
#include "nn/functional_call.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "optim/adam.h"
#include "optim/meta_sgd.h"

namespace dg = distgrad;
namespace nn = distgrad::nn;

namespace {

constexpr int64_t kMetaBatch = 16, kShots = 10, kInnerSteps = 5;
constexpr double kInnerLr = 0.01;

void BM_MamlSinusoidStep(benchmark::State& state) {
  dg::manual_seed(0);
  sinusoid::Net net;
  dg::optim::Adam outer(net.parameters(), 1e-3);
  const sinusoid::Tasks tasks = sinusoid::sample_tasks(kMetaBatch, kShots);
  for (auto _ : state) {
    std::vector<dg::Tensor> losses;
    for (int64_t task = 0; task < kMetaBatch; ++task) {
      nn::ParamDict params = nn::module_clone(net, nn::CloneBy::kReference);
      dg::optim::MetaSGD inner(params, kInnerLr);
      const dg::Tensor x = dg::select(tasks.x_support, 0, task), y = dg::select(tasks.y_support, 0, task);
      for (int64_t step = 0; step < kInnerSteps; ++step) {
        params = inner.step(nn::mse_loss(nn::functional_call(net, params, x), y));
      }
      losses.push_back(nn::mse_loss(nn::functional_call(net, params, dg::select(tasks.x_query, 0, task)),
                                    dg::select(tasks.y_query, 0, task)));
    }
    outer.zero_grad();
    dg::mean(dg::stack(losses)).backward();
    outer.step();
  }
}
BENCHMARK(BM_MamlSinusoidStep)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_FashionMlpStep(benchmark::State& state) {
  dg::manual_seed(0);
  nn::Sequential net({std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256),
                      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 128),
                      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
  dg::optim::Adam optimizer(net.parameters(), 1e-3);
  const dg::Tensor images = dg::rand({128, 1, 28, 28});
  const dg::Tensor labels = dg::randint(0, 10, {128});
  for (auto _ : state) {
    optimizer.zero_grad();
    nn::cross_entropy(net.forward(images), labels).backward();
    optimizer.step();
  }
}
BENCHMARK(BM_FashionMlpStep)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
