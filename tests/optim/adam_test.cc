// Adam and AdamW: their first steps worked out by hand (amsgrad and decoupled weight decay
// included), the same steps against torch.optim.Adam / AdamW, and every hyper-parameter error.
#include "optim/adam.h"

#include <cmath>
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

// The values of a one-element parameter p0 = 1 after a step with each of `grads`.
template <typename Opt, typename Options>
std::vector<double> scalar_steps(const Options& options, const std::vector<double>& grads) {
  const Tensor p = leaf({1.0}, {1});
  Opt optimizer({p}, options);
  std::vector<double> trajectory;
  for (double g : grads) {
    p.set_grad(from_vector<double>({g}));
    optimizer.step();
    trajectory.push_back(p.item<double>());
  }
  return trajectory;
}

// The Adam updates (lr = 0.1, betas 0.9 / 0.999, eps 1e-8) for gradients 0.5, -1, 2, by hand:
//   step 1: m = 0.05, v = 0.00025, 1 - beta1 = 0.1, 1 - beta2 = 0.001
//   step 2: m = 0.045 - 0.1 = -0.055, v = 0.00024975 + 0.001 = 0.00124975, 1 - beta1^2 = 0.19,
//           1 - beta2^2 = 0.001999
//   step 3: m = -0.0495 + 0.2 = 0.1505, v = 0.00124850025 + 0.004 = 0.00524850025,
//           1 - beta1^3 = 0.271, 1 - beta2^3 = 0.002997001
const std::vector<double> kHandUpdates = {
    0.1 * (0.05 / 0.1) / (std::sqrt(0.00025 / 0.001) + 1e-8),
    0.1 * (-0.055 / 0.19) / (std::sqrt(0.00124975 / 0.001999) + 1e-8),
    0.1 * (0.1505 / 0.271) / (std::sqrt(0.00524850025 / 0.002997001) + 1e-8),
};

TEST(Adam, StepsByHand) {
  const double p1 = 1 - kHandUpdates[0];
  const double p2 = p1 - kHandUpdates[1];
  const double p3 = p2 - kHandUpdates[2];
  EXPECT_THAT((scalar_steps<Adam>(AdamOptions{.lr = 0.1}, {0.5, -1.0, 2.0})),
              Pointwise(DoubleNear(1e-13), {p1, p2, p3}));
  EXPECT_NEAR(p1, 1 - 0.1, 1e-7);  // the first step moves by lr (times the sign of the gradient)
}

TEST(Adam, AmsgradStepsByHand) {
  // betas 0.5 / 0.9, gradients 1, 0.1, 0.1: v = 0.1, 0.091, 0.0829 decreases, so v_max stays 0.1.
  // m = 0.5, 0.3, 0.2; 1 - beta1^t = 0.5, 0.75, 0.875; 1 - beta2^t = 0.1, 0.19, 0.271.
  const double p1 = 1 - 0.1 * (0.5 / 0.5) / (std::sqrt(0.1 / 0.1) + 1e-8);
  const double p2 = p1 - 0.1 * (0.3 / 0.75) / (std::sqrt(0.1 / 0.19) + 1e-8);
  const double p3 = p2 - 0.1 * (0.2 / 0.875) / (std::sqrt(0.1 / 0.271) + 1e-8);
  EXPECT_THAT((scalar_steps<Adam>(AdamOptions{.lr = 0.1, .betas = {0.5, 0.9}, .amsgrad = true}, {1.0, 0.1, 0.1})),
              Pointwise(DoubleNear(1e-13), {p1, p2, p3}));
  // Without amsgrad the second step divides by sqrt(0.091 / 0.19) instead.
  const double plain2 = p1 - 0.1 * (0.3 / 0.75) / (std::sqrt(0.091 / 0.19) + 1e-8);
  EXPECT_NEAR((scalar_steps<Adam>(AdamOptions{.lr = 0.1, .betas = {0.5, 0.9}}, {1.0, 0.1})[1]), plain2, 1e-13);
}

