// MetaSGD: inner steps and meta-gradients worked out by hand on a quadratic, the same inner
// loop against torchopt.MetaSGD on a linear model, gradcheck of initial parameters -> outer
// loss through two inner steps, pass-through entries, and every error by message.
#include "optim/meta_sgd.h"

#include <limits>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/core/test_util.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad::optim {
namespace {

using autograd::TensorList;
using ::testing::DoubleNear;
using testing::leaf;
using ::testing::Pointwise;
using testing::values;

// --- a scalar quadratic, by hand: inner loss 0.5 (p - 3)^2 (gradient p - 3), outer loss
// 0.5 p^2, p0 = 1, lr = 0.1.

struct ScalarRun {
  double p1, p2, meta_gradient;  // p after each inner step; d outer / d p0
};

ScalarRun scalar_run(const SGDOptions& options) {
  const Tensor p0 = leaf({1.0}, {1});
  MetaSGD inner(nn::ParamDict{{"p", p0}}, options);
  auto inner_loss = [](const nn::ParamDict& p) { return sum(mul(pow(sub(p.at("p"), 3.0), 2.0), 0.5)); };
  const double p1 = inner.step(inner_loss(inner.params())).at("p").item<double>();
  const Tensor p2 = inner.step(inner_loss(inner.params())).at("p");
  const Tensor outer = sum(mul(pow(p2, 2.0), 0.5));
  return {p1, p2.item<double>(), autograd::grad({outer}, {p0})[0].item<double>()};
}

TEST(MetaSGD, PlainStepsAndMetaGradientByHand) {
  // p' = p - 0.1 (p - 3) = 0.9 p + 0.3: p1 = 1.2, p2 = 1.38, d p2 / d p0 = 0.81.
  const ScalarRun run = scalar_run({.lr = 0.1});
  EXPECT_NEAR(run.p1, 1.2, 1e-15);
  EXPECT_NEAR(run.p2, 1.38, 1e-15);
  EXPECT_NEAR(run.meta_gradient, 1.38 * 0.81, 1e-15);
}

TEST(MetaSGD, MomentumStepsAndMetaGradientByHand) {
  // b1 = g0 = -2, p1 = 1.2; g1 = -1.8, b2 = 0.9 * -2 - 1.8 = -3.6, p2 = 1.2 + 0.36 = 1.56.
  // d/dp0: g0 = 1, b1 = 1, p1 = 0.9, g1 = 0.9, b2 = 0.9 + 0.9, p2 = 0.9 - 0.1 * 1.8 = 0.72.
  const ScalarRun run = scalar_run({.lr = 0.1, .momentum = 0.9});
  EXPECT_NEAR(run.p1, 1.2, 1e-15);
  EXPECT_NEAR(run.p2, 1.56, 1e-15);
  EXPECT_NEAR(run.meta_gradient, 1.56 * 0.72, 1e-14);
}

TEST(MetaSGD, NesterovStepsAndMetaGradientByHand) {
  // b1 = -2, step -2 + 0.9 * -2 = -3.8, p1 = 1.38; g1 = -1.62, b2 = -1.8 - 1.62 = -3.42,
  // step -1.62 + 0.9 * -3.42 = -4.698, p2 = 1.38 + 0.4698 = 1.8498.
  // d/dp0: b1 = 1, step 1.9, p1 = 0.81; g1 = 0.81, b2 = 1.71, step 0.81 + 1.539 = 2.349,
  // p2 = 0.81 - 0.2349 = 0.5751.
  const ScalarRun run = scalar_run({.lr = 0.1, .momentum = 0.9, .nesterov = true});
  EXPECT_NEAR(run.p1, 1.38, 1e-15);
  EXPECT_NEAR(run.p2, 1.8498, 1e-14);
  EXPECT_NEAR(run.meta_gradient, 1.8498 * 0.5751, 1e-14);
}

TEST(MetaSGD, WeightDecayStepsAndMetaGradientByHand) {
  // step (p - 3) + 0.1 p: p' = 0.89 p + 0.3; p1 = 1.19, p2 = 1.3591, d p2 / d p0 = 0.7921.
  const ScalarRun run = scalar_run({.lr = 0.1, .weight_decay = 0.1});
  EXPECT_NEAR(run.p1, 1.19, 1e-15);
  EXPECT_NEAR(run.p2, 1.3591, 1e-15);
  EXPECT_NEAR(run.meta_gradient, 1.3591 * 0.7921, 1e-14);
}

// --- a linear model y = x w + b, shared with the torchopt reference below.

Tensor mse(const nn::ParamDict& p, const Tensor& x, const Tensor& y) {
  return mean(pow(sub(add(matmul(x, p.at("w")), p.at("b")), y), 2.0));
}
Tensor support_loss(const nn::ParamDict& p) {
  return mse(p, from_vector<double>({1.0, 2.0, -1.0, 0.5, 0.3, -2.0}, {3, 2}), from_vector<double>({1.0, -2.0, 0.5}));
}
Tensor query_loss(const nn::ParamDict& p) {
  return mse(p, from_vector<double>({0.5, -1.0, 2.0, 1.0}, {2, 2}), from_vector<double>({0.0, 3.0}));
}

struct LinearRun {
  std::vector<std::pair<std::vector<double>, std::vector<double>>> steps;  // (w, b) after each inner step
  double query_loss;
  std::pair<std::vector<double>, std::vector<double>> meta_gradient;  // d query loss / d (w0, b0)
};

LinearRun linear_run(const SGDOptions& options) {
  const Tensor w0 = leaf({0.3, -0.7}, {2});
  const Tensor b0 = leaf({0.2}, {1});
  MetaSGD inner(nn::ParamDict{{"w", w0}, {"b", b0}}, options);
  LinearRun run;
  for (int i = 0; i < 2; ++i) {
    const nn::ParamDict p = inner.step(support_loss(inner.params()));
    run.steps.emplace_back(values(p.at("w")), values(p.at("b")));
  }
  const Tensor outer = query_loss(inner.params());
  run.query_loss = outer.item<double>();
  const TensorList grads = autograd::grad({outer}, {w0, b0});
  run.meta_gradient = {values(grads[0]), values(grads[1])};
  return run;
}

struct TorchoptCase {
  const char* name;
  SGDOptions options;
  LinearRun expected;
};

TEST(MetaSGD, MatchesTorchopt) {
  // Computed with torchopt 0.7.3 (torch 2.15), float64, printed with repr():
  //   class Net(nn.Module): w = Parameter([0.3, -0.7]), b = Parameter([0.2]); forward(x) = x @ w + b
  //   net = Net(); w0, b0 = net.w, net.b; opt = torchopt.MetaSGD(net, lr=0.1, ...)
  //   for _ in range(2): opt.step(((net(X) - Y) ** 2).mean())      # values after each step
  //   outer = ((net(XQ) - YQ) ** 2).mean(); torch.autograd.grad(outer, [w0, b0])
  // with X, Y, XQ, YQ as in support_loss and query_loss.
  const std::vector<TorchoptCase> cases = {
      {"lr=0.1",
       {.lr = 0.1},
       {{{{0.5062, -0.3396666666666666}, {0.14400000000000002}},
         {{0.6631694666666667, -0.18802199999999997}, {0.08306488888888888}}},
        1.7633478532767537,
        {{-2.2024402093806863, -0.19196964960192586}, {-0.5563924118944691}}}},
      {"lr=0.1 momentum=0.9",
       {.lr = 0.1, .momentum = 0.9},
       {{{{0.5062, -0.3396666666666666}, {0.14400000000000002}},
         {{0.8487494666666666, 0.13627800000000007}, {0.032664888888888896}}},
        0.6939210803487537,
        {{-1.072868713767353, 0.7538450555314072}, {-0.16895409429446923}}}},
      {"lr=0.1 momentum=0.9 nesterov",
       {.lr = 0.1, .momentum = 0.9, .nesterov = true},
       {{{{0.6917800000000001, -0.01536666666666664}, {0.09360000000000004}},
         {{1.0728597746666668, 0.20777057999999998}, {-0.0759757511111111}}},
        0.29291722663036535,
        {{-0.43289762835503015, 0.6083118096218743}, {0.03032162986568876}}}},
      {"lr=0.1 momentum=0.5 dampening=0.3 weight_decay=0.2",
       {.lr = 0.1, .momentum = 0.5, .dampening = 0.3, .weight_decay = 0.2},
       {{{{0.5002, -0.3256666666666666}, {0.14}}, {{0.7032290266666666, -0.03283406666666666}, {0.06570275555555558}}},
        1.3191686212225762,
        {{-1.696304991819627, 0.3990687621365381}, {-0.3951232934206158}}}},
  };
  for (const TorchoptCase& c : cases) {
    SCOPED_TRACE(c.name);
    const LinearRun run = linear_run(c.options);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_THAT(run.steps[k].first, Pointwise(DoubleNear(1e-14), c.expected.steps[k].first)) << "step " << k + 1;
      EXPECT_THAT(run.steps[k].second, Pointwise(DoubleNear(1e-14), c.expected.steps[k].second)) << "step " << k + 1;
    }
    EXPECT_NEAR(run.query_loss, c.expected.query_loss, 1e-13);
    EXPECT_THAT(run.meta_gradient.first, Pointwise(DoubleNear(1e-13), c.expected.meta_gradient.first));
    EXPECT_THAT(run.meta_gradient.second, Pointwise(DoubleNear(1e-13), c.expected.meta_gradient.second));
  }
}

