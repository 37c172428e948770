// Autocast (autograd/autocast.h): which ops cast to the scope's half dtype or to float32, the
// scope's nesting and threads, and gradients through the casts, taken after or inside the scope.
#include "autograd/autocast.h"

#include <cmath>
#include <thread>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using autograd::AutocastGuard;
using testing::values;

Tensor float32_leaf(const Shape& sizes, uint64_t seed) {
  Generator generator(seed);
  Tensor t = randn(sizes, {}, generator);
  t.requires_grad_();
  return t;
}

TEST(Autocast, ProductsRunInTheScopesDtypeAndReductionsInFloat32) {
  const Tensor a = randn({4, 8}), b = randn({8, 3}), bias = randn({3});
  const Tensor image = randn({1, 2, 5, 5}), filters = randn({3, 2, 3, 3});
  AutocastGuard autocast(DeviceType::kCPU);  // bfloat16, the CPU's default
  EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
  EXPECT_EQ(addmm(bias, a, b).dtype(), kBFloat16);
  EXPECT_EQ(conv2d(image, filters).dtype(), kBFloat16);
  const Tensor product = matmul(a, b);
  EXPECT_EQ(values(product), values(untracked::matmul(untracked::to(a, kBFloat16), untracked::to(b, kBFloat16))));
  for (const Tensor& result : {softmax(product, 1), log_softmax(product, 1), sum(product), exp(product),
                               log(abs(product)), pow(product, 2.0), norm(product), cumsum(product, 0)}) {
    EXPECT_EQ(result.dtype(), kFloat32);
  }
  EXPECT_EQ(relu(product).dtype(), kBFloat16);                             // neither list: the input's dtype
  EXPECT_EQ(add(product, bias).dtype(), kFloat32);                         // bfloat16 and float32 meet in float32
  EXPECT_EQ(matmul(to(a, kFloat64), to(b, kFloat64)).dtype(), kFloat64);   // float64 is never cast
  EXPECT_EQ(matmul(to(a, kFloat16), to(b, kFloat16)).dtype(), kBFloat16);  // the other half dtype is
}

TEST(Autocast, ScopesNestRestoreAndStayInTheirThreadAndDevice) {
  const Tensor a = randn({2, 2});
  EXPECT_FALSE(autograd::is_autocast_enabled(DeviceType::kCPU));
  {
    AutocastGuard outer(DeviceType::kCPU, kFloat16);
    EXPECT_TRUE(autograd::is_autocast_enabled(DeviceType::kCPU));
    EXPECT_EQ(autograd::autocast_dtype(DeviceType::kCPU), kFloat16);
    EXPECT_EQ(matmul(a, a).dtype(), kFloat16);
    {
      AutocastGuard off(DeviceType::kCPU, std::nullopt, /*enabled=*/false);
      EXPECT_EQ(matmul(a, a).dtype(), kFloat32);
    }
    EXPECT_EQ(matmul(a, a).dtype(), kFloat16);
    DType in_other_thread = kFloat16;
    std::thread([&] { in_other_thread = matmul(a, a).dtype(); }).join();
    EXPECT_EQ(in_other_thread, kFloat32);
  }
  EXPECT_EQ(matmul(a, a).dtype(), kFloat32);
  {
    AutocastGuard on_cuda(DeviceType::kCUDA);  // CPU tensors are not cast
    EXPECT_EQ(autograd::autocast_dtype(DeviceType::kCUDA), kFloat16);
    EXPECT_EQ(matmul(a, a).dtype(), kFloat32);
  }
  EXPECT_ERROR_CONTAINS(AutocastGuard(DeviceType::kCPU, kFloat32), "AutocastGuard: expected float16 or bfloat16",
                        "found float32");
}

// sum(softmax(x w) * t): w float32; under autocast the product is bfloat16, the softmax float32.
Tensor score(const Tensor& x, const Tensor& w, const Tensor& t) { return sum(mul(softmax(matmul(x, w), 1), t)); }

TEST(Autocast, Float32ParametersGetFloat32GradientsNearTheFloat32Ones) {
  const Tensor x = randn({16, 32}), t = randn({16, 8});
  const Tensor w = float32_leaf({32, 8}, 1), reference = float32_leaf({32, 8}, 1);
  Tensor loss;
  {
    AutocastGuard autocast(DeviceType::kCPU);
    loss = score(x, w, t);
  }
  EXPECT_EQ(loss.dtype(), kFloat32);
  loss.backward();
  score(x, reference, t).backward();
  ASSERT_EQ(w.grad().dtype(), kFloat32);
  const std::vector<double> found = values(w.grad()), expected = values(reference.grad());
  double largest = 0;
  for (double g : expected) largest = std::max(largest, std::abs(g));
  for (size_t i = 0; i < found.size(); ++i) EXPECT_NEAR(found[i], expected[i], 0.03 * largest) << i;
  // Not the float32 gradient itself: the product did run in bfloat16.
  EXPECT_NE(found, expected);
}

TEST(Autocast, TheBackwardPassRunsWithoutItInsideAScope) {
  const Tensor x = randn({6, 5}), t = randn({6, 4});
  const Tensor after = float32_leaf({5, 4}, 2), inside = float32_leaf({5, 4}, 2);
  Tensor first, second;
  {
    AutocastGuard autocast(DeviceType::kCPU);
    first = score(x, after, t);
    second = score(x, inside, t);
    second.backward();  // its backward ops run in their forward ops' dtypes, not cast again
  }
  first.backward();
  EXPECT_EQ(values(inside.grad()), values(after.grad()));
}

TEST(Autocast, HalfLeavesGetHalfGradients) {
  Tensor w = to(randn({3, 3}), kFloat16);
  w.requires_grad_();
  const Tensor x = to(randn({2, 3}), kFloat16);
  sum(tanh(matmul(x, w))).backward();
  EXPECT_EQ(w.grad().dtype(), kFloat16);
  // The gradient of a float16 leaf mixed with float32: promoted forward, rounded back to float16.
  Tensor h = to(randn({3}), kFloat16);
  h.requires_grad_();
  const Tensor f = randn({3});
  const Tensor y = mul(h, f);
  EXPECT_EQ(y.dtype(), kFloat32);
  sum(y).backward();
  EXPECT_EQ(h.grad().dtype(), kFloat16);
  EXPECT_EQ(values(h.grad()), values(untracked::to(f, kFloat16)));
}

}  // namespace
}  // namespace distgrad
