// functional_call (running a module on given tensors, restoring its own) and module_clone
// (reference, differentiable clone, deep copy), with every error by message.
#include "nn/functional_call.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "optim/meta_sgd.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using testing::leaf;
using testing::values;

// Linear(2, 1) in float64 with weight [1, -2] and bias 0.5.
std::unique_ptr<nn::Linear> small_linear() {
  auto linear = std::make_unique<nn::Linear>(2, 1, true, TensorOptions{.dtype = kFloat64});
  linear->load_state_dict({{"weight", from_vector<double>({1, -2}, {1, 2})}, {"bias", from_vector<double>({0.5})}});
  return linear;
}

// A module with a buffer that is computed from a tensor that requires grad (not a leaf).
struct WithLearnedBuffer : nn::Module {
  WithLearnedBuffer() {
    register_parameter("weight", weight);
    register_buffer("shift", shift);
  }
  Tensor forward(const Tensor& x) override { return x * weight + shift; }
  std::string name() const override { return "WithLearnedBuffer"; }

  Tensor source = leaf({3}, {1});
  Tensor weight = from_vector<double>({2});
  Tensor shift = source * 2.0;
};

TEST(FunctionalCall, RunsWithTheGivenTensorsAndRestoresTheModulesOwn) {
  auto linear = small_linear();
  const Tensor own_weight = linear->weight, own_bias = linear->bias;
  const Tensor x = from_vector<double>({1, 1, 2, 0}, {2, 2});
  const Tensor y = nn::functional_call(
      *linear, {{"weight", from_vector<double>({3, 4}, {1, 2})}, {"bias", from_vector<double>({-1})}}, x);
  EXPECT_EQ(values(y), (std::vector<double>{6, 5}));  // [1, 1]·[3, 4] - 1, [2, 0]·[3, 4] - 1
  EXPECT_TRUE(linear->weight.is_same(own_weight));
  EXPECT_TRUE(linear->bias.is_same(own_bias));
  EXPECT_EQ(values(linear->forward(x)), (std::vector<double>{-0.5, 2.5}));
}

TEST(FunctionalCall, NamesNotGivenKeepTheModulesTensors) {
  auto linear = small_linear();
  const Tensor y =
      nn::functional_call(*linear, {{"bias", from_vector<double>({10})}}, from_vector<double>({1, 1}, {1, 2}));
  EXPECT_EQ(values(y), (std::vector<double>{9}));  // 1 - 2 + 10
}

TEST(FunctionalCall, RestoresTheModulesTensorsWhenForwardThrows) {
  auto linear = small_linear();
  const Tensor own_weight = linear->weight;
  EXPECT_ERROR_CONTAINS(
      nn::functional_call(*linear, {{"weight", zeros({1, 2}, {.dtype = kFloat64})}},
                          zeros({2, 3}, {.dtype = kFloat64})),
      "Linear(in_features=2, out_features=1, bias=true): expected input of shape [..., 2], found [2, 3]");
  EXPECT_TRUE(linear->weight.is_same(own_weight));
}

TEST(FunctionalCall, UnknownNameIsAnErrorNamingWhatTheModuleHas) {
  auto linear = small_linear();
  const Tensor own_bias = linear->bias;
  EXPECT_ERROR_CONTAINS(
      nn::functional_call(*linear, {{"bias", zeros({1}, {.dtype = kFloat64})}, {"weights", zeros({1, 2})}},
                          zeros({1, 2}, {.dtype = kFloat64})),
      "functional_call: Linear(in_features=2, out_features=1, bias=true) has no parameter or buffer named 'weights' "
      "(it has: weight, bias)");
  EXPECT_TRUE(linear->bias.is_same(own_bias));  // nothing was swapped in
}

TEST(FunctionalCall, WrongShapeIsAnErrorNamingBothShapes) {
  auto linear = small_linear();
  EXPECT_ERROR_CONTAINS(
      nn::functional_call(*linear, {{"weight", zeros({2, 2}, {.dtype = kFloat64})}},
                          zeros({1, 2}, {.dtype = kFloat64})),
      "functional_call: 'weight' of Linear(in_features=2, out_features=1, bias=true) has shape [1, 2], "
      "the given tensor has [2, 2]");
}

