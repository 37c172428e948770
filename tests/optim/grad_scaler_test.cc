// GradScaler: the scaled loss gives scaled gradients that unscale_ restores, a non-finite
// gradient skips the step and halves the scale, growth after growth_interval clean steps, the
// order rules by message, and a disabled scaler that changes nothing.
#include "optim/grad_scaler.h"

#include <limits>
#include <vector>

#include "autograd/ops.h"
#include "core/ops.h"
#include "optim/sgd.h"
#include "tests/core/test_util.h"

namespace distgrad::optim {
namespace {

using testing::values;

Tensor leaf(const std::vector<float>& data) {
  Tensor t = from_vector(data);
  t.requires_grad_();
  return t;
}

TEST(GradScaler, ScaledGradientsAreUnscaledBeforeTheStep) {
  const Tensor w = leaf({1.0f, -2.0f});
  SGD sgd({w}, 0.5);
  GradScaler scaler({.init_scale = 1024});
  const Tensor loss = sum(w * w) * 3.0;  // d/dw = 6 w
  const Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.item<float>(), 1024 * loss.item<float>());
  scaled.backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{6 * 1024, -12 * 1024}));
  scaler.unscale_(sgd);
  EXPECT_EQ(values(w.grad()), (std::vector<double>{6, -12}));  // clipping would see these
  EXPECT_TRUE(scaler.step(sgd));
  EXPECT_EQ(values(w.detach()), (std::vector<double>{1 - 0.5 * 6, -2 + 0.5 * 12}));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1024);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, ANonFiniteGradientSkipsTheStepAndBacksOff) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    const Tensor w = leaf({1.0f, 2.0f});
    SGD sgd({w}, 0.1);
    GradScaler scaler({.init_scale = 256, .growth_interval = 3});
    w.set_grad(from_vector<float>({bad, 1.0f}));
    EXPECT_FALSE(scaler.step(sgd));  // unscales first, finds it, skips
    EXPECT_EQ(values(w.detach()), (std::vector<double>{1, 2}));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 128);
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

TEST(GradScaler, GrowsAfterGrowthIntervalCleanSteps) {
  const Tensor w = leaf({1.0f});
  SGD sgd({w}, 0.0);
  GradScaler scaler({.init_scale = 8, .growth_factor = 4, .growth_interval = 3});
  std::vector<double> scales;
  for (int step = 0; step < 7; ++step) {
    w.set_grad(from_vector<float>({1.0f}));
    scaler.step(sgd);
    scaler.update();
    scales.push_back(scaler.get_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{8, 8, 32, 32, 32, 128, 128}));
  scaler.update(2.0);
  EXPECT_EQ(scaler.get_scale(), 2);
  EXPECT_ERROR_CONTAINS(scaler.update(0.0), "GradScaler::update: expected a positive, finite scale, found 0");
  EXPECT_EQ(scaler.get_scale(), 2);
}

TEST(GradScaler, OrderRulesAndOptionsAreChecked) {
  const Tensor w = leaf({1.0f});
  SGD sgd({w}, 0.1);
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536);
  EXPECT_ERROR_CONTAINS(scaler.update(), "GradScaler::update: no gradients were unscaled or stepped");
  w.set_grad(from_vector<float>({1.0f}));
  scaler.unscale_(sgd);
  EXPECT_ERROR_CONTAINS(scaler.unscale_(sgd), "GradScaler::unscale_: already called on this SGD optimizer");
  scaler.step(sgd);
  EXPECT_ERROR_CONTAINS(scaler.step(sgd), "GradScaler::step: already called on this SGD optimizer");
  scaler.update();
  EXPECT_ERROR_CONTAINS(GradScaler({.backoff_factor = 1.5}),
                        "GradScaler: expected backoff_factor in (0, 1), found 1.5");
  EXPECT_ERROR_CONTAINS(GradScaler({.init_scale = 0}), "GradScaler: expected a positive, finite init_scale, found 0");
  EXPECT_ERROR_CONTAINS(scaler.scale(from_vector<int64_t>({1})), "GradScaler::scale: expected a floating loss");
}

TEST(GradScaler, DisabledChangesNothing) {
  const Tensor w = leaf({1.0f});
  SGD sgd({w}, 0.5);
  GradScaler scaler({.enabled = false});
  const Tensor loss = sum(w * 2.0);
  EXPECT_EQ(scaler.scale(loss).item<float>(), 2);
  w.set_grad(from_vector<float>({std::numeric_limits<float>::infinity()}));
  EXPECT_TRUE(scaler.step(sgd));  // no check: the optimizer steps as it would alone
  scaler.update();
  EXPECT_FALSE(scaler.is_enabled());
  EXPECT_EQ(scaler.get_scale(), 65536);
}

}  // namespace
}  // namespace distgrad::optim
