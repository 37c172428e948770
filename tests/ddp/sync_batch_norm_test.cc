// SyncBatchNorm in one process (a world of 1): its output equals BatchNorm's, and its
// gradients, through the differentiable all-reduce, pass gradcheck and gradgradcheck in
// float64. The multi-rank behaviour is tested across processes (ddp_test.cc).
#include "ddp/sync_batch_norm.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/random.h"
#include "ddp/process_group.h"
#include "rendezvous/net_util.h"

namespace distgrad::ddp {
namespace {

class SyncBatchNormTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::unsetenv("RANK");
    ::unsetenv("WORLD_SIZE");
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(rendezvous::pick_free_port()).c_str(), 1);
    init_process_group({.backend = Backend::kCpu, .timeout = std::chrono::seconds(30)});
  }
  static void TearDownTestSuite() { destroy_process_group(); }
};

TEST_F(SyncBatchNormTest, MatchesBatchNormInAWorldOfOne) {
  manual_seed(3);
  const Tensor x = randn({6, 3, 2}, {.dtype = kFloat64});
  SyncBatchNorm sync(3, {}, {.dtype = kFloat64});
  nn::BatchNorm1d plain(3, {}, {.dtype = kFloat64});
  const std::vector<double> a = sync.forward(x).to_vector<double>(), b = plain.forward(x).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
  EXPECT_NEAR(sync.running_var.to_vector<double>()[1], plain.running_var.to_vector<double>()[1], 1e-12);
}

TEST_F(SyncBatchNormTest, GradientsPassGradcheckAndGradgradcheck) {
  manual_seed(4);
  auto bn = std::make_shared<SyncBatchNorm>(3, nn::BatchNormOptions{}, TensorOptions{.dtype = kFloat64});
  const Tensor x = randn({5, 3}, {.dtype = kFloat64}).requires_grad_();
  const Tensor mix = randn({5, 3}, {.dtype = kFloat64});
  // A weighted sum, so that the gradient is not the zero that a plain sum of a normalised batch has.
  auto fn = [&](const autograd::TensorList& inputs) {
    return autograd::TensorList{(bn->forward(inputs[0]) * mix).sum()};
  };
  EXPECT_TRUE(autograd::gradcheck(fn, {x}));
  EXPECT_TRUE(autograd::gradgradcheck(fn, {x}));
}

}  // namespace
}  // namespace distgrad::ddp
