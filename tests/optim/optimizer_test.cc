// The Optimizer base: state_dict contents, save/load round trips that continue exactly as an
// uninterrupted run, and every error of load_state_dict by message.
#include "optim/optimizer.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/ops.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/core/test_util.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad::optim {
namespace {

using testing::leaf;
using testing::values;

std::vector<Tensor> make_parameters() { return {leaf({0.5, -1.0, 1.5, 2.0}, {2, 2}), leaf({0.1, -0.2, 0.3}, {3})}; }

// Copies of the parameters' values as new leaves: the weights a checkpoint would restore.
std::vector<Tensor> copies(const std::vector<Tensor>& parameters) {
  std::vector<Tensor> result;
  for (const Tensor& p : parameters) {
    Tensor copy = untracked::clone(p.detach());
    copy.requires_grad_();
    result.push_back(copy);
  }
  return result;
}

// Sets gradients that depend on the step and on the parameters' values (loss = sum(k p^2 +
// p^3) / 3), so that a resumed run diverges from the uninterrupted one if any state is lost.
void set_grads(const std::vector<Tensor>& parameters, int step) {
  for (const Tensor& p : parameters) {
    const Tensor value = p.detach();
    p.set_grad(untracked::add(untracked::mul(value, 2.0 * step / 3), untracked::mul(value, value)));
  }
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()) + ".safetensors")).string();
}

TEST(OptimizerStateDict, HoldsStepCountsAndBuffersUnderTorchsNames) {
  const std::vector<Tensor> parameters = make_parameters();
  Adam adam(parameters, {.lr = 0.1, .amsgrad = true});
  EXPECT_EQ(adam.state_dict().keys(), (std::vector<std::string>{"parameter_count"}));
  for (int step = 1; step <= 2; ++step) {
    adam.zero_grad();
    set_grads(parameters, step);
    if (step == 2) parameters[1].set_grad(Tensor());  // parameter 1 is skipped at step 2
    adam.step();
  }
  const nn::ParamDict state = adam.state_dict();
  EXPECT_EQ(state.keys(),
            (std::vector<std::string>{"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq",
                                      "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.max_exp_avg_sq",
                                      "parameter_count"}));
  EXPECT_EQ(state.at("state.0.step").dtype(), kInt64);
  EXPECT_EQ(state.at("state.0.step").dim(), 0);
  EXPECT_EQ(state.at("state.0.step").item<int64_t>(), 2);
  EXPECT_EQ(state.at("state.1.step").item<int64_t>(), 1);
  EXPECT_EQ(state.at("parameter_count").item<int64_t>(), 2);
  EXPECT_EQ(state.at("state.0.exp_avg").sizes(), (Shape{2, 2}));
  EXPECT_EQ(state.at("state.1.exp_avg_sq").dtype(), kFloat64);
}

TEST(OptimizerStateDict, IsASnapshot) {
  const std::vector<Tensor> parameters = make_parameters();
  SGD sgd(parameters, {.lr = 0.1, .momentum = 0.9});
  set_grads(parameters, 1);
  sgd.step();
  const nn::ParamDict state = sgd.state_dict();
  const std::vector<double> buffer = values(state.at("state.0.momentum_buffer"));
  sgd.step();
  EXPECT_EQ(values(state.at("state.0.momentum_buffer")), buffer);
  EXPECT_EQ(SGD(parameters, 0.1).state_dict().size(), 1u);  // plain SGD keeps no state
}

// Runs `steps` steps of a fresh optimizer made by `make` on copies of `initial`; when
// `checkpoint_after` is in range, saves the optimizer there, makes a new one on copies of the
// weights reached so far, loads the file into it (unless !load_state) and goes on with that one.
template <typename Make>
std::vector<std::vector<double>> run(const Make& make, const std::vector<Tensor>& initial, int steps,
                                     int checkpoint_after, const std::string& path, bool load_state = true) {
  std::vector<Tensor> parameters = copies(initial);
  auto optimizer = make(parameters);
  for (int step = 1; step <= steps; ++step) {
    optimizer->zero_grad();
    set_grads(parameters, step);
    if (step == 2) parameters[1].set_grad(Tensor());
    optimizer->step();
    if (step == checkpoint_after) {
      optimizer->save(path);
      parameters = copies(parameters);
      optimizer = make(parameters);
      if (load_state) optimizer->load(path);
    }
  }
  std::vector<std::vector<double>> result;
  for (const Tensor& p : parameters) result.push_back(values(p));
  return result;
}