TEST(AdamW, DecoupledWeightDecayStepsByHand) {
  // Each step first scales p by 1 - lr * weight_decay = 0.99, then takes Adam's step: the
  // decay does not pass through the moments.
  const double p1 = 0.99 * 1 - kHandUpdates[0];
  const double p2 = 0.99 * p1 - kHandUpdates[1];
  const double p3 = 0.99 * p2 - kHandUpdates[2];
  EXPECT_THAT((scalar_steps<AdamW>(AdamWOptions{.lr = 0.1, .weight_decay = 0.1}, {0.5, -1.0, 2.0})),
              Pointwise(DoubleNear(1e-13), {p1, p2, p3}));
}

// The problem shared with torch: w [2, 2] and b [3] with fixed gradients; b has no gradient
// at step 2, so it must be skipped (its moments and step count left as they are).
using Trajectory = std::vector<std::pair<std::vector<double>, std::vector<double>>>;  // (w, b) after each step

template <typename Opt, typename Options>
Trajectory three_steps(const Options& options) {
  const Tensor w = leaf({0.5, -1.0, 1.5, 2.0}, {2, 2});
  const Tensor b = leaf({0.1, -0.2, 0.3}, {3});
  const std::vector<std::vector<double>> w_grads = {
      {0.2, -0.4, 1.0, 0.05}, {-0.1, 0.3, 0.1, -0.2}, {0.3, 0.0, -0.6, 0.1}};
  const std::vector<std::vector<double>> b_grads = {{1.0, -0.5, 0.0}, {}, {-0.4, 0.6, 0.2}};
  Opt optimizer({w, b}, options);
  Trajectory trajectory;
  for (size_t k = 0; k < 3; ++k) {
    optimizer.zero_grad();
    w.set_grad(from_vector(w_grads[k], {2, 2}));
    if (!b_grads[k].empty()) b.set_grad(from_vector(b_grads[k]));
    optimizer.step();
    trajectory.emplace_back(values(w), values(b));
  }
  return trajectory;
}

void expect_trajectory(const Trajectory& actual, const Trajectory& expected) {
  for (size_t k = 0; k < expected.size(); ++k) {
    SCOPED_TRACE(::testing::Message() << "step " << k + 1);
    EXPECT_THAT(actual[k].first, Pointwise(DoubleNear(1e-13), expected[k].first));
    EXPECT_THAT(actual[k].second, Pointwise(DoubleNear(1e-13), expected[k].second));
  }
}

// The expected trajectories below were computed with torch 2.15's torch.optim.Adam / AdamW
// (foreach=False) on the same initial values and gradients (float64), printed with repr():
//   w = torch.tensor([[0.5, -1.0], [1.5, 2.0]], dtype=torch.float64, requires_grad=True)
//   b = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64, requires_grad=True)
//   opt = torch.optim.Adam([w, b], lr=0.1, ...)
//   for each step: opt.zero_grad(); w.grad = ...; b.grad = ... (None at step 2); opt.step()

struct AdamCase {
  const char* name;
  AdamOptions options;
  Trajectory expected;
};

