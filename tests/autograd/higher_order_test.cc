// Higher-order gradients: grad of grad (of grad), backward with create_graph, and the
// second-order MAML gradient of a small MLP against finite differences of the whole inner loop.
#include <cmath>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using autograd::TensorList;
using testing::values;

TEST(HigherOrder, DerivativesOfACubeUpToThirdOrder) {
  const Tensor x = from_vector<double>({2, -1});
  x.requires_grad_();
  const Tensor y = sum(pow(x, 3.0));
  const Tensor first = autograd::grad({y}, {x}, {.create_graph = true})[0];
  EXPECT_EQ(values(first), (std::vector<double>{12, 3}));  // 3x^2
  const Tensor second = autograd::grad({sum(first)}, {x}, {.create_graph = true})[0];
  EXPECT_EQ(values(second), (std::vector<double>{12, -6}));  // 6x
  const Tensor third = autograd::grad({sum(second)}, {x})[0];
  EXPECT_EQ(values(third), (std::vector<double>{6, 6}));
}

TEST(HigherOrder, ThirdDerivativeOfTanhMatchesTheClosedForm) {
  const double v = 0.7;
  const Tensor x = from_vector<double>({v});
  x.requires_grad_();
  Tensor d = tanh(x);
  for (int order = 0; order < 3; ++order) d = autograd::grad({d}, {x}, {.create_graph = true})[0];
  const double t = std::tanh(v);
  // d^3/dx^3 tanh = -2 (1 - t^2)(1 - 3 t^2)
  EXPECT_NEAR(d.item<double>(), -2 * (1 - t * t) * (1 - 3 * t * t), 1e-12);
}

TEST(HigherOrder, BackwardWithCreateGraphGivesADifferentiableGrad) {
  const Tensor x = from_vector<double>({1.5});
  x.requires_grad_();
  sum(mul(sin(x), x)).backward(Tensor(), std::nullopt, /*create_graph=*/true);
  const Tensor g = x.grad();  // sin(x) + x cos(x), recorded
  ASSERT_TRUE(g.requires_grad());
  const Tensor gg = autograd::grad({g.sum()}, {x})[0];
  EXPECT_NEAR(gg.item<double>(), 2 * std::cos(1.5) - 1.5 * std::sin(1.5), 1e-12);
  x.set_grad(Tensor());  // the recorded grad refers back to x: a cycle to break, as in PyTorch
}

TEST(HigherOrder, ThirdOrderGradcheckThroughAConvolution) {
  // gradgradcheck of the function returning a first derivative checks the third order.
  manual_seed(3);
  const Tensor input = randn({1, 1, 4, 4}, {.dtype = kFloat64});
  const Tensor weight = randn({1, 1, 2, 2}, {.dtype = kFloat64});
  weight.requires_grad_();
  const auto first_derivative = [input](const TensorList& w) {
    const Tensor loss = sum(pow(tanh(conv2d(input, w[0])), 2.0));
    return autograd::grad({loss}, {w[0]}, {.retain_graph = true, .create_graph = true});
  };
  EXPECT_TRUE(autograd::gradgradcheck(first_derivative, {weight}));
}

// Batch normalisation's second-order gradients: the fused kernel's (nothing recorded) are those of
// the differentiable composition that runs when they are recorded, and that one's derivatives
// (the third order) match finite differences.
Tensor batch_norm_loss(const TensorList& p) { return sum(pow(tanh(batch_norm(p[0], p[1], p[2], 1e-5).output), 2.0)); }

// Random float64 input [3, 2, 2, 2], weight and bias, requiring grad.
TensorList batch_norm_parameters() {
  TensorList p = {randn({3, 2, 2, 2}, {.dtype = kFloat64}), randn({2}, {.dtype = kFloat64}),
                  randn({2}, {.dtype = kFloat64})};
  for (const Tensor& t : p) t.requires_grad_();
  return p;
}

