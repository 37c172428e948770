// Tests of the Tensor handle itself: metadata, sharing, element access and printing.
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/allocator.h"
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::values;

TEST(Tensor, DefaultConstructedIsUndefined) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_ERROR_CONTAINS(untracked::clone(t), "clone", "undefined");
}

TEST(Tensor, MetadataOfAContiguousTensor) {
  Tensor t = zeros({2, 3, 4}, {.dtype = kFloat64});
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dtype(), kFloat64);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.element_size(), 8u);
  EXPECT_EQ(t.nbytes(), 24u * 8u);
  EXPECT_EQ(untracked::select(t, 0, 1).nbytes(), 12u * 8u);  // a view's elements, not its storage's
  EXPECT_EQ(zeros({0, 5}).nbytes(), 0u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_ERROR_CONTAINS(t.size(3), "size", "dimension 3 is out of range");
}

TEST(Tensor, CopiesAreShallowAndCloneIsDeep) {
  Tensor a = zeros({3});
  Tensor shallow = a;
  Tensor deep = untracked::clone(a);
  untracked::fill_(a, 7);
  EXPECT_TRUE(shallow.is_same(a));
  EXPECT_THAT(values(shallow), ElementsAre(7, 7, 7));
  EXPECT_THAT(values(deep), ElementsAre(0, 0, 0));
}

TEST(Tensor, InPlaceOpsBumpTheSharedVersionCounter) {
  Tensor a = zeros({4});
  Tensor view = untracked::slice(a, 0, 1, 3);
  const uint64_t before = a.storage().version();
  untracked::add_(view, 1.0);
  EXPECT_EQ(a.storage().version(), before + 1);
  EXPECT_EQ(view.storage().version(), before + 1);
  EXPECT_THAT(values(a), ElementsAre(0, 1, 1, 0));
}

TEST(Tensor, ItemAndAtConvertTheElement) {
  Tensor t = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.at<int64_t>({1, 2}), 6);
  EXPECT_DOUBLE_EQ(t.at<double>({0, 1}), 2.0);
  EXPECT_EQ(untracked::select(untracked::select(t, 0, 1), 0, 0).item<int64_t>(), 4);
  EXPECT_FLOAT_EQ(scalar_tensor(2.5).item<float>(), 2.5f);
  EXPECT_ERROR_CONTAINS(t.item<int64_t>(), "item", "one element", "[2, 3]");
  EXPECT_ERROR_CONTAINS(t.at<int64_t>({2, 0}), "index 2 is out of range for dimension 0 of size 2");
  EXPECT_ERROR_CONTAINS(t.at<int64_t>({0}), "expected 2 indices");
}

TEST(Tensor, TypedDataChecksTheDtype) {
  Tensor t = zeros({2});
  EXPECT_NE(t.data<float>(), nullptr);
  EXPECT_ERROR_CONTAINS(t.data<double>(), "expected a float64 tensor", "float32 tensor of shape [2]");
}

TEST(Tensor, ToVectorFollowsLogicalOrderOfAView) {
  Tensor t = untracked::t(from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_THAT(values(t), ElementsAre(1, 4, 2, 5, 3, 6));
  EXPECT_THAT(from_vector<bool>({true, false}).to_vector<bool>(), ElementsAre(true, false));
}

TEST(Tensor, ViewOutsideTheStorageIsRejected) {
  Tensor t = zeros({4});
  EXPECT_ERROR_CONTAINS(Tensor(t.storage(), {5}, {1}, 0, kFloat32), "needs 20 bytes", "holds 16");
}

TEST(Tensor, PrintsLikePyTorch) {
  std::ostringstream out;
  out << from_vector<double>({1.5, -2, 3.25, 4}, {2, 2});
  EXPECT_EQ(out.str(), "tensor([[ 1.5000, -2.0000],\n        [ 3.2500,  4.0000]], dtype=float64)");
  std::ostringstream integral;
  integral << from_vector<float>({1, 2, 3});
  EXPECT_EQ(integral.str(), "tensor([1., 2., 3.])");
  std::ostringstream booleans;
  booleans << from_vector<bool>({true, false});
  EXPECT_EQ(booleans.str(), "tensor([ True, False], dtype=bool)");
  std::ostringstream large;
  large << arange(2000);
  EXPECT_THAT(large.str(), HasSubstr("[   0,    1,    2, ..., 1997, 1998, 1999], dtype=int64)"));
}

}  // namespace
}  // namespace distgrad