// initial (w, b) -> query loss after two inner steps, for gradcheck.
autograd::DifferentiableFunction two_inner_steps(SGDOptions options) {
  return [options](const TensorList& x) {
    MetaSGD inner(nn::ParamDict{{"w", x[0]}, {"b", x[1]}}, options);
    for (int i = 0; i < 2; ++i) inner.step(support_loss(inner.params()));
    return TensorList{query_loss(inner.params())};
  };
}

TEST(MetaSGD, GradcheckThroughTwoInnerSteps) {
  for (const SGDOptions& options : {SGDOptions{.lr = 0.1}, SGDOptions{.lr = 0.1, .momentum = 0.9},
                                    SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true},
                                    SGDOptions{.lr = 0.1, .momentum = 0.5, .dampening = 0.3, .weight_decay = 0.2}}) {
    SCOPED_TRACE(::testing::Message() << "momentum " << options.momentum << " nesterov " << options.nesterov);
    EXPECT_TRUE(autograd::gradcheck(two_inner_steps(options), {leaf({0.3, -0.7}, {2}), leaf({0.2}, {1})}));
  }
  // Second order too: the meta-gradient itself is differentiable.
  EXPECT_TRUE(autograd::gradgradcheck(two_inner_steps({.lr = 0.1, .momentum = 0.9}),
                                      {leaf({0.3, -0.7}, {2}), leaf({0.2}, {1})}));
}

