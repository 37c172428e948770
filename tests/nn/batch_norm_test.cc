// BatchNorm1d and BatchNorm2d: normalisation with batch or running statistics, running-stat
// updates (momentum, cumulative average, momentum 1, no tracking), gradients of first and
// second order, names and errors. Expected values were computed with PyTorch 2
// (torch.nn.BatchNorm1d / BatchNorm2d in float64) on the inputs written here.
#include "nn/batch_norm.h"

#include "autograd/ops.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using testing::expect_module_gradients_match;
using testing::expect_values_near;
using ::testing::IsEmpty;
using testing::random_leaf;
using testing::values;

constexpr TensorOptions kDouble{.dtype = kFloat64};

Tensor batch1() { return from_vector<double>({1, 2, -1, 3, 0, 0.5, -2, 4, 2, 0, 1, 1.5}, {4, 3}); }
Tensor batch2() { return from_vector<double>({0.5, -1, 3, 2, 2, 1, 1, 0, -2, -1, 3, 0}, {4, 3}); }

// BatchNorm1d(3) with weight [1.5, -0.5, 2] and bias [0.1, 0.2, -0.3].
std::unique_ptr<nn::BatchNorm1d> affine_norm() {
  auto norm = std::make_unique<nn::BatchNorm1d>(3, nn::BatchNormOptions{}, kDouble);
  norm->load_state_dict(
      {{"weight", from_vector<double>({1.5, -0.5, 2})}, {"bias", from_vector<double>({0.1, 0.2, -0.3})}},
      /*strict=*/false);
  return norm;
}

TEST(BatchNorm, StartsAsPyTorchDoes) {
  nn::BatchNorm2d norm(2);
  EXPECT_THAT(norm.named_parameters().keys(), ElementsAre("weight", "bias"));
  EXPECT_THAT(norm.named_buffers().keys(), ElementsAre("running_mean", "running_var", "num_batches_tracked"));
  EXPECT_EQ(values(norm.weight), (std::vector<double>{1, 1}));
  EXPECT_EQ(values(norm.bias), (std::vector<double>{0, 0}));
  EXPECT_EQ(values(norm.running_mean), (std::vector<double>{0, 0}));
  EXPECT_EQ(values(norm.running_var), (std::vector<double>{1, 1}));
  EXPECT_EQ(norm.num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(norm.num_batches_tracked.dim(), 0);
  EXPECT_EQ(norm.name(), "BatchNorm2d(2, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)");
  nn::BatchNorm1d bare(3, {.momentum = std::nullopt, .affine = false, .track_running_stats = false});
  EXPECT_THAT(bare.named_parameters().keys(), IsEmpty());
  EXPECT_THAT(bare.named_buffers().keys(), IsEmpty());
  EXPECT_EQ(bare.name(), "BatchNorm1d(3, eps=1e-05, momentum=none, affine=false, track_running_stats=false)");
}

TEST(BatchNorm1d, TrainingUsesBatchStatisticsAndUpdatesRunningStats) {
  auto norm = affine_norm();
  expect_values_near(norm->forward(batch1()),
                     {0.5160245071317109, 0.11548476770460137, -3.355038825082918, 2.1801225356585547,
                      0.7916066260677902, -0.7364341178689883, -1.9801225356585546, -0.5606370906585875,
                      1.8821705893449414, -0.31602450713171093, 0.4535456968861958, 1.009302353606965});
  // 0.9 * start + 0.1 * the batch's mean, and unbiased variance.
  expect_values_near(norm->running_mean, {0.05, 0.175, 0.075});
  expect_values_near(norm->running_var, {1.3333333333333335, 1.1916666666666667, 1.075});
  norm->forward(batch2());
  expect_values_near(norm->running_mean, {0.1075, 0.2575, 0.1175});
  expect_values_near(norm->running_var, {1.35625, 1.4058333333333333, 1.4008333333333334});
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 2);

  norm->eval();  // now the running statistics, which stay as they are
  expect_values_near(norm->forward(batch1()),
                     {1.2495503742433551, -0.5348087652993286, -2.1883510915795075, 3.8255736218475125,
                      0.3085872350442337, 0.3463483602050662, -2.6144844971628807, -1.378204765642891,
                      2.8810478119896397, -0.038461249558723466, -0.11311076512754747, 2.036147994728115});
  expect_values_near(norm->running_mean, {0.1075, 0.2575, 0.1175});
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 2);
}

TEST(BatchNorm1d, WithoutMomentumKeepsACumulativeAverage) {
  nn::BatchNorm1d norm(3, {.momentum = std::nullopt}, kDouble);
  norm.forward(batch1());
  norm.forward(batch2());
  expect_values_near(norm.running_mean, {0.5625, 1.375, 0.625});
  expect_values_near(norm.running_var, {2.9479166666666665, 3.125, 3.0416666666666665});
}

