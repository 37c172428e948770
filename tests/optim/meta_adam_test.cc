// MetaAdam: a first step and its derivative worked out by hand, two inner steps against
// torchopt.MetaAdam on a linear model, gradcheck of initial parameters -> outer loss through
// two inner steps, per-parameter step counts, and every error by message.
#include "optim/meta_adam.h"

#include <cmath>
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

TEST(MetaAdam, FirstStepAndItsDerivativeByHand) {
  // Inner loss 0.5 (p - 3)^2 at p0 = 1: g = -2. After bias correction m = g and v = g^2, so the
  // update is g / (|g| + eps) = -2 / 2.5 with eps = 0.5, and p1 = 1 + 0.1 * 0.8 = 1.08.
  // d update / d g = 1 / (|g| + eps) - g / (|g| + eps)^2 * sign(g) = 0.4 - 0.32 = 0.08, and
  // d g / d p0 = 1, so d p1 / d p0 = 1 - 0.1 * 0.08 = 0.992.
  const Tensor p0 = leaf({1.0}, {1});
  MetaAdam inner(nn::ParamDict{{"p", p0}}, {.lr = 0.1, .eps = 0.5});
  const Tensor p1 = inner.step(sum(mul(pow(sub(p0, 3.0), 2.0), 0.5))).at("p");
  EXPECT_NEAR(p1.item<double>(), 1.08, 1e-15);
  EXPECT_NEAR(autograd::grad({sum(p1)}, {p0})[0].item<double>(), 0.992, 1e-15);
}

