// Parameter groups of the in-place optimizers: each group is updated exactly as an optimizer of
// its own would update it, state_dict numbers parameters across groups, checkpoints round-trip,
// the learning rate of each group can be read and set, and errors name the group.
#include <string>
#include <vector>

#include "core/ops.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/core/test_util.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad::optim {
namespace {

using testing::leaf;
using testing::values;

Tensor copy_of(const Tensor& parameter) {
  Tensor copy = untracked::clone(parameter.detach());
  copy.requires_grad_();
  return copy;
}

// Gradients that depend on the step and on the parameter's value (those of sum(k p^2 + p^3) / 3),
// so that a wrong lr or lost state shows in later steps.
void set_grad(const Tensor& p, int step) {
  const Tensor value = p.detach();
  p.set_grad(untracked::add(untracked::mul(value, 2.0 * step / 3), untracked::mul(value, value)));
}

// Runs three steps of one optimizer with a group for `a` and one for `b`, and of two optimizers
// for copies of a and b, side by side: each step must leave a and b equal to their copies.
template <typename Optimizer, typename Options>
void expect_groups_match_separate_optimizers(const Options& options_a, const Options& options_b) {
  const Tensor a = leaf({0.5, -1.0, 1.5, 2.0}, {2, 2});
  const Tensor b = leaf({0.1, -0.2, 0.3}, {3});
  const Tensor a_alone = copy_of(a);
  const Tensor b_alone = copy_of(b);
  Optimizer grouped({{.params = {a}, .options = options_a}, {.params = {b}, .options = options_b}});
  Optimizer only_a({a_alone}, options_a);
  Optimizer only_b({b_alone}, options_b);
  for (int step = 1; step <= 3; ++step) {
    for (const Tensor& p : {a, b, a_alone, b_alone}) set_grad(p, step);
    grouped.step();
    only_a.step();
    only_b.step();
    SCOPED_TRACE(::testing::Message() << "step " << step);
    EXPECT_EQ(values(a), values(a_alone));
    EXPECT_EQ(values(b), values(b_alone));
  }
  EXPECT_NE(values(a_alone), (std::vector<double>{0.5, -1.0, 1.5, 2.0}));  // it moved
}

TEST(ParamGroups, SGDUpdatesEachGroupWithItsOptions) {
  expect_groups_match_separate_optimizers<SGD>(SGDOptions{.lr = 0.1, .momentum = 0.9},
                                               SGDOptions{.lr = 0.01, .weight_decay = 0.1});
  expect_groups_match_separate_optimizers<SGD>(SGDOptions{.lr = 0.1}, SGDOptions{.lr = 0.3});
}

TEST(ParamGroups, AdamUpdatesEachGroupWithItsOptions) {
  expect_groups_match_separate_optimizers<Adam>(AdamOptions{.lr = 0.1, .amsgrad = true},
                                                AdamOptions{.lr = 0.01, .weight_decay = 0.1});
  expect_groups_match_separate_optimizers<AdamW>(AdamWOptions{.lr = 0.1}, AdamWOptions{.lr = 0.02, .weight_decay = 0});
}

TEST(ParamGroups, DifferentLearningRatesMoveEachParameterByItsOwn) {
  // Plain SGD: p -= lr * g, with the lr of p's group.
  const Tensor a = leaf({1.0}, {1});
  const Tensor b = leaf({1.0}, {1});
  SGD sgd({{.params = {a}, .options = {.lr = 0.1}}, {.params = {b}, .options = {.lr = 0.5}}});
  a.set_grad(from_vector<double>({2.0}));
  b.set_grad(from_vector<double>({2.0}));
  sgd.step();
  EXPECT_DOUBLE_EQ(a.item<double>(), 1 - 0.1 * 2);
  EXPECT_DOUBLE_EQ(b.item<double>(), 1 - 0.5 * 2);
}

TEST(ParamGroups, ParametersAndOptionsAreKeptInGroupOrder) {
  const Tensor w = leaf({1, 2}, {2});
  const Tensor b = leaf({3}, {1});
  const Tensor c = leaf({4}, {1});
  const std::vector<SGD::ParamGroup> groups = {{.params = {w}, .options = {.lr = 0.1}},
                                               {.params = {b, c}, .options = {.lr = 0.2, .momentum = 0.9}}};
  SGD sgd(groups);
  ASSERT_EQ(sgd.num_param_groups(), 2u);
  ASSERT_EQ(sgd.parameters().size(), 3u);
  EXPECT_TRUE(sgd.parameters()[0].is_same(w));
  EXPECT_TRUE(sgd.parameters()[1].is_same(b));
  EXPECT_TRUE(sgd.parameters()[2].is_same(c));
  EXPECT_EQ(sgd.param_groups()[1].params.size(), 2u);
  EXPECT_EQ(sgd.param_groups()[1].options.momentum, 0.9);
  EXPECT_EQ(sgd.lr(0), 0.1);
  EXPECT_EQ(sgd.lr(1), 0.2);
  // A group whose options are left out has the struct's defaults (torch's).
  AdamW adamw({{.params = {w}}, {.params = {b}, .options = {.weight_decay = 0}}});
  EXPECT_EQ(adamw.param_groups()[0].options.weight_decay, 1e-2);
  EXPECT_EQ(adamw.param_groups()[0].options.lr, 1e-3);
  EXPECT_EQ(adamw.param_groups()[1].options.weight_decay, 0);
}

TEST(ParamGroups, SetLrChangesTheStepOfThatGroupOnly) {
  const Tensor a = leaf({1.0}, {1});
  const Tensor b = leaf({1.0}, {1});
  SGD sgd({{.params = {a}, .options = {.lr = 0.1}}, {.params = {b}, .options = {.lr = 0.1}}});
  sgd.set_lr(1, 0.25);  // torch: sgd.param_groups[1]['lr'] = 0.25
  EXPECT_EQ(sgd.lr(0), 0.1);
  EXPECT_EQ(sgd.param_groups()[1].options.lr, 0.25);
  a.set_grad(from_vector<double>({1.0}));
  b.set_grad(from_vector<double>({1.0}));
  sgd.step();
  EXPECT_DOUBLE_EQ(a.item<double>(), 0.9);
  EXPECT_DOUBLE_EQ(b.item<double>(), 0.75);
}

TEST(ParamGroups, StateDictNumbersParametersAcrossGroups) {
  const Tensor w = leaf({1, 2}, {2});
  const Tensor b = leaf({3}, {1});
  const Tensor c = leaf({4, 5, 6}, {3});
  // Group 0 keeps no state (no momentum); group 1's parameters are 1 and 2.
  SGD sgd({{.params = {w}, .options = {.lr = 0.1}}, {.params = {b, c}, .options = {.lr = 0.1, .momentum = 0.9}}});
  for (const Tensor& p : {w, b, c}) set_grad(p, 1);
  sgd.step();
  const nn::ParamDict state = sgd.state_dict();
  EXPECT_EQ(state.keys(),
            (std::vector<std::string>{"state.1.momentum_buffer", "state.2.momentum_buffer", "parameter_count"}));
  EXPECT_EQ(state.at("state.2.momentum_buffer").sizes(), (Shape{3}));
  EXPECT_EQ(state.at("parameter_count").item<int64_t>(), 3);
  // Each parameter's state is checked against its own group's options.
  nn::ParamDict for_group_0 = state;
  for_group_0.insert("state.0.momentum_buffer", zeros({2}, {.dtype = kFloat64}));
  EXPECT_ERROR_CONTAINS(sgd.load_state_dict(for_group_0),
                        "SGD.load_state_dict: 'state.0.momentum_buffer' is not SGD state (with param group 0's options "
                        "each parameter's state holds: none)");
}

TEST(ParamGroups, CheckpointContinuesExactlyAsAnUninterruptedRun) {
  const std::vector<Tensor> initial = {leaf({0.5, -1.0, 1.5, 2.0}, {2, 2}), leaf({0.1, -0.2, 0.3}, {3}),
                                       leaf({0.7}, {1})};
  auto make = [](const std::vector<Tensor>& p) {
    return Adam({{.params = {p[0]}, .options = {.lr = 0.05, .amsgrad = true}},
                 {.params = {p[1], p[2]}, .options = {.lr = 0.01, .weight_decay = 0.1}}});
  };
  auto copies = [](const std::vector<Tensor>& parameters) {
    std::vector<Tensor> result;
    for (const Tensor& p : parameters) result.push_back(copy_of(p));
    return result;
  };
  // Five steps, and the same with the optimizer rebuilt from state_dict() after step 2.
  std::vector<Tensor> uninterrupted = copies(initial);
  std::vector<Tensor> resumed = copies(initial);
  Adam first = make(uninterrupted);
  Adam before = make(resumed);
  for (int step = 1; step <= 2; ++step) {
    for (const Tensor& p : uninterrupted) set_grad(p, step);
    for (const Tensor& p : resumed) set_grad(p, step);
    first.step();
    before.step();
  }
  const nn::ParamDict checkpoint = before.state_dict();
  resumed = copies(resumed);
  Adam after = make(resumed);
  after.load_state_dict(checkpoint);
  EXPECT_EQ(after.state_dict().keys(), checkpoint.keys());
  for (int step = 3; step <= 5; ++step) {
    for (const Tensor& p : uninterrupted) set_grad(p, step);
    for (const Tensor& p : resumed) set_grad(p, step);
    first.step();
    after.step();
  }
  for (size_t i = 0; i < initial.size(); ++i) EXPECT_EQ(values(resumed[i]), values(uninterrupted[i]));
}

TEST(ParamGroups, ConstructionFormsKeepTheirMeaning) {
  const Tensor p = leaf({1.0}, {1});
  EXPECT_EQ(SGD({p}, {}).lr(0), 1e-3);
  EXPECT_EQ(SGD({p}, 0.1).lr(0), 0.1);
  EXPECT_EQ(SGD({p}, {.lr = 0.1, .momentum = 0.9}).param_groups()[0].options.momentum, 0.9);
  EXPECT_EQ(SGD({{.params = {p}, .options = {.lr = 0.2}}}).lr(0), 0.2);
  EXPECT_EQ(Adam({p}, {}).lr(0), 1e-3);
  EXPECT_EQ(Adam({{.params = {p}}}).num_param_groups(), 1u);
  EXPECT_EQ(AdamW({p}, 0.5).lr(0), 0.5);
}

TEST(ParamGroups, ErrorsNameTheGroup) {
  const Tensor a = leaf({1.0}, {1});
  const Tensor b = leaf({2.0}, {1});
  EXPECT_ERROR_CONTAINS(SGD({{.params = {a}, .options = {.lr = 0.1}}, {.params = {b, a}, .options = {.lr = 0.2}}}),
                        "SGD: parameter 2 (param group 1) is the same tensor as parameter 0 (param group 0)");
  EXPECT_ERROR_CONTAINS(
      Adam({{.params = {a}}, {.params = {from_vector<double>({1})}}}),
      "Adam: parameter 1 (param group 1) (a float64 tensor of shape [1] on cpu) does not require grad");
  EXPECT_ERROR_CONTAINS(SGD({{.params = {a}, .options = {.lr = 0.1}}, {.params = {b}, .options = {.lr = -1}}}),
                        "SGD (param group 1): expected lr >= 0, found -1");
  EXPECT_ERROR_CONTAINS(AdamW({{.params = {a}, .options = {.betas = {0.9, 1.0}}}, {.params = {b}}}),
                        "AdamW (param group 0): expected 0 <= betas[1] < 1, found 1");
  EXPECT_ERROR_CONTAINS(SGD(std::vector<SGD::ParamGroup>{}), "SGD: got an empty parameter list");
  EXPECT_ERROR_CONTAINS(SGD({{.params = {}}, {.params = {}}}), "SGD: got an empty parameter list");

  SGD sgd({{.params = {a}, .options = {.lr = 0.1}}, {.params = {b}, .options = {.lr = 0.2}}});
  EXPECT_ERROR_CONTAINS(sgd.set_lr(1, -0.5), "SGD.set_lr(1): expected lr >= 0, found -0.5");
  EXPECT_ERROR_CONTAINS(sgd.set_lr(2, 0.5), "SGD.set_lr: expected a param group index below 2, found 2");
  EXPECT_ERROR_CONTAINS(sgd.lr(5), "SGD.lr: expected a param group index below 2, found 5");
  EXPECT_EQ(sgd.lr(1), 0.2);  // the failed set_lr changed nothing
}

}  // namespace
}  // namespace distgrad::optim
