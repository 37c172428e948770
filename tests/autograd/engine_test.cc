// The backward engine and the autograd API: accumulation, graph retention, grad(), hooks,
// grad mode, version checks, in-place ops, and every error by message.
#include "autograd/engine.h"

#include <cmath>

#include "autograd/autograd.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using autograd::TensorList;
using testing::values;

Tensor leaf(std::vector<double> data) {
  Tensor t = from_vector(data);
  t.requires_grad_();
  return t;
}

TEST(Backward, AccumulatesIntoLeavesAcrossPasses) {
  const Tensor x = leaf({1, 2, 3});
  const Tensor w = leaf({0.5, -1, 2});
  sum(mul(x, w)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0.5, -1, 2}));
  EXPECT_EQ(values(w.grad()), (std::vector<double>{1, 2, 3}));
  sum(mul(x, x)).backward();  // d/dx x^2 = 2x, added to the previous gradient
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2.5, 3, 8}));
}

TEST(Backward, SumsGradientsOfATensorUsedTwice) {
  const Tensor x = leaf({3});
  const Tensor y = x * x + x * 2.0 + exp(x - x);  // a diamond: x reaches y along several paths
  y.sum().backward();
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 2 * 3 + 2);
}

TEST(Backward, AddsIntoAGradientInPlaceOnlyWhenNothingElseHoldsIt) {
  // t's backward hands one fresh tensor to both of its inputs, s and u; s's passes it on to u and
  // v. Adding s's share into u's buffer in place would change v's gradient as well.
  const Tensor x = leaf({1, 2});
  const Tensor u = x * 2.0, v = x * 3.0;
  const Tensor s = u + v;
  ((s + u) * 1.0).sum().backward();  // 2u + v = 7x
  EXPECT_EQ(values(x.grad()), (std::vector<double>{7, 7}));
  // b's backward hands y and q one tensor; the product's fresh gradient then reaching y must take
  // the sum (b's share stays q's).
  const Tensor w = leaf({1, 1});
  const Tensor y = exp(x), q = w * 1.5, a = y * 3.0, b = y + q;
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = values(g);
    return Tensor();
  });
  (a + b * 1.0).sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{4, 4}));
  EXPECT_EQ(values(w.grad()), (std::vector<double>{1.5, 1.5}));
}

TEST(Backward, AFormulaWritesOnlyIntoAGradientNothingElseHolds) {
  // The hook keeps the gradient ReLU's formula receives, so the mask goes into a new tensor.
  const Tensor x = leaf({-1, 2});
  const Tensor y = relu(x);
  Tensor kept;
  y.register_hook([&](const Tensor& g) {
    kept = g;
    return Tensor();
  });
  (y * 3.0).sum().backward();
  EXPECT_EQ(values(kept), (std::vector<double>{3, 3}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 3}));
}

TEST(Backward, ImplicitGradientOnlyForOneElement) {
  const Tensor x = leaf({1, 2});
  EXPECT_ERROR_CONTAINS((x * 2.0).backward(),
                        "backward: a gradient can be created implicitly only for outputs with "
                        "one element; output 0 is a float64 tensor of shape [2]");
  (x * 2.0).backward(from_vector<double>({1, 10}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 20}));
}

TEST(Backward, GradientMustMatchTheOutput) {
  const Tensor x = leaf({1, 2});
  EXPECT_ERROR_CONTAINS((x * 2.0).backward(from_vector<double>({1, 2, 3})),
                        "expected the gradient of output 0 to be a float64 tensor of shape [2] on cpu, found a float64 "
                        "tensor of shape [3]");
  EXPECT_ERROR_CONTAINS((x * 2.0).backward(from_vector<float>({1, 2})), "found a float32 tensor");
}

TEST(Backward, OutputWithoutHistoryIsAnError) {
  EXPECT_ERROR_CONTAINS(from_vector<double>({1}).backward(),
                        "backward: output 0 (a float64 tensor of shape [1] on cpu) does not require grad");
}

TEST(Backward, FreedGraphSaysRetainGraph) {
  const Tensor x = leaf({2});
  const Tensor y = (x * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // the graph was retained once
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 8);
  EXPECT_ERROR_CONTAINS(y.backward(), "MulBackward: trying to backward through the graph a second time",
                        "retain_graph=true");
}

TEST(Backward, InPlaceChangeOfASavedTensorIsCaught) {
  const Tensor x = leaf({1, 2});
  const Tensor a = x * 1.0;
  const Tensor y = (a * a).sum();  // MulBackward saves a
  mul_(a, 3.0);                    // recorded in place: bumps a's version
  EXPECT_ERROR_CONTAINS(y.backward(),
                        "MulBackward: a float64 tensor of shape [2] on cpu saved for backward was "
                        "modified by an in-place operation (it is at version 1, expected version 0)");
}

