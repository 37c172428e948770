// SGD: its first steps worked out by hand, the same steps against torch.optim.SGD, skipped
// parameters, zero_grad, and every construction error by message.
#include "optim/sgd.h"

#include <limits>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/core/test_util.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad::optim {
namespace {

using ::testing::DoubleNear;
using testing::leaf;
using ::testing::Pointwise;
using testing::values;

// The values of a one-element parameter p0 = 1 after each of three steps with gradients
// 0.5, -1 and 2.
std::vector<double> scalar_steps(const SGDOptions& options) {
  const Tensor p = leaf({1.0}, {1});
  SGD sgd({p}, options);
  std::vector<double> trajectory;
  for (double g : {0.5, -1.0, 2.0}) {
    p.set_grad(from_vector<double>({g}));
    sgd.step();
    trajectory.push_back(p.item<double>());
  }
  return trajectory;
}

TEST(SGD, PlainStepsByHand) {
  // p = p - lr * g
  EXPECT_THAT(scalar_steps({.lr = 0.1}), Pointwise(DoubleNear(1e-15), {1 - 0.05, 0.95 + 0.1, 1.05 - 0.2}));
}

TEST(SGD, MomentumStepsByHand) {
  // b1 = g1 = 0.5; b2 = 0.9 * 0.5 - 1 = -0.55; b3 = 0.9 * -0.55 + 2 = 1.505; p -= 0.1 * b.
  EXPECT_THAT(scalar_steps({.lr = 0.1, .momentum = 0.9}),
              Pointwise(DoubleNear(1e-15), {1 - 0.05, 0.95 + 0.055, 1.005 - 0.1505}));
}

TEST(SGD, DampeningStepsByHand) {
  // The first step takes the gradient undamped (as torch): b1 = 0.5; b2 = 0.45 - 0.5 * 1 = -0.05;
  // b3 = 0.9 * -0.05 + 0.5 * 2 = 0.955.
  EXPECT_THAT(scalar_steps({.lr = 0.1, .momentum = 0.9, .dampening = 0.5}),
              Pointwise(DoubleNear(1e-15), {1 - 0.05, 0.95 + 0.005, 0.955 - 0.0955}));
}

TEST(SGD, NesterovStepsByHand) {
  // b as with momentum; the step is g + 0.9 * b: 0.5 + 0.45 = 0.95; -1 - 0.495 = -1.495;
  // 2 + 1.3545 = 3.3545.
  EXPECT_THAT(scalar_steps({.lr = 0.1, .momentum = 0.9, .nesterov = true}),
              Pointwise(DoubleNear(1e-15), {1 - 0.095, 0.905 + 0.1495, 1.0545 - 0.33545}));
}

TEST(SGD, WeightDecayStepsByHand) {
  // g + 0.1 * p: 0.5 + 0.1 = 0.6; -1 + 0.094 = -0.906; 2 + 0.10306 = 2.10306.
  EXPECT_THAT(scalar_steps({.lr = 0.1, .weight_decay = 0.1}),
              Pointwise(DoubleNear(1e-15), {1 - 0.06, 0.94 + 0.0906, 1.0306 - 0.210306}));
}

// The problem shared with torch: w [2, 2] and b [3] with fixed gradients; b has no gradient
// at step 2, so it must be skipped (its momentum left as it is).
using Trajectory = std::vector<std::pair<std::vector<double>, std::vector<double>>>;  // (w, b) after each step

Trajectory three_steps(const SGDOptions& options) {
  const Tensor w = leaf({0.5, -1.0, 1.5, 2.0}, {2, 2});
  const Tensor b = leaf({0.1, -0.2, 0.3}, {3});
  const std::vector<std::vector<double>> w_grads = {
      {0.2, -0.4, 1.0, 0.05}, {-0.1, 0.3, 0.1, -0.2}, {0.3, 0.0, -0.6, 0.1}};
  const std::vector<std::vector<double>> b_grads = {{1.0, -0.5, 0.0}, {}, {-0.4, 0.6, 0.2}};
  SGD sgd({w, b}, options);
  Trajectory trajectory;
  for (size_t k = 0; k < 3; ++k) {
    sgd.zero_grad();
    w.set_grad(from_vector(w_grads[k], {2, 2}));
    if (!b_grads[k].empty()) b.set_grad(from_vector(b_grads[k]));
    sgd.step();
    trajectory.emplace_back(values(w), values(b));
  }
  return trajectory;
}

struct TorchCase {
  const char* name;
  SGDOptions options;
  Trajectory expected;
};

TEST(SGD, MatchesTorchOptim) {
  // Computed with torch 2.15's torch.optim.SGD(..., foreach=False) on the same initial values
  // and gradients (float64), printed with repr():
  //   w = torch.tensor([[0.5, -1.0], [1.5, 2.0]], dtype=torch.float64, requires_grad=True)
  //   b = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64, requires_grad=True)
  //   opt = torch.optim.SGD([w, b], lr=0.1, ...)
  //   for each step: opt.zero_grad(); w.grad = ...; b.grad = ... (None at step 2); opt.step()
  const std::vector<TorchCase> cases = {
      {"lr=0.1",
       {.lr = 0.1},
       {{{0.48, -0.96, 1.4, 1.995}, {0.0, -0.15000000000000002, 0.3}},
        {{0.49, -0.99, 1.39, 2.015}, {0.0, -0.15000000000000002, 0.3}},
        {{0.45999999999999996, -0.99, 1.45, 2.0050000000000003},
         {0.04000000000000001, -0.21000000000000002, 0.27999999999999997}}}},
      {"lr=0.1 momentum=0.9",
       {.lr = 0.1, .momentum = 0.9},
       {{{0.48, -0.96, 1.4, 1.995}, {0.0, -0.15000000000000002, 0.3}},
        {{0.472, -0.954, 1.2999999999999998, 2.0105}, {0.0, -0.15000000000000002, 0.3}},
        {{0.43479999999999996, -0.9486, 1.2699999999999998, 2.01445}, {-0.05, -0.165, 0.27999999999999997}}}},
      {"lr=0.1 momentum=0.9 dampening=0.5",
       {.lr = 0.1, .momentum = 0.9, .dampening = 0.5},
       {{{0.48, -0.96, 1.4, 1.995}, {0.0, -0.15000000000000002, 0.3}},
        {{0.46699999999999997, -0.939, 1.305, 2.0005}, {0.0, -0.15000000000000002, 0.3}},
        {{0.44029999999999997, -0.9200999999999999, 1.2494999999999998, 2.0004500000000003},
         {-0.06999999999999999, -0.135, 0.29}}}},
      {"lr=0.1 momentum=0.9 nesterov",
       {.lr = 0.1, .momentum = 0.9, .nesterov = true},
       {{{0.462, -0.924, 1.31, 1.9905}, {-0.09, -0.10500000000000001, 0.3}},
        {{0.46480000000000005, -0.9486, 1.21, 2.02445}, {-0.09, -0.10500000000000001, 0.3}},
        {{0.40132000000000007, -0.94374, 1.2429999999999999, 2.018005}, {-0.095, -0.17850000000000002, 0.262}}}},
      {"lr=0.1 weight_decay=0.1",
       {.lr = 0.1, .weight_decay = 0.1},
       {{{0.475, -0.95, 1.385, 1.975}, {-0.0010000000000000009, -0.148, 0.297}},
        {{0.48024999999999995, -0.9704999999999999, 1.36115, 1.9752500000000002},
         {-0.0010000000000000009, -0.148, 0.297}},
        {{0.44544749999999994, -0.960795, 1.4075385, 1.9454975}, {0.03901, -0.20651999999999998, 0.27403}}}},
      {"lr=0.1 momentum=0.9 weight_decay=0.1",
       {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1},
       {{{0.475, -0.95, 1.385, 1.975}, {-0.0010000000000000009, -0.148, 0.297}},
        {{0.45775, -0.9255, 1.25765, 1.95275}, {-0.0010000000000000009, -0.148, 0.297}},
        {{0.4076475, -0.894195, 1.1904584999999999, 1.9031974999999999},
         {-0.051890000000000006, -0.15971999999999997, 0.27132999999999996}}}},
  };
  for (const TorchCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Trajectory trajectory = three_steps(c.options);
    for (size_t k = 0; k < 3; ++k) {
      SCOPED_TRACE(::testing::Message() << "step " << k + 1);
      EXPECT_THAT(trajectory[k].first, Pointwise(DoubleNear(1e-14), c.expected[k].first));
      EXPECT_THAT(trajectory[k].second, Pointwise(DoubleNear(1e-14), c.expected[k].second));
    }
  }
}

TEST(SGD, LearningRateAsSecondArgument) {
  const Tensor p = leaf({1.0}, {1});
  EXPECT_EQ(SGD({p}, 0.25).lr(0), 0.25);
  EXPECT_EQ(SGD({p}, 1).lr(0), 1.0);
  EXPECT_EQ(SGD({p}, {}).lr(0), 1e-3);  // default options, not lr = 0
  EXPECT_EQ(SGD({p}, {.lr = 0.5, .momentum = 0.9}).param_groups()[0].options.momentum, 0.9);
  EXPECT_EQ(SGD({p}, {.lr = 0.5}).num_param_groups(), 1u);
}

TEST(SGD, ZeroGradResetsGradsToUndefined) {
  const Tensor w = leaf({1.0, 2.0}, {2});
  const Tensor b = leaf({3.0}, {1});
  SGD sgd({w, b}, 0.1);
  sum(mul(w, w)).backward();
  ASSERT_TRUE(w.grad().defined());
  sgd.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  sgd.step();  // no gradients: nothing changes
  EXPECT_EQ(values(w), (std::vector<double>{1, 2}));
}

TEST(SGD, UpdatesFloat32Parameters) {
  Tensor p = from_vector<float>({1.0f, -2.0f});
  p.requires_grad_();
  SGD sgd({p}, {.lr = 0.5, .momentum = 0.5});
  p.set_grad(from_vector<float>({2.0f, 4.0f}));
  sgd.step();
  sgd.step();  // b = 0.5 * g + g = 1.5 g
  EXPECT_EQ(p.dtype(), kFloat32);
  EXPECT_EQ(values(p), (std::vector<double>{1 - 1 - 1.5, -2 - 2 - 3}));
}

TEST(SGD, StepDoesNotRecordAGraph) {
  const Tensor w = leaf({1.0, 2.0}, {2});
  SGD sgd({w}, 0.1);
  sum(mul(w, w)).backward();
  sgd.step();
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(w.grad_fn(), nullptr);
}

TEST(SGD, BadHyperParametersAreErrors) {
  const Tensor p = leaf({1.0}, {1});
  EXPECT_ERROR_CONTAINS(SGD({p}, -0.1), "SGD: expected lr >= 0, found -0.1");
  EXPECT_ERROR_CONTAINS(SGD({p}, std::numeric_limits<double>::quiet_NaN()), "SGD: expected lr >= 0, found nan");
  EXPECT_ERROR_CONTAINS(SGD({p}, {.lr = 0.1, .momentum = -0.9}), "SGD: expected momentum >= 0, found -0.9");
  EXPECT_ERROR_CONTAINS(SGD({p}, {.lr = 0.1, .weight_decay = -1}), "SGD: expected weight_decay >= 0, found -1");
  EXPECT_ERROR_CONTAINS(SGD({p}, {.lr = 0.1, .nesterov = true}),
                        "SGD: Nesterov momentum requires a momentum > 0 and zero dampening, found momentum 0 and "
                        "dampening 0");
  EXPECT_ERROR_CONTAINS(SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                        "found momentum 0.9 and dampening 0.1");
}

TEST(SGD, BadParametersAreErrorsNamingTheirIndex) {
  const Tensor p = leaf({1.0}, {1});
  EXPECT_ERROR_CONTAINS(SGD({}, 0.1), "SGD: got an empty parameter list");
  EXPECT_ERROR_CONTAINS(SGD({p, Tensor()}, 0.1), "SGD: parameter 1 is an undefined tensor");
  EXPECT_ERROR_CONTAINS(SGD({p, from_vector<double>({1, 2})}, 0.1),
                        "SGD: parameter 1 (a float64 tensor of shape [2] on cpu) does not require grad; only leaves "
                        "that require grad can be optimized");
  EXPECT_ERROR_CONTAINS(SGD({p, leaf({2.0}, {1}), mul(p, 2.0)}, 0.1),
                        "SGD: parameter 2 (a float64 tensor of shape [1] on cpu) is not a leaf (it was computed by a "
                        "recorded op); optimize the leaves it was computed from");
  EXPECT_ERROR_CONTAINS(SGD({leaf({2.0}, {1}), p, p}, 0.1), "SGD: parameter 2 is the same tensor as parameter 1");
}

}  // namespace
}  // namespace distgrad::optim
