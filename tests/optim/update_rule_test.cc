// Each optimizer's update rule is written once (optim/sgd.h's sgd_update, optim/adam.h's
// adam_update) and run two ways: in place by SGD and Adam, recorded by MetaSGD and MetaAdam. Given
// the same gradients, both ways take the same steps, bit for bit, for every option.
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/creation.h"
#include "optim/adam.h"
#include "optim/meta_adam.h"
#include "optim/meta_sgd.h"
#include "optim/sgd.h"
#include "tests/core/test_util.h"

namespace distgrad::optim {
namespace {

using testing::values;

// The gradients of five steps: the loss sum(p * g) has gradient g exactly.
const std::vector<std::vector<double>> kGradients = {
    {0.5, -1.0, 2.0}, {0.25, 0.0, -3.0}, {-0.75, 1.5, 0.125}, {1.0, -0.5, 0.0}, {0.0, 2.0, -1.0}};
const std::vector<double> kStart = {0.3, -0.7, 1.1};

// The parameter after each step, taken in place by `Optimizer`.
template <typename Optimizer, typename Options>
std::vector<std::vector<double>> in_place_steps(const Options& options) {
  const Tensor p = from_vector<double>(kStart).requires_grad_();
  Optimizer optimizer({p}, options);
  std::vector<std::vector<double>> steps;
  for (const std::vector<double>& g : kGradients) {
    p.set_grad(from_vector<double>(g));
    optimizer.step();
    steps.push_back(values(p));
  }
  return steps;
}

// The same, recorded by `MetaOptimizer`.
template <typename MetaOptimizer, typename Options>
std::vector<std::vector<double>> recorded_steps(const Options& options) {
  MetaOptimizer optimizer(nn::ParamDict{{"p", from_vector<double>(kStart).requires_grad_()}}, options);
  std::vector<std::vector<double>> steps;
  for (const std::vector<double>& g : kGradients) {
    const nn::ParamDict params = optimizer.step(sum(mul(optimizer.params().at("p"), from_vector<double>(g))));
    steps.push_back(values(params.at("p")));
  }
  return steps;
}

TEST(UpdateRule, SGDAndMetaSGDTakeTheSameSteps) {
  const std::vector<std::pair<std::string, SGDOptions>> cases = {
      {"plain", {.lr = 0.1}},
      {"momentum and dampening", {.lr = 0.1, .momentum = 0.9, .dampening = 0.3}},
      {"nesterov and weight decay", {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.1, .nesterov = true}},
  };
  for (const auto& [name, options] : cases) {
    SCOPED_TRACE(name);
    EXPECT_EQ((in_place_steps<SGD>(options)), (recorded_steps<MetaSGD>(options)));
  }
}

TEST(UpdateRule, AdamAndMetaAdamTakeTheSameSteps) {
  const std::vector<std::pair<std::string, AdamOptions>> cases = {
      {"defaults, lr 0.1", {.lr = 0.1}},
      {"amsgrad, betas, eps", {.lr = 0.1, .betas = {0.5, 0.9}, .eps = 1e-3, .amsgrad = true}},
      {"eps_root and weight decay", {.lr = 0.1, .eps_root = 1e-4, .weight_decay = 0.2}},
  };
  for (const auto& [name, options] : cases) {
    SCOPED_TRACE(name);
    EXPECT_EQ((in_place_steps<Adam>(options)), (recorded_steps<MetaAdam>(options)));
  }
}

}  // namespace
}  // namespace distgrad::optim