namespace distgrad {
namespace {

// Allocates `numel` floats, frees them, and returns where their block was.
void* address_of_a_freed_block(int64_t numel) { return empty({numel}).data_ptr(); }

TEST(CpuAllocator, ReusesLargeBlocksAndReleasesThem) {
  release_cached_cpu_memory();
  void* first_address = address_of_a_freed_block(1 << 20);  // 4 MiB
  EXPECT_GE(cached_cpu_bytes(), size_t{4} << 20);
  Tensor again = empty({1 << 20});
  EXPECT_EQ(again.data_ptr(), first_address);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(again.data_ptr()) % 64, 0u);
  again = Tensor();
  release_cached_cpu_memory();
  EXPECT_EQ(cached_cpu_bytes(), 0u);
}

// Frees a block of `first_numel` floats, which must stay cached as `class_bytes`, then allocates
// `second_numel` floats, which must reuse it; returns that tensor.
Tensor reused_block(int64_t first_numel, size_t class_bytes, int64_t second_numel) {
  release_cached_cpu_memory();
  void* first_address = address_of_a_freed_block(first_numel);
  EXPECT_EQ(cached_cpu_bytes(), class_bytes);
  Tensor same_class = empty({second_numel});
  EXPECT_EQ(same_class.data_ptr(), first_address);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(same_class.data_ptr()) % 64, 0u);
  EXPECT_EQ(cached_cpu_bytes(), 0u);
  return same_class;
}

TEST(CpuAllocator, ReusesMediumBlocksInSizeClasses) {
  // 200000 and 240000 bytes: the 256 KiB class.
  EXPECT_TRUE(reused_block(50000, size_t{256} << 10, 60000).defined());
  release_cached_cpu_memory();
}

TEST(CpuAllocator, ReusesSmallBlocksInPowerOfTwoClassesPerThread) {
  Tensor same_class = reused_block(1000, size_t{4} << 10, 600);  // 4000 and 2400 bytes: the 4 KiB class
  void* first_address = same_class.data_ptr();
  Tensor other_class = empty({100});  // 400 bytes: another class, a fresh block
  EXPECT_NE(other_class.data_ptr(), first_address);
  EXPECT_EQ(cached_cpu_bytes(), 0u);
  // A block freed by another thread goes to that thread's cache, which frees it when it ends.
  std::thread([moved = std::move(same_class)]() mutable { moved = Tensor(); }).join();
  EXPECT_EQ(cached_cpu_bytes(), 0u);
  other_class = Tensor();
  EXPECT_EQ(cached_cpu_bytes(), size_t{512});
  release_cached_cpu_memory();
  EXPECT_EQ(cached_cpu_bytes(), 0u);
}

TEST(CpuAllocator, CountsTheSmallBlocksEveryLiveThreadKeeps) {
  release_cached_cpu_memory();
  const size_t before = cached_cpu_bytes_of_every_thread();
  Tensor block = empty({1000});  // 4000 bytes: the 4 KiB class
  std::mutex mutex;
  std::condition_variable changed;
  bool freed = false, done = false;
  std::thread keeper([&] {
    block = Tensor();  // kept by this thread's cache
    std::unique_lock<std::mutex> lock(mutex);
    freed = true;
    changed.notify_all();
    changed.wait(lock, [&] { return done; });
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return freed; });
  }
  EXPECT_EQ(cached_cpu_bytes(), 0u);  // this thread's own cache is empty
  EXPECT_EQ(cached_cpu_bytes_of_every_thread(), before + (size_t{4} << 10));
  {
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
  }
  changed.notify_all();
  keeper.join();  // the thread's cache went back with it
  EXPECT_EQ(cached_cpu_bytes_of_every_thread(), before);
}

}  // namespace
}  // namespace distgrad