TEST(Adam, MatchesTorchOptim) {
  const std::vector<AdamCase> cases = {
      {"lr=0.1",
       {.lr = 0.1},
       {{{0.40000000499999977, -0.9000000024999999, 1.400000001, 1.900000019999996},
         {9.999999855958563e-10, -0.10000000199999998, 0.3}},
        {{0.37336630271867577, -0.8910675020121357, 1.3259189377609657, 1.9559503655664678},
         {9.999999855958563e-10, -0.10000000199999998, 0.3}},
        {{0.30983428732474083, -0.8841626532898005, 1.3095336610044521, 1.9669677311292195},
         {-0.03456058333737406, -0.1142944748065676, 0.22558632290382774}}}},
      {"lr=0.1 amsgrad",
       {.lr = 0.1, .amsgrad = true},
       {{{0.40000000499999977, -0.9000000024999999, 1.400000001, 1.900000019999996},
         {9.999999855958563e-10, -0.10000000199999998, 0.3}},
        {{0.37336630271867577, -0.8910675020121357, 1.3259189377609657, 1.9559503655664678},
         {9.999999855958563e-10, -0.10000000199999998, 0.3}},
        {{0.30983428732474083, -0.8841661065775799, 1.3095336610044521, 1.9669677311292195},
         {-0.03456058333737406, -0.1142944748065676, 0.22558632290382774}}}},
      {"lr=0.1 weight_decay=0.1",
       {.lr = 0.1, .weight_decay = 0.1},
       {{{0.4000000039999998, -0.900000002, 1.4000000008695652, 1.9000000039999998},
         {9.900990166622492e-10, -0.1000000019230769, 0.20000003333332222}},
        {{0.3522205254389129, -0.8670541169066929, 1.319199159723004, 1.8360234307621297},
         {9.900990166622492e-10, -0.1000000019230769, 0.20000003333332222}},
        {{0.2790494894340355, -0.8318123467695359, 1.284849038541513, 1.7553999417245278},
         {-0.03488180441167067, -0.1115461659011747, 0.11721911772503188}}}},
      {"lr=0.1 betas=(0.5, 0.9) eps=1e-3",
       {.lr = 0.1, .betas = {0.5, 0.9}, .eps = 1e-3},
       {{{0.40049751243781095, -0.9002493765586035, 1.4000999000999002, 1.9019607843137254},
         {9.990009990008819e-05, -0.1001996007984032, 0.3}},
        {{0.40049751243781095, -0.9191920751852671, 1.342384858897677, 1.9796762720836294},
         {9.990009990008819e-05, -0.1001996007984032, 0.3}},
        {{0.32299739840477504, -0.929404580711425, 1.3683357941335295, 1.9743506207522012},
         {-0.008813667311013466, -0.14217488826308808, 0.20873533991471113}}}},
      {"lr=0.1 betas=(0.5, 0.9) amsgrad",
       {.lr = 0.1, .betas = {0.5, 0.9}, .amsgrad = true},
       {{{0.4000000049999997, -0.9000000024999999, 1.400000001, 1.900000019999996},
         {9.999999855958563e-10, -0.10000000199999998, 0.3}},
        {{0.4000000049999997, -0.9189966778312474, 1.3448638067516392, 1.9782366624580243},
         {9.999999855958563e-10, -0.10000000199999998, 0.3}},
        {{0.322147937747963, -0.9287198652623334, 1.370854085796865, 1.972871005662495},
         {-0.008925499999802172, -0.14205093585264011, 0.20810634798606475}}}},
  };
  for (const AdamCase& c : cases) {
    SCOPED_TRACE(c.name);
    expect_trajectory(three_steps<Adam>(c.options), c.expected);
  }
}

struct AdamWCase {
  const char* name;
  AdamWOptions options;
  Trajectory expected;
};

TEST(AdamW, MatchesTorchOptim) {
  const std::vector<AdamWCase> cases = {
      {"lr=0.1 (default weight_decay=1e-2)",
       {.lr = 0.1},
       {{{0.39950000499999977, -0.8990000025, 1.398500001, 1.898000019999996},
         {-9.999900000001727e-05, -0.09980000199999997, 0.29969999999999997}},
        {{0.37246680271367577, -0.8891685020096358, 1.3230204377599657, 1.9520523655464679},
         {-9.999900000001727e-05, -0.09980000199999997, 0.29969999999999997}},
        {{0.30856232051702714, -0.881374484785291, 1.3053121405656922, 1.961117678743673},
         {-0.034660483338374064, -0.1139946748045676, 0.2249866229038277}}}},
      {"lr=0.1 weight_decay=0.1 amsgrad",
       {.lr = 0.1, .weight_decay = 0.1, .amsgrad = true},
       {{{0.39500000499999977, -0.8900000024999999, 1.3850000009999999, 1.880000019999996},
         {-0.0009999990000000153, -0.09800000199999997, 0.297}},
        {{0.36441630266867575, -0.8721675019871357, 1.2970689377509657, 1.9171503653664679},
         {-0.0009999990000000153, -0.09800000199999997, 0.297}},
        {{0.29724012424805407, -0.8565444315327085, 1.2677129716169424, 1.908996227275555},
         {-0.03555058334737406, -0.1113144747865676, 0.2196163229038277}}}},
  };
  for (const AdamWCase& c : cases) {
    SCOPED_TRACE(c.name);
    expect_trajectory(three_steps<AdamW>(c.options), c.expected);
  }
}