TEST(MetaSGD, DifferentiatesThroughNonLeafInitialParameters) {
  // MAML clones the module's parameters with a gradient link (module_clone(kClone)): the
  // meta-gradient reaches the leaves they were cloned from.
  const Tensor w = leaf({0.3, -0.7}, {2});
  const Tensor b = leaf({0.2}, {1});
  MetaSGD inner(nn::ParamDict{{"w", clone(w)}, {"b", clone(b)}}, {.lr = 0.1, .momentum = 0.9});
  for (int i = 0; i < 2; ++i) inner.step(support_loss(inner.params()));
  query_loss(inner.params()).backward();
  const LinearRun reference = linear_run({.lr = 0.1, .momentum = 0.9});
  EXPECT_THAT(values(w.grad()), Pointwise(DoubleNear(1e-15), reference.meta_gradient.first));
  EXPECT_THAT(values(b.grad()), Pointwise(DoubleNear(1e-15), reference.meta_gradient.second));
}

TEST(MetaSGD, EntriesThatDoNotRequireGradPassThrough) {
  const Tensor w = leaf({1.0, 2.0}, {2});
  const Tensor scale = from_vector<double>({2.0, 3.0});  // a buffer
  const Tensor unused = leaf({5.0}, {1});                // requires grad, but the loss ignores it
  MetaSGD inner(nn::ParamDict{{"w", w}, {"scale", scale}, {"unused", unused}}, {.lr = 0.1, .momentum = 0.9});
  auto loss = [](const nn::ParamDict& p) { return sum(mul(p.at("w"), p.at("scale"))); };
  const nn::ParamDict p1 = inner.step(loss(inner.params()));
  EXPECT_EQ(p1.keys(), (std::vector<std::string>{"w", "scale", "unused"}));
  EXPECT_TRUE(p1.at("scale").is_same(scale));
  EXPECT_TRUE(p1.at("unused").is_same(unused));
  EXPECT_EQ(values(p1.at("w")), (std::vector<double>{1 - 0.2, 2 - 0.3}));
  EXPECT_FALSE(p1.at("w").is_leaf());
  // Once used, "unused" takes a first momentum step: its buffer starts at its gradient.
  const nn::ParamDict p2 = inner.step(sum(mul(inner.params().at("unused"), 4.0)));
  EXPECT_EQ(values(p2.at("unused")), (std::vector<double>{5 - 0.4}));
  EXPECT_TRUE(p2.at("w").is_same(p1.at("w")));
  EXPECT_TRUE(inner.params().at("unused").is_same(p2.at("unused")));
}

