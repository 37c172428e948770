// Schedules (TorchOpt's torchopt.schedule) at points known from their formulas, and the
// differentiable optimizers taking a schedule as their learning rate: each step is the step of
// the same optimizer with the scheduled lr as a constant, the count starts at 0, and the
// meta-gradient goes through steps of different sizes.
#include "optim/schedule.h"

#include <cstdint>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "optim/meta_adam.h"
#include "optim/meta_sgd.h"
#include "tests/core/test_util.h"

namespace distgrad::optim {
namespace {

using ::testing::DoubleNear;
using ::testing::Pointwise;
using testing::values;

Tensor leaf(const std::vector<double>& data) {
  Tensor t = from_vector(data);
  t.requires_grad_();
  return t;
}

TEST(Schedule, LinearHoldsThenMovesInAStraightLineThenHolds) {
  const Schedule lr = schedule::linear(0.1, 0.02, /*transition_steps=*/4, /*transition_begin=*/2);
  EXPECT_DOUBLE_EQ(lr(0), 0.1);
  EXPECT_DOUBLE_EQ(lr(2), 0.1);
  EXPECT_DOUBLE_EQ(lr(4), (0.1 + 0.02) / 2);
  EXPECT_EQ(lr(6), 0.02);
  EXPECT_EQ(lr(100), 0.02);
  for (int64_t count = 3; count <= 6; ++count) EXPECT_NEAR(lr(count) - lr(count - 1), (0.02 - 0.1) / 4, 1e-16);
  EXPECT_DOUBLE_EQ(schedule::linear(1.0, 0.0, 10)(3), 0.7);  // transition_begin defaults to 0
}

TEST(Schedule, StepMultipliesByGammaEveryStepSizeSteps) {
  const Schedule lr = schedule::step(1.0, /*step_size=*/3, /*gamma=*/0.5);
  EXPECT_EQ(lr(0), 1.0);
  EXPECT_EQ(lr(2), 1.0);
  EXPECT_EQ(lr(3), 0.5);
  EXPECT_EQ(lr(6), 0.25);                                        // after 2 * step_size steps: init * gamma^2
  EXPECT_DOUBLE_EQ(schedule::step(2.0, 1)(2), 2.0 * 0.1 * 0.1);  // gamma defaults to 0.1
}

TEST(Schedule, CosineGoesFromInitToEtaMinInTMaxSteps) {
  const Schedule lr = schedule::cosine(0.1, /*t_max=*/8, /*eta_min=*/0.002);
  EXPECT_EQ(lr(0), 0.1);
  EXPECT_NEAR(lr(4), (0.1 + 0.002) / 2, 1e-17);
  EXPECT_NEAR(lr(8), 0.002, 1e-17);
  EXPECT_NEAR(lr(2), 0.002 + 0.098 * (1 + std::sqrt(0.5)) / 2, 1e-17);  // cos(pi / 4)
  EXPECT_NEAR(lr(16), 0.1, 1e-17);                                      // rises again, as torch's
  EXPECT_NEAR(schedule::cosine(1.0, 2)(1), 0.5, 1e-16);                 // eta_min defaults to 0
}

TEST(Schedule, BadArgumentsAreErrorsNamingTheSchedule) {
  EXPECT_ERROR_CONTAINS(schedule::linear(0.1, 0.0, 0), "schedule::linear: expected transition_steps > 0, found 0");
  EXPECT_ERROR_CONTAINS(schedule::linear(0.1, 0.0, 5, -1),
                        "schedule::linear: expected transition_begin >= 0, found -1");
  EXPECT_ERROR_CONTAINS(schedule::step(0.1, 0), "schedule::step: expected step_size > 0, found 0");
  EXPECT_ERROR_CONTAINS(schedule::step(0.1, 2, -1), "schedule::step: expected gamma >= 0, found -1");
  EXPECT_ERROR_CONTAINS(schedule::cosine(0.1, 0), "schedule::cosine: expected t_max > 0, found 0");
  EXPECT_ERROR_CONTAINS(schedule::cosine(0.1, 4, -0.5), "schedule::cosine: expected eta_min >= 0, found -0.5");
}

// --- schedules in inner loops. The inner loss of a linear model y = x w + b.
Tensor inner_loss(const nn::ParamDict& p) {
  const Tensor x = from_vector<double>({1.0, 2.0, -1.0, 0.5, 0.3, -2.0}, {3, 2});
  const Tensor y = from_vector<double>({1.0, -2.0, 0.5});
  return mean(pow(sub(add(matmul(x, p.at("w")), p.at("b")), y), 2.0));
}

nn::ParamDict initial_params() { return nn::ParamDict{{"w", leaf({0.3, -0.7})}, {"b", leaf({0.2})}}; }

TEST(ScheduledMetaSGD, EachStepIsAConstantLrStepWithTheScheduledLr) {
  const Schedule lr = schedule::linear(0.2, 0.05, /*transition_steps=*/3);
  MetaSGD scheduled(initial_params(), lr);
  for (int64_t count = 0; count < 5; ++count) {
    SCOPED_TRACE(::testing::Message() << "count " << count);
    EXPECT_EQ(scheduled.step_count(), count);
    const nn::ParamDict before = scheduled.params();
    const Tensor loss = inner_loss(before);
    // A plain SGD step takes no state: one step of a fresh MetaSGD with lr(count) is the reference.
    const nn::ParamDict expected = MetaSGD(before, lr(count)).step(loss);
    const nn::ParamDict after = scheduled.step(loss);
    EXPECT_EQ(values(after.at("w")), values(expected.at("w")));
    EXPECT_EQ(values(after.at("b")), values(expected.at("b")));
  }
}

TEST(ScheduledMetaSGD, StepsAndMetaGradientByHand) {
  // Inner loss 0.5 (p - 3)^2, outer loss 0.5 p^2, p0 = 1, lr 0.1 then 0.2 (counts 0 and 1):
  // p1 = 1 + 0.1 * 2 = 1.2, p2 = 1.2 + 0.2 * 1.8 = 1.56, d p2 / d p0 = 0.9 * 0.8 = 0.72.
  const Tensor p0 = leaf({1.0});
  std::vector<int64_t> counts;
  MetaSGD inner(nn::ParamDict{{"p", p0}}, [&](int64_t count) {
    counts.push_back(count);
    return 0.1 * static_cast<double>(count + 1);
  });
  auto loss = [](const nn::ParamDict& p) { return sum(mul(pow(sub(p.at("p"), 3.0), 2.0), 0.5)); };
  EXPECT_NEAR(inner.step(loss(inner.params())).at("p").item<double>(), 1.2, 1e-15);
  const Tensor p2 = inner.step(loss(inner.params())).at("p");
  EXPECT_NEAR(p2.item<double>(), 1.56, 1e-15);
  EXPECT_EQ(counts, (std::vector<int64_t>{0, 1}));  // TorchOpt's count: 0 at the first step
  const Tensor outer = sum(mul(pow(p2, 2.0), 0.5));
  EXPECT_NEAR(autograd::grad({outer}, {p0})[0].item<double>(), 1.56 * 0.72, 1e-14);
}

TEST(ScheduledMetaSGD, KeepsTheOtherOptions) {
  // With momentum the buffer carries over: compare against sgd_update run by hand.
  const Schedule lr = schedule::step(0.1, /*step_size=*/1, /*gamma=*/0.5);
  const SGDOptions options{.momentum = 0.9, .weight_decay = 0.01};
  MetaSGD scheduled(initial_params(), lr, options);
  EXPECT_EQ(scheduled.options().momentum, 0.9);
  Tensor w = initial_params().at("w").detach(), b = initial_params().at("b").detach();
  Tensor w_buffer, b_buffer;
  for (int64_t count = 0; count < 3; ++count) {
    const nn::ParamDict before = scheduled.params();
    const Tensor loss = inner_loss(before);
    const std::vector<Tensor> grads = autograd::grad({loss}, {before.at("w"), before.at("b")}, {.retain_graph = true});
    const nn::ParamDict after = scheduled.step(loss);
    autograd::NoGradGuard no_grad;
    SGDOptions at_count = options;
    at_count.lr = lr(count);
    w = sgd_update(at_count, w, grads[0], w_buffer);
    b = sgd_update(at_count, b, grads[1], b_buffer);
    EXPECT_THAT(values(after.at("w")), Pointwise(DoubleNear(1e-15), values(w)));
    EXPECT_THAT(values(after.at("b")), Pointwise(DoubleNear(1e-15), values(b)));
  }
}

TEST(ScheduledMetaAdam, EachStepUsesTheScheduledLrWithTheSameState) {
  const Schedule lr = schedule::cosine(0.05, /*t_max=*/4);
  const AdamOptions options{.eps_root = 1e-8};
  MetaAdam scheduled(initial_params(), lr, options);
  Tensor w = initial_params().at("w").detach(), b = initial_params().at("b").detach();
  AdamState w_state, b_state;
  for (int64_t count = 0; count < 4; ++count) {
    SCOPED_TRACE(::testing::Message() << "count " << count);
    const nn::ParamDict before = scheduled.params();
    const Tensor loss = inner_loss(before);
    const std::vector<Tensor> grads = autograd::grad({loss}, {before.at("w"), before.at("b")}, {.retain_graph = true});
    const nn::ParamDict after = scheduled.step(loss);
    autograd::NoGradGuard no_grad;
    AdamOptions at_count = options;
    at_count.lr = lr(count);
    w = adam_update(at_count, /*decoupled_weight_decay=*/false, w, grads[0], w_state);
    b = adam_update(at_count, /*decoupled_weight_decay=*/false, b, grads[1], b_state);
    EXPECT_THAT(values(after.at("w")), Pointwise(DoubleNear(1e-15), values(w)));
    EXPECT_THAT(values(after.at("b")), Pointwise(DoubleNear(1e-15), values(b)));
  }
}

TEST(ScheduledMetaOptimizer, ConstructionFormsKeepTheirMeaning) {
  const nn::ParamDict params = initial_params();
  EXPECT_EQ(MetaSGD(params, {}).options().lr, 1e-3);
  EXPECT_EQ(MetaSGD(params, 0.1).options().lr, 0.1);
  EXPECT_EQ(MetaSGD(params, {.lr = 0.1, .momentum = 0.9}).options().momentum, 0.9);
  EXPECT_EQ(MetaSGD(params, schedule::linear(0.1, 0.0, 5)).options().momentum, 0);
  EXPECT_EQ(MetaSGD(params, [](int64_t) { return 0.1; }, {.momentum = 0.5}).options().momentum, 0.5);
  EXPECT_EQ(MetaAdam(params, {}).options().lr, 1e-3);
  EXPECT_EQ(MetaAdam(params, schedule::step(0.1, 2), {.eps_root = 1e-8}).options().eps_root, 1e-8);
}

TEST(ScheduledMetaOptimizer, ErrorsNameTheOptimizerAndTheCount) {
  EXPECT_ERROR_CONTAINS(MetaSGD(initial_params(), Schedule(), {}),
                        "MetaSGD: expected a learning-rate schedule, found an empty std::function");
  MetaAdam inner(initial_params(), [](int64_t count) { return 0.1 - 0.1 * static_cast<double>(count); });
  inner.step(inner_loss(inner.params()));
  inner.step(inner_loss(inner.params()));  // lr 0 at count 1
  const nn::ParamDict before = inner.params();
  EXPECT_ERROR_CONTAINS(inner.step(inner_loss(inner.params())),
                        "MetaAdam.step: the learning-rate schedule gives -0.1 at count 2, expected lr >= 0");
  EXPECT_EQ(inner.step_count(), 2);
  EXPECT_TRUE(inner.params().at("w").is_same(before.at("w")));
}

}  // namespace
}  // namespace distgrad::optim