TEST(Adam, DefaultsAreTorchs) {
  const Tensor p = leaf({1.0}, {1});
  const AdamOptions adam = Adam({p}, {}).param_groups()[0].options;
  EXPECT_EQ(adam.lr, 1e-3);
  EXPECT_EQ(adam.betas[0], 0.9);
  EXPECT_EQ(adam.betas[1], 0.999);
  EXPECT_EQ(adam.eps, 1e-8);
  EXPECT_EQ(adam.weight_decay, 0);
  EXPECT_FALSE(adam.amsgrad);
  EXPECT_EQ(AdamW({p}, {}).param_groups()[0].options.weight_decay, 1e-2);
  EXPECT_EQ(AdamW({p}, 0.5).param_groups()[0].options.weight_decay, 1e-2);
  EXPECT_EQ(Adam({p}, 3e-4).lr(0), 3e-4);  // Adam outer(net.parameters(), 1e-3)
  EXPECT_EQ(AdamW({p}, {}).name(), "AdamW");
}

TEST(Adam, UpdatesFloat32Parameters) {
  Tensor p = from_vector<float>({1.0f, -2.0f});
  p.requires_grad_();
  Adam adam({p}, 0.5);
  p.set_grad(from_vector<float>({2.0f, -4.0f}));
  adam.step();
  EXPECT_EQ(p.dtype(), kFloat32);
  EXPECT_THAT(values(p), Pointwise(DoubleNear(1e-6), {0.5, -1.5}));  // the first step moves by lr
}

TEST(Adam, BadHyperParametersAreErrors) {
  const Tensor p = leaf({1.0}, {1});
  EXPECT_ERROR_CONTAINS(Adam({p}, -1e-3), "Adam: expected lr >= 0, found -0.001");
  EXPECT_ERROR_CONTAINS(Adam({p}, {.eps = -1e-8}), "Adam: expected eps >= 0, found -1e-08");
  EXPECT_ERROR_CONTAINS(Adam({p}, {.betas = {1.0, 0.999}}), "Adam: expected 0 <= betas[0] < 1, found 1");
  EXPECT_ERROR_CONTAINS(Adam({p}, {.betas = {-0.1, 0.999}}), "Adam: expected 0 <= betas[0] < 1, found -0.1");
  EXPECT_ERROR_CONTAINS(Adam({p}, {.betas = {0.9, 1.5}}), "Adam: expected 0 <= betas[1] < 1, found 1.5");
  EXPECT_ERROR_CONTAINS(Adam({p}, {.weight_decay = -0.1}), "Adam: expected weight_decay >= 0, found -0.1");
  EXPECT_ERROR_CONTAINS(AdamW({p}, {.weight_decay = -0.1}), "AdamW: expected weight_decay >= 0, found -0.1");
  EXPECT_ERROR_CONTAINS(AdamW({p}, -1), "AdamW: expected lr >= 0, found -1");
  EXPECT_ERROR_CONTAINS(AdamW({p, from_vector<double>({1})}, 0.1), "AdamW: parameter 1 (a float64 tensor",
                        "does not require grad");
}

}  // namespace
}  // namespace distgrad::optim