TEST(Backward, InPlaceOnALeafThatRequiresGradIsRefused) {
  const Tensor x = leaf({1, 2});
  EXPECT_ERROR_CONTAINS(add_(x, 1.0),
                        "add_: a leaf float64 tensor of shape [2] on cpu that requires grad cannot be "
                        "modified in place while grad mode is on");
  autograd::NoGradGuard no_grad;
  add_(x, 1.0);  // an optimizer-style update
  EXPECT_EQ(values(x), (std::vector<double>{2, 3}));
}

TEST(Backward, RecordedInPlaceOpsDifferentiate) {
  const Tensor x = leaf({1, 2});
  const Tensor w = leaf({3, 4});
  Tensor y = x * 2.0;  // a non-leaf
  y *= w;              // y = 2 x w
  y += x;              // y = 2 x w + x
  EXPECT_FALSE(y.is_leaf());
  y.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{7, 9}));
  EXPECT_EQ(values(w.grad()), (std::vector<double>{2, 4}));
}

TEST(Backward, InPlaceOnAViewOfATensorThatRequiresGradIsRefused) {
  const Tensor x = leaf({1, 2, 3, 4});
  const Tensor y = x * 1.0;
  const Tensor row = narrow(y, 0, 0, 2);
  EXPECT_ERROR_CONTAINS(mul_(row, 2.0), "mul_: cannot record an in-place op", "whose storage other tensors share");
}

TEST(Backward, ClampPassesTheGradientOnlyStrictlyInsideItsBounds) {
  // PyTorch 2.x: 0 at min and max themselves and for NaN, 1 strictly between; clamp_ the same.
  const std::vector<double> at = {std::nan(""), 0, 1, 1.5, 2, 3};
  const Tensor x = leaf(at);
  sum(clamp(x, 1.0, 2.0)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 0, 0, 1, 0, 0}));
  const Tensor low = leaf(at);
  sum(clamp(low, 1.0, std::nullopt)).backward();
  EXPECT_EQ(values(low.grad()), (std::vector<double>{0, 0, 0, 1, 1, 1}));
  const Tensor high = leaf(at);
  sum(clamp(high, std::nullopt, 2.0)).backward();
  EXPECT_EQ(values(high.grad()), (std::vector<double>{0, 1, 1, 1, 0, 0}));
  const Tensor in_place = leaf(at);
  sum(clamp_(mul(in_place, 1.0), 1.0, 2.0)).backward();
  EXPECT_EQ(values(in_place.grad()), (std::vector<double>{0, 0, 0, 1, 0, 0}));
}

TEST(Backward, WithInputsAccumulatesOnlyIntoThose) {
  const Tensor x = leaf({1});
  const Tensor w = leaf({2});
  const Tensor h = x * w;
  (h * h).sum().backward(Tensor(), std::nullopt, false, {w, h});
  EXPECT_FALSE(x.grad().defined());
  EXPECT_DOUBLE_EQ(w.grad().item<double>(), 2 * 2 * 1);  // d(xw)^2/dw = 2 x^2 w
  EXPECT_DOUBLE_EQ(h.grad().item<double>(), 2 * 2);      // non-leaf inputs get a grad too
}

TEST(Grad, ReturnsGradientsWithoutTouchingGrad) {
  const Tensor x = leaf({1, 2});
  const Tensor y = sum(pow(x, 3.0));
  const TensorList dx = autograd::grad({y}, {x});
  EXPECT_EQ(values(dx[0]), (std::vector<double>{3, 12}));
  EXPECT_FALSE(x.grad().defined());
}

TEST(Grad, UnusedInputIsAnErrorUnlessAllowed) {
  const Tensor x = leaf({1});
  const Tensor unused = leaf({5});
  const Tensor y = (x * 2.0).sum();
  EXPECT_ERROR_CONTAINS(autograd::grad({y}, {x, unused}, {.retain_graph = true}),
                        "grad: input 1 (a float64 tensor of shape [1] on cpu) was not used to compute the outputs",
                        "allow_unused=true");
  const TensorList grads = autograd::grad({y}, {x, unused}, {.retain_graph = true, .allow_unused = true});
  EXPECT_DOUBLE_EQ(grads[0].item<double>(), 2);
  EXPECT_FALSE(grads[1].defined());
}

TEST(Grad, InputThatDoesNotRequireGradIsAnError) {
  const Tensor x = leaf({1});
  const Tensor constant = from_vector<double>({2});
  EXPECT_ERROR_CONTAINS(autograd::grad({(x * constant).sum()}, {constant}),
                        "grad: input 0 (a float64 tensor of shape [1] on cpu) does not require grad");
}