TEST(BatchNorm2d, MomentumOneKeepsTheLastBatch) {
  // TorchOpt's MAML-Omniglot setting: BatchNorm2d(64, momentum=1., affine=True), training mode.
  nn::BatchNorm2d norm(2, {.momentum = 1.0}, kDouble);
  const Tensor x = untracked::sub(untracked::div(untracked::pow(arange(0.0, 24.0, 1.0, kDouble), 1.5), 10.0), 1.0);
  const Tensor input = untracked::reshape(x, {2, 2, 2, 3});
  expect_values_near(
      norm.forward(input),
      {-1.1373974377809164, -1.0996119315928634, -1.0305238871563618, -0.9410581882586676, -0.8351133882764911,
       -0.7149426357772872, -1.2573491447603864, -1.1491069627412673, -1.0328290575222339, -0.9090366896388862,
       -0.778161080999226,  -0.6405667110083463, 0.43331655839707517, 0.6336911026141222,  0.8419284190003863,
       1.0577421051342921,  1.280874958254487,   1.5110943254422236,  0.48860944436768455, 0.6712594588980733,
       0.8587815658117665,  1.0510523207053823,  1.247957214106333,   1.4493896427811057});
  expect_values_near(norm.running_mean, {2.0101421220090283, 4.910891305579217});
  expect_values_near(norm.running_var, {7.6407757148803475, 13.610578880321471});
  norm.eval();
  expect_values_near(
      norm.forward(input),
      {-1.088975204006485,  -1.0527983339496094, -0.9866515634491997, -0.9009946730145076, -0.7995602435514799,
       -0.6845055007047319, -1.20382019531117,   -1.1001861925823615, -0.9888585703745886, -0.8703363976715058,
       -0.7450325380310807, -0.6132959539276223, 0.41486904392933377, 0.6067130756797333,  0.8060851390948911,
       1.0127110247163513,  1.2263444796335556,  1.4467627556221458,  0.4678079427665111,  0.6426820237501688,
       0.822220778208879,   1.0063060171205962,  1.194828106008508,   1.3876849800436666});
}

TEST(BatchNorm1d, WithoutRunningStatsAlwaysUsesBatchStatistics) {
  nn::BatchNorm1d norm(3, {.affine = false, .track_running_stats = false}, kDouble);
  norm.eval();  // evaluation mode too
  // [2, 3, 4] input: (arange(24) % 7 - 3) / 2.
  std::vector<double> data;
  for (int i = 0; i < 24; ++i) data.push_back((i % 7 - 3) / 2.0);
  expect_values_near(
      norm.forward(from_vector(data, {2, 3, 4})),
      {-1.068098678419442,  -0.5933881546774677, -0.11867763093549355, 0.3560328928064806,  0.20851312470454125,
       0.7645481239166512,  1.3205831231287612,  -2.0156268721438986,  -0.7645481239166512, -0.20851312470454125,
       0.3475218745075687,  0.9035568737196786,  1.3054539402904288,   1.780164464032403,   -1.068098678419442,
       -0.5933881546774677, -0.9035568737196786, -0.3475218745075687,  0.20851312470454125, 0.7645481239166512,
       2.0156268721438986,  -1.3205831231287612, -0.7645481239166512,  -0.20851312470454125});
}

TEST(BatchNorm, RunningStatsAreNotRecorded) {
  auto norm = affine_norm();
  Tensor x = batch1();
  x.requires_grad_();
  norm->forward(x).sum().backward();
  EXPECT_FALSE(norm->running_mean.requires_grad());
  EXPECT_FALSE(norm->running_var.requires_grad());
  EXPECT_TRUE(norm->weight.grad().defined());
}

TEST(BatchNorm, WrongInputNamesTheLayerAndTheShape) {
  nn::BatchNorm1d norm1d(3);
  EXPECT_ERROR_CONTAINS(norm1d.forward(zeros({4, 2})),
                        "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true): expected "
                        "input of shape [N, 3] or [N, 3, L], found [4, 2]");
  EXPECT_ERROR_CONTAINS(norm1d.forward(zeros({4, 3, 2, 2})), "found [4, 3, 2, 2]");
  EXPECT_ERROR_CONTAINS(norm1d.forward(zeros({1, 3})),
                        "expected more than 1 value per channel when training, found input of shape [1, 3]");
  norm1d.eval();
  EXPECT_THAT(norm1d.forward(zeros({1, 3})).sizes(), ElementsAre(1, 3));  // fine with running stats
  nn::BatchNorm2d norm2d(3);
  EXPECT_ERROR_CONTAINS(norm2d.forward(zeros({4, 3})), "expected input of shape [N, 3, H, W], found [4, 3]");
  EXPECT_ERROR_CONTAINS(nn::BatchNorm2d(0), "BatchNorm2d: expected a positive num_features, found 0");
}

TEST(BatchNorm, GradientsOfFirstAndSecondOrderInTraining) {
  manual_seed(9);
  auto norm = affine_norm();
  expect_module_gradients_match(*norm, random_leaf({5, 3}));
  expect_module_gradients_match(*norm, random_leaf({2, 3, 4}));
  nn::BatchNorm2d norm2d(2, {.momentum = 1.0}, kDouble);
  norm2d.load_state_dict({{"weight", from_vector<double>({0.5, -2})}, {"bias", from_vector<double>({1, 0})}},
                         /*strict=*/false);
  expect_module_gradients_match(norm2d, random_leaf({2, 2, 3, 2}));
  nn::BatchNorm1d plain(3, {.affine = false}, kDouble);
  expect_module_gradients_match(plain, random_leaf({4, 3}));
}

TEST(BatchNorm, GradientsOfFirstAndSecondOrderInEvaluation) {
  manual_seed(10);
  auto norm = affine_norm();
  norm->forward(batch1());
  norm->eval();
  expect_module_gradients_match(*norm, random_leaf({5, 3}));
  nn::BatchNorm1d batch_stats(3, {.track_running_stats = false}, kDouble);
  batch_stats.eval();
  expect_module_gradients_match(batch_stats, random_leaf({5, 3}));
}

}  // namespace
}  // namespace distgrad