TEST(OptimizerStateDict, SaveLoadContinuesExactlyAsAnUninterruptedRun) {
  const std::vector<Tensor> initial = make_parameters();
  const std::string path = temp_path("optimizer_round_trip");
  auto adam = [](const std::vector<Tensor>& p) {
    return std::make_unique<Adam>(p, AdamOptions{.lr = 0.05, .weight_decay = 0.01, .amsgrad = true});
  };
  auto adamw = [](const std::vector<Tensor>& p) { return std::make_unique<AdamW>(p, 0.05); };
  auto sgd = [](const std::vector<Tensor>& p) {
    return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
  };
  for (int checkpoint_after : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << "checkpoint after step " << checkpoint_after);
    EXPECT_EQ(run(adam, initial, 5, checkpoint_after, path), run(adam, initial, 5, 0, path));
    EXPECT_EQ(run(adamw, initial, 5, checkpoint_after, path), run(adamw, initial, 5, 0, path));
    EXPECT_EQ(run(sgd, initial, 5, checkpoint_after, path), run(sgd, initial, 5, 0, path));
  }
  // A resumed run that does not load the state differs: the check above is not vacuous.
  EXPECT_NE(run(adam, initial, 5, 2, path, /*load_state=*/false), run(adam, initial, 5, 0, path));
  std::filesystem::remove(path);
}

TEST(OptimizerStateDict, LoadingAStateWithoutAParameterRestartsIt) {
  const std::vector<Tensor> parameters = make_parameters();
  Adam adam(parameters, 0.1);
  auto set_unit_grads = [&] {
    for (const Tensor& p : parameters) p.set_grad(full_like(p.detach(), 1.0));
  };
  set_unit_grads();
  adam.step();
  nn::ParamDict state;
  for (const auto& [key, tensor] : adam.state_dict()) {
    if (!key.starts_with("state.1.")) state.insert(key, tensor);
  }
  adam.load_state_dict(state);
  const nn::ParamDict loaded = adam.state_dict();
  EXPECT_TRUE(loaded.contains("state.0.step"));
  EXPECT_FALSE(loaded.contains("state.1.step"));
  // Parameter 1 starts afresh: its next step is a first step, which moves each element by lr.
  const std::vector<double> before = values(parameters[1]);
  set_unit_grads();
  adam.step();
  EXPECT_EQ(adam.state_dict().at("state.1.step").item<int64_t>(), 1);
  const std::vector<double> after = values(parameters[1]);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(std::abs(after[i] - before[i]), 0.1, 1e-6);
}

TEST(OptimizerStateDict, LoadConvertsToTheParametersDtype) {
  const std::vector<Tensor> parameters = make_parameters();
  SGD sgd(parameters, {.lr = 0.1, .momentum = 0.5});
  nn::ParamDict state{{"state.1.momentum_buffer", from_vector<float>({1, 2, 3})},
                      {"parameter_count", scalar_tensor(2, {.dtype = kInt64})}};
  sgd.load_state_dict(state);
  EXPECT_EQ(sgd.state_dict().at("state.1.momentum_buffer").dtype(), kFloat64);
  parameters[1].set_grad(from_vector<double>({0, 0, 0}));
  sgd.step();  // b = 0.5 * [1, 2, 3]; p -= 0.1 * b
  EXPECT_THAT(values(parameters[1]), ::testing::Pointwise(::testing::DoubleNear(1e-15), {0.05, -0.3, 0.15}));
}

