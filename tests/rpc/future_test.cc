// Futures, promises and the executor's growth while its threads block.
#include "rpc/future.h"

#include <atomic>
#include <thread>

#include "rpc/executor.h"
#include "tests/core/test_util.h"

namespace distgrad::rpc {
namespace {

using namespace std::chrono_literals;

TEST(Future, ValueErrorAndThen) {
  Promise<int> promise;
  Future<int> future = promise.future();
  EXPECT_FALSE(future.is_ready());
  EXPECT_FALSE(future.wait_for(10ms));
  Future<std::string> text = future.then([](const Future<int>& done) { return std::to_string(done.get() * 2); });
  std::thread setter([promise]() mutable { promise.set_value(21); });
  EXPECT_EQ(text.get(), "42");
  setter.join();
  EXPECT_TRUE(future.is_ready());

  Promise<void> failing;
  failing.set_error(std::make_exception_ptr(Error("boom")));
  EXPECT_ERROR_CONTAINS(failing.future().get(), "boom");
  auto after = failing.future().then([](const Future<void>& done) { done.get(); });
  EXPECT_ERROR_CONTAINS(after.get(), "boom");  // the error propagates through then
  EXPECT_ERROR_CONTAINS(failing.set_value(), "already completed");
  EXPECT_ERROR_CONTAINS(Future<int>().get(), "invalid");
}

TEST(Future, CollectAllAndWaitAll) {
  std::vector<Promise<int>> promises(3);
  std::vector<Future<int>> futures;
  for (auto& promise : promises) futures.push_back(promise.future());
  Future<std::vector<Future<int>>> all = collect_all(futures);
  promises[2].set_value(3);
  promises[0].set_value(1);
  EXPECT_FALSE(all.is_ready());
  promises[1].set_error(std::make_exception_ptr(Error("second failed")));
  ASSERT_TRUE(all.is_ready());
  EXPECT_EQ(all.get()[2].get(), 3);
  EXPECT_ERROR_CONTAINS(wait_all(futures), "second failed");
  EXPECT_TRUE(collect_all(std::vector<Future<int>>{}).is_ready());
  EXPECT_EQ(wait_all(std::vector<Future<int>>{Future<int>::ready(5)}), std::vector<int>{5});
}

TEST(Executor, RunsEveryTaskAndDrainsOnDestruction) {
  std::atomic<int> done{0};
  {
    Executor executor(2, 2);
    for (int i = 0; i < 1000; ++i) executor.submit([&] { ++done; });
  }
  EXPECT_EQ(done.load(), 1000);
}

TEST(Executor, GrowsWhileItsThreadsBlockOnFutures) {
  // Every task waits for the next one's promise: with two threads and no growth this chain of
  // eight would deadlock.
  Executor executor(2, 16);
  constexpr int kDepth = 8;
  std::vector<Promise<int>> promises(kDepth + 1);
  for (int i = 0; i < kDepth; ++i) {
    executor.submit([&, i] { promises[i].set_value(promises[i + 1].future().get() + 1); });
  }
  executor.submit([&] { promises[kDepth].set_value(0); });
  ASSERT_TRUE(promises[0].future().wait_for(10s));
  EXPECT_EQ(promises[0].future().get(), kDepth);
  EXPECT_GT(executor.num_threads(), 2);
  EXPECT_LE(executor.num_threads(), 16);
}

}  // namespace
}  // namespace distgrad::rpc