TEST(MetaSGD, NothingToOptimizeReturnsTheParameters) {
  const Tensor buffer = from_vector<double>({1.0});
  MetaSGD inner(nn::ParamDict{{"buffer", buffer}}, 0.1);
  EXPECT_TRUE(inner.step(sum(buffer)).at("buffer").is_same(buffer));
}

TEST(MetaSGD, LearningRateAsSecondArgument) {
  const nn::ParamDict params{{"w", leaf({1.0}, {1})}};
  EXPECT_EQ(MetaSGD(params, 0.01).options().lr, 0.01);  // dg::optim::MetaSGD inner(params, 0.01)
  EXPECT_EQ(MetaSGD(params, {}).options().lr, 1e-3);
}

TEST(MetaSGD, Errors) {
  const Tensor w = leaf({1.0, 2.0}, {2});
  const nn::ParamDict params{{"w", w}};
  MetaSGD inner(params, 0.1);
  EXPECT_ERROR_CONTAINS(
      inner.step(mul(w, 2.0)),
      "MetaSGD.step: expected a scalar loss (one element), found a float64 tensor of shape [2] on cpu");
  EXPECT_ERROR_CONTAINS(inner.step(scalar_tensor(1.0)), "MetaSGD.step: the loss (a float32 tensor of shape [] on cpu) ",
                        "does not require grad");
  EXPECT_ERROR_CONTAINS(inner.step(Tensor()), "MetaSGD.step: the loss is an undefined tensor");
  EXPECT_ERROR_CONTAINS(MetaSGD(nn::ParamDict{{"w", w}, {"b", Tensor()}}, 0.1),
                        "MetaSGD: parameter 'b' is an undefined tensor");
  EXPECT_ERROR_CONTAINS(MetaSGD(params, -0.1), "MetaSGD: expected lr >= 0, found -0.1");
  EXPECT_ERROR_CONTAINS(MetaSGD(params, std::numeric_limits<double>::quiet_NaN()),
                        "MetaSGD: expected lr >= 0, found nan");
  EXPECT_ERROR_CONTAINS(MetaSGD(params, {.momentum = -1}), "MetaSGD: expected momentum >= 0, found -1");
  EXPECT_ERROR_CONTAINS(MetaSGD(params, {.weight_decay = -1}), "MetaSGD: expected weight_decay >= 0, found -1");
  EXPECT_ERROR_CONTAINS(MetaSGD(params, {.nesterov = true}),
                        "MetaSGD: Nesterov momentum requires a momentum > 0 and zero dampening, found momentum 0 and "
                        "dampening 0");
  EXPECT_ERROR_CONTAINS(MetaSGD(params, {.momentum = 0.9, .dampening = 0.5, .nesterov = true}),
                        "found momentum 0.9 and dampening 0.5");
}

}  // namespace
}  // namespace distgrad::optim