TEST(OptimizerStateDict, LoadErrorsNameTheKey) {
  const std::vector<Tensor> parameters = make_parameters();
  Adam adam(parameters, 0.1);
  set_grads(parameters, 1);
  adam.step();
  const nn::ParamDict good = adam.state_dict();
  auto with = [&](const std::string& key, const Tensor& tensor) {
    nn::ParamDict state = good;
    state.insert(key, tensor);
    return state;
  };
  auto without = [&](const std::string& removed) {
    nn::ParamDict state;
    for (const auto& [key, tensor] : good) {
      if (key != removed) state.insert(key, tensor);
    }
    return state;
  };
  EXPECT_ERROR_CONTAINS(adam.load_state_dict(without("parameter_count")),
                        "Adam.load_state_dict: the state has no 'parameter_count' entry, so it is not an optimizer "
                        "state dict");
  EXPECT_ERROR_CONTAINS(
      adam.load_state_dict(with("parameter_count", scalar_tensor(3, {.dtype = kInt64}))),
      "Adam.load_state_dict: the state is for 3 parameters ('parameter_count'), this optimizer has 2");
  EXPECT_ERROR_CONTAINS(adam.load_state_dict(with("parameter_count", from_vector<int64_t>({2}))),
                        "Adam.load_state_dict: 'parameter_count' is a int64 tensor of shape [1] on cpu, expected an "
                        "int64 0-dim tensor");
  EXPECT_ERROR_CONTAINS(adam.load_state_dict(with("state.2.exp_avg", zeros({3}))),
                        "Adam.load_state_dict: 'state.2.exp_avg' is for parameter 2, this optimizer has 2 parameters");
  EXPECT_ERROR_CONTAINS(adam.load_state_dict(with("state.1.exp_avg", zeros({2, 2}, {.dtype = kFloat64}))),
                        "Adam.load_state_dict: 'state.1.exp_avg' has shape [2, 2], expected [3] (the shape of "
                        "parameter 1)");
  EXPECT_ERROR_CONTAINS(adam.load_state_dict(with("state.0.step", from_vector<int64_t>({1, 1}))),
                        "Adam.load_state_dict: 'state.0.step' is a int64 tensor of shape [2] on cpu, expected a 0-dim "
                        "step count");
  EXPECT_ERROR_CONTAINS(adam.load_state_dict(with("state.0.max_exp_avg_sq", zeros({2, 2}))),
                        "Adam.load_state_dict: 'state.0.max_exp_avg_sq' is not Adam state (with these options each "
                        "parameter's state holds: step, exp_avg, exp_avg_sq)");
  EXPECT_ERROR_CONTAINS(adam.load_state_dict(with("lr", scalar_tensor(0.1))),
                        "Adam.load_state_dict: unexpected key 'lr' (expected 'state.<index>.<name>' or "
                        "'parameter_count')");
  for (const char* malformed : {"state.x.step", "state..step", "state.0", "state.0.", "state.-1.step"}) {
    EXPECT_ERROR_CONTAINS(adam.load_state_dict(with(malformed, scalar_tensor(1))), "unexpected key '", malformed);
  }
  EXPECT_ERROR_CONTAINS(adam.load_state_dict(without("state.1.exp_avg_sq")),
                        "Adam.load_state_dict: parameter 1 has state but no 'state.1.exp_avg_sq' entry");
  EXPECT_ERROR_CONTAINS(SGD(parameters, 0.1).load_state_dict(good),
                        "SGD.load_state_dict: 'state.0.step' is not SGD state (with these options each parameter's "
                        "state holds: none)");
  // A failed load changes nothing.
  EXPECT_EQ(values(adam.state_dict().at("state.1.exp_avg")), values(good.at("state.1.exp_avg")));
}

TEST(OptimizerStateDict, LoadFromAFileNamesTheFile) {
  const std::vector<Tensor> parameters = make_parameters();
  const std::string path = temp_path("optimizer_three_parameters");
  Adam three({parameters[0], parameters[1], leaf({1}, {1})}, 0.1);
  three.save(path);
  Adam two(parameters, 0.1);
  const std::string context = "Adam.load('" + path + "'): the state is for 3 parameters";
  EXPECT_ERROR_CONTAINS(two.load(path), context.c_str());
  std::filesystem::remove(path);
  EXPECT_ERROR_CONTAINS(two.load(path), path.c_str());
}

}  // namespace
}  // namespace distgrad::optim