TEST(FunctionalCall, GradientsFlowToTheGivenTensorsNotTheModules) {
  // One inner SGD step as in MAML: the fast weight is not a leaf, and the gradient of the
  // outer loss with respect to the original weight goes through the inner gradient.
  auto linear = small_linear();
  const Tensor w = leaf({1, -2}, {1, 2});
  const Tensor x = from_vector<double>({1, 2}, {1, 2});
  const Tensor inner = nn::functional_call(*linear, {{"weight", w}}, x).sum();    // w·x + 0.5
  const Tensor grad_w = autograd::grad({inner}, {w}, {.create_graph = true})[0];  // = x
  const Tensor fast = w - grad_w * 0.1;
  const Tensor outer = pow(nn::functional_call(*linear, {{"weight", fast}}, x).sum(), 2.0);
  outer.backward();
  // outer = ((w - 0.1 x)·x + 0.5)^2 = (-3 - 0.5 + 0.5)^2; d/dw = 2 (-3) x.
  EXPECT_DOUBLE_EQ(outer.item<double>(), 9);
  testing::expect_values_near(w.grad(), {-6, -12});
  EXPECT_FALSE(linear->weight.grad().defined());
}

TEST(FunctionalCall, TrainingBatchNormUpdatesTheGivenBuffers) {
  nn::BatchNorm1d norm(2, {}, {.dtype = kFloat64});
  const Tensor given_mean = zeros({2}, {.dtype = kFloat64});
  nn::functional_call(norm, {{"running_mean", given_mean}}, from_vector<double>({1, 2, 3, 6}, {2, 2}));
  EXPECT_EQ(values(given_mean), (std::vector<double>{0.2, 0.4}));  // 0.1 * the batch mean [2, 4]
  EXPECT_EQ(values(norm.running_mean), (std::vector<double>{0, 0}));
  EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), 1);  // not given: the module's own is updated
}

TEST(ModuleClone, ReferenceIsTheModulesOwnTensors) {
  nn::BatchNorm1d norm(2);
  const nn::ParamDict params = nn::module_clone(norm, nn::CloneBy::kReference);
  EXPECT_THAT(params.keys(), ElementsAre("weight", "bias", "running_mean", "running_var", "num_batches_tracked"));
  EXPECT_TRUE(params.at("weight").is_same(norm.weight));
  EXPECT_TRUE(params.at("running_var").is_same(norm.running_var));
}

TEST(ModuleClone, CloneSendsGradientsBackToTheOriginalParameters) {
  auto linear = small_linear();
  const nn::ParamDict clones = nn::module_clone(*linear, nn::CloneBy::kClone);
  EXPECT_FALSE(clones.at("weight").is_leaf());
  EXPECT_TRUE(clones.at("weight").requires_grad());
  EXPECT_NE(clones.at("weight").data_ptr(), linear->weight.data_ptr());  // a copy of the data
  const Tensor x = from_vector<double>({1, 2, 3, -1}, {2, 2});
  nn::functional_call(*linear, clones, x).sum().backward();
  EXPECT_EQ(values(linear->weight.grad()), (std::vector<double>{4, 1}));  // the column sums of x
  EXPECT_EQ(values(linear->bias.grad()), (std::vector<double>{2}));
}

TEST(ModuleClone, DeepcopyMakesDetachedLeaves) {
  auto linear = small_linear();
  const nn::ParamDict copies = nn::module_clone(*linear, nn::CloneBy::kDeepcopy);
  const Tensor& weight = copies.at("weight");
  EXPECT_TRUE(weight.is_leaf());
  EXPECT_TRUE(weight.requires_grad());
  EXPECT_NE(weight.data_ptr(), linear->weight.data_ptr());
  EXPECT_EQ(values(weight), values(linear->weight));
  nn::functional_call(*linear, copies, from_vector<double>({1, 2}, {1, 2})).sum().backward();
  EXPECT_EQ(values(weight.grad()), (std::vector<double>{1, 2}));
  EXPECT_FALSE(linear->weight.grad().defined());
}