TEST(Grad, OfAnIntermediateTensor) {
  const Tensor x = leaf({1, 2});
  const Tensor h = x * 3.0;
  const Tensor y = (h * h).sum();
  const TensorList grads = autograd::grad({y}, {h, x});
  EXPECT_EQ(values(grads[0]), (std::vector<double>{6, 12}));
  EXPECT_EQ(values(grads[1]), (std::vector<double>{18, 36}));
}

TEST(Graph, TopologicalNumbersCountTheLongestPathToANodeWithoutEdges) {
  const Tensor x = leaf({1, 2});
  const Tensor h = x * 3.0;                  // MulBackward -> AccumulateGrad(x)
  const Tensor y = (h * h).sum() + x.sum();  // AddBackward -> SumBackward -> MulBackward -> h
  EXPECT_EQ(h.grad_fn()->topological_nr(), 1u);
  EXPECT_EQ(h.grad_fn()->next_edge(0).function->topological_nr(), 0u);
  EXPECT_EQ(y.grad_fn()->topological_nr(), 4u);  // the longest path, not the shortest (x.sum(): 2)
}

// grad() skips the walk below its deepest input's node: inputs at several depths, one reached
// both directly and through a branch that rejoins below it.
TEST(Grad, InputsAtSeveralDepthsOfABranchingGraph) {
  const Tensor x = leaf({0.5, -1.25});
  const Tensor h1 = x * 2.0;
  const Tensor h2 = sin(h1);
  const Tensor y = (h2 * h1).sum();
  const TensorList of_h2 = autograd::grad({y}, {h2}, {.retain_graph = true});
  EXPECT_EQ(values(of_h2[0]), values(h1));
  const TensorList of_h2_h1 = autograd::grad({y}, {h2, h1}, {.retain_graph = true});
  EXPECT_EQ(values(of_h2_h1[0]), values(h1));
  const std::vector<double> dh1 = values(of_h2_h1[1]);
  for (size_t i = 0; i < dh1.size(); ++i) {
    const double h = values(h1)[i];  // both paths: d/dh sin(h) * h = sin(h) + h cos(h)
    EXPECT_NEAR(dh1[i], std::sin(h) + h * std::cos(h), 1e-12);
  }
  const TensorList of_h2_x = autograd::grad({y}, {h2, x});
  EXPECT_EQ(values(of_h2_x[0]), values(h1));
  const std::vector<double> dx = values(of_h2_x[1]);
  for (size_t i = 0; i < dx.size(); ++i) {
    const double xi = values(x)[i];  // d/dx sin(2x) * 2x = 4x cos(2x) + 2 sin(2x)
    EXPECT_NEAR(dx[i], 4 * xi * std::cos(2 * xi) + 2 * std::sin(2 * xi), 1e-12);
  }
}

TEST(GradMode, NoGradRecordsNothingAndEnableGradRestores) {
  const Tensor x = leaf({1});
  {
    autograd::NoGradGuard no_grad;
    EXPECT_FALSE((x * 2.0).requires_grad());
    {
      autograd::EnableGradGuard enable;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
    EXPECT_FALSE(autograd::GradMode::is_enabled());
  }
  EXPECT_TRUE(autograd::GradMode::is_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Tensor, RequiresGradOptionsAndErrors) {
  const Tensor r = rand({2, 2}, requires_grad());
  EXPECT_TRUE(r.requires_grad());
  EXPECT_TRUE(r.is_leaf());
  EXPECT_TRUE(zeros({2}, {.dtype = kFloat64, .requires_grad = true}).requires_grad());
  EXPECT_ERROR_CONTAINS(zeros({2}, {.dtype = kInt64, .requires_grad = true}),
                        "only floating-point tensors can require gradients, found a int64 tensor");
  const Tensor y = r * 2.0;
  EXPECT_ERROR_CONTAINS(y.requires_grad_(false), "can only change requires_grad of leaf tensors",
                        "computed by MulBackward");
  EXPECT_EQ(y.grad_fn()->name(), "MulBackward");
  const Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.data_ptr(), y.data_ptr());
}

TEST(Backward, GradientsComeBackInTheLeafDtypeAndDevice) {
  const Tensor x = leaf({1, 2});
  (to(x, kFloat32) * 2.0).sum().backward();
  EXPECT_EQ(x.grad().dtype(), kFloat64);
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 2}));
}

TEST(Hooks, TensorHookCanReplaceTheGradient) {
  const Tensor x = leaf({1, 2});
  const Tensor h = x * 2.0;
  std::vector<double> seen;
  h.register_hook([&](const Tensor& g) {
    seen = values(g);
    return g * 10.0;
  });
  h.sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{20, 20}));
}