TEST(MetaAdam, EpsRootGoesInsideTheSquareRoot) {
  // g = -2, v_hat = 4: update = -2 / (sqrt(4 + 5) + 0) = -2 / 3, p1 = 1 + 0.1 * 2 / 3.
  const Tensor p0 = leaf({1.0}, {1});
  MetaAdam inner(nn::ParamDict{{"p", p0}}, {.lr = 0.1, .eps = 0, .eps_root = 5});
  EXPECT_NEAR(inner.step(sum(mul(pow(sub(p0, 3.0), 2.0), 0.5))).at("p").item<double>(), 1 + 0.2 / 3, 1e-15);
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

LinearRun linear_run(const AdamOptions& options) {
  const Tensor w0 = leaf({0.3, -0.7}, {2});
  const Tensor b0 = leaf({0.2}, {1});
  MetaAdam inner(nn::ParamDict{{"w", w0}, {"b", b0}}, options);
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

void expect_run(const LinearRun& run, const LinearRun& expected, double tolerance) {
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_THAT(run.steps[k].first, Pointwise(DoubleNear(tolerance), expected.steps[k].first)) << "step " << k + 1;
    EXPECT_THAT(run.steps[k].second, Pointwise(DoubleNear(tolerance), expected.steps[k].second)) << "step " << k + 1;
  }
  EXPECT_NEAR(run.query_loss, expected.query_loss, tolerance);
  EXPECT_THAT(run.meta_gradient.first, Pointwise(DoubleNear(tolerance), expected.meta_gradient.first));
  EXPECT_THAT(run.meta_gradient.second, Pointwise(DoubleNear(tolerance), expected.meta_gradient.second));
}

struct TorchoptCase {
  const char* name;
  AdamOptions options;
  LinearRun expected;
};

// Computed with torchopt 0.7.3 (torch 2.15), float64, printed with repr():
//   class Net(nn.Module): w = Parameter([0.3, -0.7]), b = Parameter([0.2]); forward(x) = x @ w + b
//   net = Net(); w0, b0 = net.w, net.b; opt = torchopt.MetaAdam(net, lr=0.1, ...)
//   for _ in range(2): opt.step(((net(X) - Y) ** 2).mean())      # values after each step
//   outer = ((net(XQ) - YQ) ** 2).mean(); torch.autograd.grad(outer, [w0, b0])
// with X, Y, XQ, YQ as in support_loss and query_loss.
//
// torchopt 0.7.3 computes the bias corrections 1 - beta^t as pow(beta, count) with count an
// int64 tensor, which gives a float32 value; we compute them in double, as torch.optim.Adam
// does. The numbers below were therefore taken with torchopt's _bias_correction replaced by
// one that computes t.div(1 - decay ** count.item()) (in double), and match to rounding; the
// unpatched torchopt numbers differ from them by up to 1.1e-5 (checked in
// MatchesUnpatchedTorchoptUpToItsFloat32BiasCorrection).
const std::vector<TorchoptCase>& torchopt_cases() {
  static const std::vector<TorchoptCase> cases = {
      {"lr=0.1",
       {.lr = 0.1},
       {{{{0.39999999951503395, -0.6000000002775208}, {0.10000000178571428}},
         {{0.49966005209161546, -0.5008279060628125}, {0.0018933202217062822}}},
        3.4072029721488555,
        {{-4.618682475437504, -3.241551074941177}, {-1.7252447931238308}}}},
      {"lr=0.1 betas=(0.5, 0.9) eps=1e-3 eps_root=1e-4 weight_decay=0.2",
       {.lr = 0.1, .betas = {0.5, 0.9}, .eps = 1e-3, .eps_root = 1e-4, .weight_decay = 0.2},
       {{{{0.39994882865256026, -0.6000270636546028}, {0.10018022917912575}},
         {{0.4982862443357734, -0.5028630318554994}, {0.00616141910295262}}},
        3.4127318530091553,
        {{-4.607259579918735, -3.2299966025404694}, {-1.685851932895325}}}},
  };
  return cases;
}

TEST(MetaAdam, MatchesTorchopt) {
  for (const TorchoptCase& c : torchopt_cases()) {
    SCOPED_TRACE(c.name);
    expect_run(linear_run(c.options), c.expected, 1e-12);
  }
}

TEST(MetaAdam, MatchesUnpatchedTorchoptUpToItsFloat32BiasCorrection) {
  // torchopt 0.7.3 as released (same script, no patch).
  const LinearRun default_options = {{{{0.39999933194110593, -0.6000006678514515}, {0.10000066935962518}},
                                      {{0.4996583847129661, -0.500829562936139}, {0.0018949523526439332}}},
                                     3.407213217361916,
                                     {{-4.618688058902515, -3.2415571169269026}, {-1.7252462065229708}}};
  const LinearRun other_options = {{{{0.3999488405611429, -0.6000270517401687}, {0.10018021730277815}},
                                    {{0.4982862708245072, -0.5028630057257328}, {0.006161394064681774}}},
                                   3.4127316890772694,
                                   {{-4.607259486532855, -3.2299965019620585}, {-1.6858518978797403}}};
  expect_run(linear_run(torchopt_cases()[0].options), default_options, 2e-5);
  expect_run(linear_run(torchopt_cases()[1].options), other_options, 2e-5);
}

TEST(MetaAdam, MomentRequiresGradDoesNotChangeTheResults) {
  const LinearRun with = linear_run({.lr = 0.1});
  const LinearRun without = linear_run({.lr = 0.1, .moment_requires_grad = false});
  EXPECT_EQ(with.steps, without.steps);
  EXPECT_EQ(with.meta_gradient, without.meta_gradient);
}

autograd::DifferentiableFunction two_inner_steps(AdamOptions options) {
  return [options](const TensorList& x) {
    MetaAdam inner(nn::ParamDict{{"w", x[0]}, {"b", x[1]}}, options);
    for (int i = 0; i < 2; ++i) inner.step(support_loss(inner.params()));
    return TensorList{query_loss(inner.params())};
  };
}

TEST(MetaAdam, GradcheckThroughTwoInnerSteps) {
  for (const TorchoptCase& c : torchopt_cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(autograd::gradcheck(two_inner_steps(c.options), {leaf({0.3, -0.7}, {2}), leaf({0.2}, {1})}));
  }
  EXPECT_TRUE(autograd::gradgradcheck(two_inner_steps(torchopt_cases()[1].options),
                                      {leaf({0.3, -0.7}, {2}), leaf({0.2}, {1})}));
}

TEST(MetaAdam, StepCountsArePerParameter) {
  // "late" gets no gradient at the first step: its first update, at the second step, is a
  // first Adam step (bias correction with t = 1), which moves it by lr.
  const Tensor w = leaf({1.0}, {1});
  const Tensor late = leaf({5.0}, {1});
  const Tensor buffer = from_vector<double>({7.0});
  MetaAdam inner(nn::ParamDict{{"w", w}, {"late", late}, {"buffer", buffer}}, 0.1);
  const nn::ParamDict p1 = inner.step(sum(mul(inner.params().at("w"), 3.0)));
  EXPECT_TRUE(p1.at("late").is_same(late));
  EXPECT_TRUE(p1.at("buffer").is_same(buffer));
  const nn::ParamDict p2 = inner.step(sum(mul(add(inner.params().at("w"), inner.params().at("late")), 2.0)));
  EXPECT_NEAR(p2.at("late").item<double>(), 5 - 0.1, 1e-8);
  EXPECT_TRUE(p2.at("buffer").is_same(buffer));
}

TEST(MetaAdam, Defaults) {
  const nn::ParamDict params{{"w", leaf({1.0}, {1})}};
  const AdamOptions options = MetaAdam(params, {}).options();
  EXPECT_EQ(options.lr, 1e-3);
  EXPECT_EQ(options.betas[0], 0.9);
  EXPECT_EQ(options.betas[1], 0.999);
  EXPECT_EQ(options.eps, 1e-8);
  EXPECT_EQ(options.eps_root, 0);
  EXPECT_EQ(options.weight_decay, 0);
  EXPECT_TRUE(options.moment_requires_grad);
  EXPECT_EQ(MetaAdam(params, 0.05).options().lr, 0.05);
}

TEST(MetaAdam, Errors) {
  const Tensor w = leaf({1.0, 2.0}, {2});
  const nn::ParamDict params{{"w", w}};
  MetaAdam inner(params, 0.1);
  EXPECT_ERROR_CONTAINS(inner.step(mul(w, 2.0)),
                        "MetaAdam.step: expected a scalar loss (one element), found a float64 tensor of shape [2] on "
                        "cpu");
  EXPECT_ERROR_CONTAINS(inner.step(sum(w.detach())), "MetaAdam.step: the loss", "does not require grad");
  EXPECT_ERROR_CONTAINS(MetaAdam(nn::ParamDict{{"w", Tensor()}}, 0.1),
                        "MetaAdam: parameter 'w' is an undefined tensor");
  EXPECT_ERROR_CONTAINS(MetaAdam(params, -1), "MetaAdam: expected lr >= 0, found -1");
  EXPECT_ERROR_CONTAINS(MetaAdam(params, {.betas = {1.0, 0.999}}), "MetaAdam: expected 0 <= betas[0] < 1, found 1");
  EXPECT_ERROR_CONTAINS(MetaAdam(params, {.betas = {0.9, -0.5}}), "MetaAdam: expected 0 <= betas[1] < 1, found -0.5");
  EXPECT_ERROR_CONTAINS(MetaAdam(params, {.eps = -1}), "MetaAdam: expected eps >= 0, found -1");
  EXPECT_ERROR_CONTAINS(MetaAdam(params, {.eps_root = -1e-8}), "MetaAdam: expected eps_root >= 0, found -1e-08");
  EXPECT_ERROR_CONTAINS(MetaAdam(params, {.weight_decay = -0.1}), "MetaAdam: expected weight_decay >= 0, found -0.1");
}

}  // namespace
}  // namespace distgrad::optim