TEST(HigherOrder, BatchNormSecondOrderIsTheSameRecordedOrNot) {
  manual_seed(5);
  const TensorList p = batch_norm_parameters();
  const TensorList first = autograd::grad({batch_norm_loss(p)}, p, {.retain_graph = true, .create_graph = true});
  const Tensor mixed = sum(first[0] * first[0]) + sum(first[1] * first[2]);
  const TensorList fused = autograd::grad({mixed}, p, {.retain_graph = true});
  const TensorList recorded = autograd::grad({mixed}, p, {.retain_graph = true, .create_graph = true});
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_TRUE(recorded[i].requires_grad());
    const std::vector<double> a = fused[i].to_vector<double>(), b = recorded[i].to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-10 * (1 + std::abs(b[k]))) << i << ", " << k;
  }
}

TEST(HigherOrder, ThirdOrderGradcheckThroughBatchNorm) {
  manual_seed(6);
  const TensorList p = batch_norm_parameters();
  const auto first_derivative = [](const TensorList& q) {
    return autograd::grad({batch_norm_loss(q)}, q, {.retain_graph = true, .create_graph = true});
  };
  EXPECT_TRUE(autograd::gradgradcheck(first_derivative, p));
}

// A 1-8-1 tanh MLP as a list of parameters [w1, b1, w2, b2].
Tensor mlp(const TensorList& p, const Tensor& x) { return addmm(p[3], tanh(addmm(p[1], x, p[0])), p[2]); }

Tensor mse(const Tensor& prediction, const Tensor& target) { return mean(pow(prediction - target, 2.0)); }

// MAML's outer loss: `steps` SGD steps on the support set, each differentiated with
// create_graph, then the loss of the adapted parameters on the query set.
Tensor maml_outer_loss(const TensorList& params, const Tensor& xs, const Tensor& ys, const Tensor& xq, const Tensor& yq,
                       int steps, double lr) {
  TensorList fast = params;
  for (int step = 0; step < steps; ++step) {
    const TensorList grads = autograd::grad({mse(mlp(fast, xs), ys)}, fast, {.create_graph = true});
    for (size_t i = 0; i < fast.size(); ++i) fast[i] = fast[i] - grads[i] * lr;
  }
  return mse(mlp(fast, xq), yq);
}

TEST(HigherOrder, SecondOrderMamlGradientMatchesFiniteDifferencesOfTheInnerLoop) {
  manual_seed(11);
  const auto f64 = TensorOptions{.dtype = kFloat64};
  TensorList params = {untracked::mul(randn({1, 8}, f64), 0.8), untracked::mul(randn({8}, f64), 0.1),
                       untracked::mul(randn({8, 1}, f64), 0.5), zeros({1}, f64)};
  for (const Tensor& p : params) p.requires_grad_();
  const Tensor xs = untracked::sub(untracked::mul(rand({5, 1}, f64), 10.0), 5.0);
  const Tensor xq = untracked::sub(untracked::mul(rand({5, 1}, f64), 10.0), 5.0);
  const Tensor ys = untracked::mul(untracked::sin(untracked::add(xs, 0.5)), 2.0);
  const Tensor yq = untracked::mul(untracked::sin(untracked::add(xq, 0.5)), 2.0);
  const auto outer = [&](const TensorList& p) { return TensorList{maml_outer_loss(p, xs, ys, xq, yq, 3, 0.05)}; };
  EXPECT_TRUE(autograd::gradcheck(outer, params, {.eps = 1e-6, .atol = 1e-7, .rtol = 1e-5}));

  // The second-order terms matter: the first-order approximation (inner gradients detached)
  // gives a different meta-gradient for the same loss.
  const TensorList exact = autograd::grad(outer(params), params);
  TensorList fast = params;
  for (int step = 0; step < 3; ++step) {
    const TensorList grads = autograd::grad({mse(mlp(fast, xs), ys)}, fast);
    for (size_t i = 0; i < fast.size(); ++i) fast[i] = fast[i] - grads[i].detach() * 0.05;
  }
  const TensorList first_order = autograd::grad({mse(mlp(fast, xq), yq)}, params);
  EXPECT_FALSE(untracked::allclose(exact[0], first_order[0], 1e-3, 1e-6));
}

}  // namespace
}  // namespace distgrad
