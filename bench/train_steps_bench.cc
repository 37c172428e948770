// Whole training steps, the overhead-bound workloads where a native autograd should shine:
//   MamlSinusoidStep: one meta-training step of second-order MAML on sinusoid regression
//     (MLP 1-40-40-1, meta-batch 16, 5 inner SGD steps at 0.01 with create_graph, 10 shots,
//     Adam 1e-3 outer), as examples/maml_sinusoid_local does it;
//   FashionMlpStep: one Adam step of an MLP 784-256-128-10 on a batch of 128 28x28 images;
//   LayerNormStep: layer_norm over the last dim of [64, 128, 256] with weight and bias, forward
//     and backward;
//   AttentionStep: causal scaled_dot_product_attention of [8, 4, 128, 64] query, key and value,
//     forward and backward;
//   TransformerMamlStep: one meta-training step of examples/maml_transformer in one process
//     (meta-batch 8, 2 inner SGD steps at 0.1 with create_graph, 10 sequences of 8 steps per
//     set, dropout 0.1, Adam 2e-3 outer).
// bench/peer/train_steps_torch.py is the PyTorch twin; bench/run_bench.py runs both.
//
//   OMP_NUM_THREADS=1 build/bench/train_steps_bench --benchmark_format=json
#include <benchmark/benchmark.h>

#include "core/creation.h"
#include "examples/sequence_tasks.h"
#include "examples/sinusoid.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/flatten.h"
#include "nn/functional_call.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/normalization.h"
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

void BM_LayerNormStep(benchmark::State& state) {
  dg::manual_seed(0);
  const dg::Tensor x = dg::randn({64, 128, 256}, dg::requires_grad());
  const dg::Tensor weight = dg::ones({256}, dg::requires_grad()), bias = dg::zeros({256}, dg::requires_grad());
  for (auto _ : state) {
    dg::sum(nn::layer_norm(x, {256}, weight, bias)).backward();
  }
}
BENCHMARK(BM_LayerNormStep)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AttentionStep(benchmark::State& state) {
  dg::manual_seed(0);
  const auto input = [] { return dg::randn({8, 4, 128, 64}, dg::requires_grad()); };
  const dg::Tensor q = input(), k = input(), v = input();
  for (auto _ : state) {
    dg::sum(nn::scaled_dot_product_attention(q, k, v, {.is_causal = true})).backward();
  }
}
BENCHMARK(BM_AttentionStep)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_TransformerMamlStep(benchmark::State& state) {
  constexpr int64_t kTasks = 8, kSequences = 10, kLength = 8;
  dg::manual_seed(0);
  sequence_tasks::SequenceNet net(kLength);
  dg::optim::Adam outer(net.parameters(), 2e-3);
  const sequence_tasks::Tasks tasks =
      sequence_tasks::sample_tasks(kTasks, kSequences, kLength, dg::default_generator());
  for (auto _ : state) {
    std::vector<dg::Tensor> losses;
    for (int64_t index = 0; index < kTasks; ++index) {
      const sequence_tasks::Tasks task{dg::select(tasks.x_support, 0, index), dg::select(tasks.y_support, 0, index),
                                       dg::select(tasks.x_query, 0, index), dg::select(tasks.y_query, 0, index)};
      const nn::ParamDict params =
          sequence_tasks::adapt(net, nn::module_clone(net, nn::CloneBy::kReference), task, 2, 0.1);
      losses.push_back(nn::mse_loss(nn::functional_call(net, params, task.x_query), task.y_query));
    }
    outer.zero_grad();
    dg::mean(dg::stack(losses)).backward();
    outer.step();
  }
}
BENCHMARK(BM_TransformerMamlStep)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
