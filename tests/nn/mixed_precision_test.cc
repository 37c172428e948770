// Mixed precision with nn's layers and losses: autocast's policy through a classifier (linear
// layers in bfloat16 or float16, losses and normalisation in float32), float16 training with
// GradScaler, and a model held in bfloat16 that trains.
#include <cmath>
#include <memory>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/normalization.h"
#include "nn/sequential.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad::nn {
namespace {

using autograd::AutocastGuard;
using testing::values;

std::shared_ptr<Sequential> classifier(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Linear>(10, 32), std::make_shared<ReLU>(), std::make_shared<Linear>(32, 4)});
}

struct Data {
  Tensor x, labels;
};

Data blobs(uint64_t seed) {
  Generator generator(seed);
  const Tensor labels = randint(0, 4, {64}, {.dtype = kInt64}, generator);
  // Each class a cluster around its own centre.
  const Tensor centres = randn({4, 10}, {}, generator);
  return {add(index_select(centres, 0, labels), mul(randn({64, 10}, {}, generator), 0.3)), labels};
}

TEST(MixedPrecision, AClassifierUnderAutocastComputesInHalfAndItsLossInFloat32) {
  for (const DType dtype : {kBFloat16, kFloat16}) {
    const Data data = blobs(1);
    auto net = classifier(2), reference = classifier(2);
    Tensor logits, loss;
    {
      AutocastGuard autocast(DeviceType::kCPU, dtype);
      logits = net->forward(data.x);
      loss = cross_entropy(logits, data.labels);
    }
    EXPECT_EQ(logits.dtype(), dtype);
    EXPECT_EQ(loss.dtype(), kFloat32);
    loss.backward();
    cross_entropy(reference->forward(data.x), data.labels).backward();
    const std::vector<Tensor> found = net->parameters(), expected = reference->parameters();
    for (size_t i = 0; i < found.size(); ++i) {
      ASSERT_EQ(found[i].grad().dtype(), kFloat32) << i;
      const double scale = norm(expected[i].grad()).item<double>();
      EXPECT_LT(norm(sub(found[i].grad(), expected[i].grad())).item<double>(), 0.05 * scale)
          << dtype_name(dtype) << " parameter " << i;
    }
  }
}

TEST(MixedPrecision, NormalisationAndLossesComputeInFloat32UnderAutocast) {
  const Tensor half = to(randn({4, 6, 3, 3}), kBFloat16);
  LayerNorm layer_norm({3});
  GroupNorm group_norm(2, 6);
  BatchNorm2d batch_norm(6);
  AutocastGuard autocast(DeviceType::kCPU);
  EXPECT_EQ(layer_norm.forward(half).dtype(), kFloat32);
  EXPECT_EQ(group_norm.forward(half).dtype(), kFloat32);
  EXPECT_EQ(batch_norm.forward(half).dtype(), kFloat32);
  const Tensor flat = reshape(half, {4, 54}), target = randn({4, 54});
  EXPECT_EQ(mse_loss(flat, target).dtype(), kFloat32);
  EXPECT_EQ(smooth_l1_loss(flat, target).dtype(), kFloat32);
  EXPECT_EQ(binary_cross_entropy_with_logits(flat, sigmoid(target)).dtype(), kFloat32);
  EXPECT_EQ(kl_div(log_softmax(flat, 1), softmax(target, 1), Reduction::kBatchMean).dtype(), kFloat32);
  MultiheadAttention attention(8, 2);
  EXPECT_EQ(attention.forward(randn({2, 5, 8})).dtype(), kBFloat16);  // its projections are linear layers
}

TEST(MixedPrecision, Float16TrainingWithGradScalerLearns) {
  const Data data = blobs(3);
  auto net = classifier(4);
  optim::SGD optimizer(net->parameters(), 0.5);
  optim::GradScaler scaler;
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    optimizer.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(DeviceType::kCPU, kFloat16);
      loss = cross_entropy(net->forward(data.x), data.labels);
    }
    scaler.scale(loss).backward();
    EXPECT_TRUE(scaler.step(optimizer)) << "step " << step;  // no overflow at these magnitudes
    scaler.update();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.2 * first);
  EXPECT_EQ(scaler.get_scale(), 65536.0);  // no backoff
}

TEST(MixedPrecision, AModelHeldInBFloat16Trains) {
  const Data data = blobs(5);
  auto net = classifier(6);
  net->to(kBFloat16);
  optim::SGD optimizer(net->parameters(), 0.5);
  const Tensor x = to(data.x, kBFloat16);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    optimizer.zero_grad();
    const Tensor loss = cross_entropy(net->forward(x), data.labels);
    EXPECT_EQ(loss.dtype(), kBFloat16);
    loss.backward();
    for (const Tensor& p : net->parameters()) ASSERT_EQ(p.grad().dtype(), kBFloat16);
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.2 * first);
}

}  // namespace
}  // namespace distgrad::nn
