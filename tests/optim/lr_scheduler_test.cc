// Learning-rate schedulers: each one's sequence against torch's own recursive (chainable)
// get_lr(), transcribed below, and at points known from its formula; schedulers setting each
// group's lr from its own base lr; an optimizer taking steps of the scheduled size; errors.
#include "optim/lr_scheduler.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

#include "core/ops.h"
#include "optim/sgd.h"
#include "tests/core/test_util.h"

namespace distgrad::optim {
namespace {

using ::testing::DoubleNear;
using ::testing::Pointwise;

constexpr double kPi = std::numbers::pi;

Tensor leaf(double value) {
  Tensor t = from_vector<double>({value});
  t.requires_grad_();
  return t;
}

// The lrs of group 0 at epochs 0 (after construction) to `epochs`; checks that get_last_lr()
// and the optimizer agree on each.
std::vector<double> lrs(LRScheduler& scheduler, const Optimizer& optimizer, int epochs) {
  std::vector<double> sequence;
  for (int epoch = 0; epoch <= epochs; ++epoch) {
    if (epoch > 0) scheduler.step();
    EXPECT_EQ(scheduler.last_epoch(), epoch);
    EXPECT_EQ(scheduler.get_last_lr()[0], optimizer.lr(0));
    sequence.push_back(optimizer.lr(0));
  }
  return sequence;
}

// torch.optim.lr_scheduler's get_lr(), the recursive form torch runs at each step(): the lr of
// `epoch` (>= 1) from the lr of epoch - 1. `torch_sequence` starts from torch's lr at epoch 0.
double torch_step_lr(double lr, int64_t epoch, int64_t step_size, double gamma) {
  return epoch % step_size != 0 ? lr : lr * gamma;
}

double torch_cosine_annealing_lr(double lr, int64_t epoch, double base_lr, int64_t t_max, double eta_min) {
  if ((epoch - 1 - t_max) % (2 * t_max) == 0) return lr + (base_lr - eta_min) * (1 - std::cos(kPi / t_max)) / 2;
  return (1 + std::cos(kPi * epoch / t_max)) / (1 + std::cos(kPi * (epoch - 1) / t_max)) * (lr - eta_min) + eta_min;
}

double torch_linear_lr(double lr, int64_t epoch, double start_factor, double end_factor, int64_t total_iters) {
  if (epoch > total_iters) return lr;
  return lr *
         (1.0 + (end_factor - start_factor) / (total_iters * start_factor + (epoch - 1) * (end_factor - start_factor)));
}

template <typename Recursion>
std::vector<double> torch_sequence(double lr_at_0, int epochs, const Recursion& next) {
  std::vector<double> sequence = {lr_at_0};
  for (int epoch = 1; epoch <= epochs; ++epoch) sequence.push_back(next(sequence.back(), epoch));
  return sequence;
}

TEST(StepLR, MatchesTorchAndDecaysEveryStepSizeEpochs) {
  const double base = 0.05;
  SGD sgd({leaf(1)}, base);
  StepLR scheduler(sgd, /*step_size=*/3, /*gamma=*/0.1);
  const std::vector<double> sequence = lrs(scheduler, sgd, 10);
  EXPECT_THAT(sequence, Pointwise(DoubleNear(1e-15), torch_sequence(base, 10, [](double lr, int64_t epoch) {
                                    return torch_step_lr(lr, epoch, 3, 0.1);
                                  })));
  EXPECT_EQ(sequence[0], base);
  EXPECT_EQ(sequence[2], base);
  EXPECT_NEAR(sequence[3], base * 0.1, 1e-18);
  EXPECT_NEAR(sequence[6], base * 0.1 * 0.1, 1e-18);  // after 2 * step_size steps: base * gamma^2
  EXPECT_NEAR(sequence[8], base * 0.1 * 0.1, 1e-18);
  EXPECT_EQ(scheduler.base_lrs(), (std::vector<double>{base}));
}

TEST(StepLR, DefaultGammaIsTorchs) {
  SGD sgd({leaf(1)}, 1.0);
  StepLR scheduler(sgd, 1);
  scheduler.step();
  EXPECT_DOUBLE_EQ(sgd.lr(0), 0.1);
}

TEST(CosineAnnealingLR, MatchesTorchAndReachesEtaMinAtTMax) {
  const double base = 0.1, eta_min = 0.001;
  SGD sgd({leaf(1)}, base);
  CosineAnnealingLR scheduler(sgd, /*t_max=*/10, eta_min);
  const std::vector<double> sequence = lrs(scheduler, sgd, 25);  // past T_max, where torch's rises again
  EXPECT_THAT(sequence, Pointwise(DoubleNear(1e-15), torch_sequence(base, 25, [&](double lr, int64_t epoch) {
                                    return torch_cosine_annealing_lr(lr, epoch, base, 10, eta_min);
                                  })));
  EXPECT_EQ(sequence[0], base);
  EXPECT_NEAR(sequence[5], (base + eta_min) / 2, 1e-17);
  EXPECT_NEAR(sequence[10], eta_min, 1e-17);
  EXPECT_NEAR(sequence[20], base, 1e-17);
  EXPECT_GT(sequence[11], sequence[10]);
}

TEST(LinearLR, MatchesTorchAndWarmsUpFromStartFactor) {
  const double base = 0.3;
  SGD sgd({leaf(1)}, base);
  LinearLR scheduler(sgd);  // torch's defaults: start_factor 1/3, end_factor 1, total_iters 5
  const std::vector<double> sequence = lrs(scheduler, sgd, 8);
  EXPECT_THAT(sequence, Pointwise(DoubleNear(1e-15), torch_sequence(base / 3, 8, [](double lr, int64_t epoch) {
                                    return torch_linear_lr(lr, epoch, 1.0 / 3, 1.0, 5);
                                  })));
  EXPECT_EQ(sequence[0], base * (1.0 / 3));  // the constructor already multiplies by start_factor
  EXPECT_EQ(sequence[5], base);              // base * end_factor from total_iters on
  EXPECT_EQ(sequence[8], base);
  EXPECT_EQ(scheduler.base_lrs(), (std::vector<double>{base}));
}

TEST(LinearLR, DecaysWhenEndFactorIsBelowStartFactor) {
  const double base = 0.2;
  SGD sgd({leaf(1)}, base);
  LinearLR scheduler(sgd, /*start_factor=*/1.0, /*end_factor=*/0.25, /*total_iters=*/3);
  const std::vector<double> sequence = lrs(scheduler, sgd, 4);
  EXPECT_THAT(sequence, Pointwise(DoubleNear(1e-15), torch_sequence(base, 4, [](double lr, int64_t epoch) {
                                    return torch_linear_lr(lr, epoch, 1.0, 0.25, 3);
                                  })));
  EXPECT_NEAR(sequence[1], base * 0.75, 1e-17);
  EXPECT_EQ(sequence[3], base * 0.25);
}

TEST(LambdaLR, IsTheBaseLrTimesTheFunctionOfTheEpoch) {
  const double base = 0.5;
  SGD sgd({leaf(1)}, base);
  auto factor = [](int64_t epoch) { return 1.0 / static_cast<double>(epoch + 1); };
  LambdaLR scheduler(sgd, factor);
  const std::vector<double> sequence = lrs(scheduler, sgd, 4);
  for (int64_t epoch = 0; epoch <= 4; ++epoch) EXPECT_EQ(sequence[epoch], base * factor(epoch));
  EXPECT_EQ(sequence[3], 0.125);  // not 0.5 * (1 * 1/2 * 1/3 * 1/4): the base lr, not the last one
}

TEST(LRScheduler, SetsEachGroupFromItsOwnBaseLr) {
  SGD sgd({{.params = {leaf(1)}, .options = {.lr = 0.1}}, {.params = {leaf(2)}, .options = {.lr = 0.01}}});
  StepLR scheduler(sgd, /*step_size=*/1, /*gamma=*/0.5);
  EXPECT_EQ(scheduler.base_lrs(), (std::vector<double>{0.1, 0.01}));
  scheduler.step();
  scheduler.step();
  EXPECT_EQ(scheduler.get_last_lr(), (std::vector<double>{0.1 * 0.25, 0.01 * 0.25}));
  EXPECT_EQ(sgd.lr(0), 0.025);
  EXPECT_EQ(sgd.lr(1), 0.0025);
}

TEST(LRScheduler, TheOptimizerStepsByTheScheduledLr) {
  // Plain SGD moves p by exactly lr * g: with g = 1, by the lr the scheduler set for that step.
  const Tensor a = leaf(1);
  const Tensor b = leaf(1);
  SGD sgd({{.params = {a}, .options = {.lr = 0.4}}, {.params = {b}, .options = {.lr = 0.1}}});
  LinearLR scheduler(sgd, /*start_factor=*/0.5, /*end_factor=*/1.0, /*total_iters=*/4);
  for (int epoch = 0; epoch < 6; ++epoch) {
    SCOPED_TRACE(::testing::Message() << "epoch " << epoch);
    const double a_before = a.item<double>(), b_before = b.item<double>();
    sgd.zero_grad();
    a.set_grad(from_vector<double>({1.0}));
    b.set_grad(from_vector<double>({1.0}));
    sgd.step();
    const double factor = epoch >= 4 ? 1.0 : 0.5 + 0.5 * epoch / 4;
    EXPECT_NEAR(a_before - a.item<double>(), 0.4 * factor, 1e-15);
    EXPECT_NEAR(b_before - b.item<double>(), 0.1 * factor, 1e-15);
    scheduler.step();
  }
}

TEST(LRScheduler, BadArgumentsAreErrorsNamingTheScheduler) {
  SGD sgd({leaf(1)}, 0.1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_ERROR_CONTAINS(StepLR(sgd, 0), "StepLR: expected step_size > 0, found 0");
  EXPECT_ERROR_CONTAINS(StepLR(sgd, -3), "StepLR: expected step_size > 0, found -3");
  EXPECT_ERROR_CONTAINS(StepLR(sgd, 10, -0.5), "StepLR: expected gamma >= 0, found -0.5");
  EXPECT_ERROR_CONTAINS(StepLR(sgd, 10, nan), "StepLR: expected gamma >= 0, found nan");
  EXPECT_ERROR_CONTAINS(CosineAnnealingLR(sgd, 0), "CosineAnnealingLR: expected T_max > 0, found 0");
  EXPECT_ERROR_CONTAINS(CosineAnnealingLR(sgd, 10, -1e-3), "CosineAnnealingLR: expected eta_min >= 0, found -0.001");
  EXPECT_ERROR_CONTAINS(LinearLR(sgd, 0.0), "LinearLR: expected 0 < start_factor <= 1, found 0");
  EXPECT_ERROR_CONTAINS(LinearLR(sgd, 1.5), "LinearLR: expected 0 < start_factor <= 1, found 1.5");
  EXPECT_ERROR_CONTAINS(LinearLR(sgd, nan), "LinearLR: expected 0 < start_factor <= 1, found nan");
  EXPECT_ERROR_CONTAINS(LinearLR(sgd, 0.5, 1.25), "LinearLR: expected 0 <= end_factor <= 1, found 1.25");
  EXPECT_ERROR_CONTAINS(LinearLR(sgd, 0.5, 1.0, 0), "LinearLR: expected total_iters > 0, found 0");
  EXPECT_ERROR_CONTAINS(LambdaLR(sgd, nullptr),
                        "LambdaLR: expected a function of the epoch, found an empty std::function");
  EXPECT_EQ(sgd.lr(0), 0.1);  // a scheduler that failed to construct set nothing
}

TEST(LRScheduler, ANegativeLrIsAnErrorThatChangesNothing) {
  SGD sgd({{.params = {leaf(1)}, .options = {.lr = 0.1}}, {.params = {leaf(2)}, .options = {.lr = 0.2}}});
  LambdaLR scheduler(sgd, [](int64_t epoch) { return 1.0 - 0.75 * static_cast<double>(epoch); });
  scheduler.step();  // epoch 1: a quarter of each base lr
  EXPECT_ERROR_CONTAINS(scheduler.step(), "LambdaLR: at epoch 2 param group 0's lr would be -0.05, expected lr >= 0");
  EXPECT_EQ(scheduler.last_epoch(), 1);
  EXPECT_EQ(scheduler.get_last_lr(), (std::vector<double>{0.1 * 0.25, 0.2 * 0.25}));
  EXPECT_EQ(sgd.lr(1), 0.2 * 0.25);
}

}  // namespace
}  // namespace distgrad::optim