TEST(ModuleClone, DetachBuffersCutsOnlyTheBuffers) {
  WithLearnedBuffer module;
  for (nn::CloneBy by : {nn::CloneBy::kReference, nn::CloneBy::kClone, nn::CloneBy::kDeepcopy}) {
    const nn::ParamDict kept = nn::module_clone(module, by);
    EXPECT_TRUE(kept.at("shift").requires_grad()) << static_cast<int>(by);
    const nn::ParamDict detached = nn::module_clone(module, by, /*detach_buffers=*/true);
    EXPECT_FALSE(detached.at("shift").requires_grad()) << static_cast<int>(by);
    EXPECT_EQ(values(detached.at("shift")), (std::vector<double>{6}));
    EXPECT_TRUE(detached.at("weight").requires_grad()) << static_cast<int>(by);
  }
  // A cloned buffer keeps its link to what it was computed from.
  nn::functional_call(module, nn::module_clone(module, nn::CloneBy::kClone), from_vector<double>({1})).sum().backward();
  EXPECT_EQ(values(module.source.grad()), (std::vector<double>{2}));
}

// Note [Slot locking]: threads share one module. Each runs MAML's inner loop (functional_call under
// MetaSGD, gradients with create_graph) with its own weights and must get exactly what a thread
// alone gets, while another thread reads the module's parameters, which must stay its own.
TEST(FunctionalCall, ManyThreadsOnOneModuleEachSeeTheirOwnTensors) {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(3, 8, true, TensorOptions{.dtype = kFloat64}));
  net->push_back(std::make_shared<nn::Linear>(8, 1, true, TensorOptions{.dtype = kFloat64}));
  const nn::ParamDict own = net->named_parameters();
  const Tensor x = randn({5, 3}, {.dtype = kFloat64});
  const Tensor y = randn({5, 1}, {.dtype = kFloat64});

  // The adapted weights' query loss and its gradient w.r.t. the thread's initial weights.
  auto adapted_loss_and_grad = [&](const nn::ParamDict& start) {
    nn::ParamDict params = start;
    optim::MetaSGD inner(params, 0.1);
    for (int step = 0; step < 2; ++step) params = inner.step(nn::mse_loss(nn::functional_call(*net, params, x), y));
    const Tensor loss = nn::mse_loss(nn::functional_call(*net, params, x), y);
    const Tensor first = start.entries()[0].second;
    return std::pair{loss.item<double>(), autograd::grad({loss}, {first})[0].to_vector<double>()};
  };
  constexpr int kThreads = 8, kRounds = 40;
  std::vector<nn::ParamDict> starts;
  std::vector<std::pair<double, std::vector<double>>> alone;
  for (int i = 0; i < kThreads; ++i) {
    nn::ParamDict start;
    for (const auto& [name, tensor] : own) {
      start.insert(name, add(randn(tensor.sizes(), {.dtype = kFloat64}), tensor.detach()).requires_grad_());
    }
    starts.push_back(start);
    alone.push_back(adapted_loss_and_grad(start));
  }

  std::atomic<int> mismatches = 0, foreign_reads = 0;
  std::atomic<bool> done = false;
  std::thread reader([&] {
    while (!done) {
      const nn::ParamDict seen = nn::module_clone(*net, nn::CloneBy::kReference);
      const nn::ParamDict listed = net->named_parameters();
      for (const auto& [name, tensor] : own) {
        if (!seen.at(name).is_same(tensor) || !listed.at(name).is_same(tensor)) ++foreign_reads;
      }
      // Lets the adapting threads take the module's lock: under valgrind, which runs one thread at
      // a time, a reader retaking it at once starved them for many minutes.
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < kRounds; ++round) {
        if (adapted_loss_and_grad(starts[i]) != alone[i]) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done = true;
  reader.join();
  EXPECT_EQ(mismatches, 0) << "a thread's result changed when other threads shared the module";
  EXPECT_EQ(foreign_reads, 0) << "module_clone or named_parameters saw another thread's tensors";
  for (const auto& [name, tensor] : own) EXPECT_TRUE(net->named_parameters().at(name).is_same(tensor)) << name;
}

}  // namespace
}  // namespace distgrad