TEST(Hooks, LeafHookPostAccumulateHookAndRemoval) {
  const Tensor x = leaf({1});
  int leaf_calls = 0, post_calls = 0;
  const int64_t leaf_hook = x.register_hook([&](const Tensor& g) {
    ++leaf_calls;
    return g * 0.5;
  });
  x.register_post_accumulate_grad_hook([&](const Tensor& variable) {
    ++post_calls;
    EXPECT_DOUBLE_EQ(variable.grad().item<double>(), 1.5);  // already accumulated
  });
  (x * 3.0).sum().backward();
  EXPECT_EQ(leaf_calls, 1);
  EXPECT_EQ(post_calls, 1);
  x.remove_hook(leaf_hook);
  x.set_grad(Tensor());
  x.remove_hook(x.register_post_accumulate_grad_hook([](const Tensor&) {}));
  EXPECT_ERROR_CONTAINS(x.remove_hook(leaf_hook), "remove_hook: no hook with id");
}

TEST(Hooks, QueuedCallbacksRunAfterEveryNodeAndMayQueueMore) {
  const Tensor x = leaf({1});
  const Tensor y = leaf({2});
  std::vector<std::string> order;
  x.register_post_accumulate_grad_hook([&](const Tensor&) {
    order.push_back("x");
    autograd::Engine::queue_callback([&] {
      order.push_back("first callback");
      autograd::Engine::queue_callback([&] { order.push_back("second callback"); });
    });
  });
  y.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("y"); });
  (x * y * 3.0).sum().backward();
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[2], "first callback");
  EXPECT_EQ(order[3], "second callback");
  EXPECT_ERROR_CONTAINS(autograd::Engine::queue_callback([] {}), "no backward pass is running");
}

TEST(Hooks, RetainGradKeepsANonLeafGradient) {
  const Tensor x = leaf({1, 2});
  const Tensor h = x * 3.0;
  h.retain_grad();
  (h * h).sum().backward();
  EXPECT_EQ(values(h.grad()), (std::vector<double>{6, 12}));
  EXPECT_ERROR_CONTAINS(from_vector<double>({1}).retain_grad(), "does not require grad");
}

TEST(Hooks, GradOfAHookedTensorSeesTheHook) {
  const Tensor x = leaf({2});
  x.register_hook([](const Tensor& g) { return g * 0.0; });
  EXPECT_DOUBLE_EQ(autograd::grad({(x * x).sum()}, {x})[0].item<double>(), 0);
}

TEST(Graph, FreesSavedTensorsWhenOutputsGoAway) {
  const Tensor x = leaf({1, 2});
  std::weak_ptr<autograd::Node> node;
  {
    const Tensor y = exp(x);  // saves its own output: no cycle may keep it alive
    node = y.grad_fn();
    EXPECT_FALSE(node.expired());
  }
  EXPECT_TRUE(node.expired());
}

// The optional arguments by name (BackwardOptions, GradOptions), one at a time too: GCC 12 read
// `{.create_graph = true}` as a list of one tensor when an overload took grad_outputs beside them.
TEST(AutogradOptions, OptionsAreGivenByName) {
  const Tensor x = leaf({1, 2}), w = leaf({3, -1}), unused = leaf({0});
  const Tensor y = x * x * w;
  ASSERT_TRUE(autograd::grad({y.sum()}, {x}, {.create_graph = true})[0].requires_grad());
  const TensorList first = autograd::grad({y.sum()}, {x}, {.retain_graph = true, .create_graph = true});
  ASSERT_TRUE(first[0].requires_grad()) << "create_graph by name recorded nothing";
  EXPECT_EQ(values(first[0]), (std::vector<double>{6, -4}));  // 2 x w
  EXPECT_EQ(values(autograd::grad({first[0].sum()}, {w}, {.retain_graph = true})[0]), (std::vector<double>{2, 4}));
  const TensorList with_unused = autograd::grad({y.sum()}, {x, unused}, {.retain_graph = true, .allow_unused = true});
  EXPECT_FALSE(with_unused[1].defined());
  EXPECT_ERROR_CONTAINS(autograd::grad({y.sum()}, {unused}, {.retain_graph = true}), "was not used");

  autograd::backward({y}, {.grad_outputs = {from_vector<double>({1, 10})}, .retain_graph = true, .inputs = {w}});
  EXPECT_EQ(values(w.grad()), (std::vector<double>{1, 40}));  // v * x^2
  EXPECT_FALSE(x.grad().defined()) << "backward limited to w accumulated into x";
  autograd::backward({y.sum()}, {.inputs = {x}});
  EXPECT_EQ(values(x.grad()), (std::vector<double>{6, -4}));
}

}  // namespace
}  // namespace distgrad
