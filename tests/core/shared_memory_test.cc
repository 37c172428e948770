// Shared memory and tensors in it (core/shared_memory.h, Tensor::share_memory_): a process can open
// its own memfds through /proc/self, so both sides of a transfer meet here in one process. Tensors
// in shared memory travelling between workers are in tests/rpc/shared_memory_test.cc.
#include "core/shared_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "core/creation.h"
#include "core/cuda.h"
#include "core/ops.h"

namespace distgrad {
namespace {

using ::testing::HasSubstr;

// Whether descriptor `fd` of this process is open on inode `inode`.
bool descriptor_holds(int fd, uint64_t inode) {
  struct stat info {};
  return ::stat(("/proc/self/fd/" + std::to_string(fd)).c_str(), &info) == 0 &&
         static_cast<uint64_t>(info.st_ino) == inode;
}

TEST(SharedTensors, ShareMemoryMovesTheStorageOfEveryViewAndKeepsTheValues) {
  const Tensor tensor = arange(0.0, 1000.0, 1.0);
  const Tensor view = untracked::slice(tensor, 0, 10, 20);
  EXPECT_FALSE(tensor.is_shared());
  EXPECT_TRUE(tensor.share_memory_().is_same(tensor));
  EXPECT_TRUE(tensor.is_shared());
  EXPECT_TRUE(view.is_shared());
  EXPECT_TRUE(untracked::equal(tensor, arange(0.0, 1000.0, 1.0)));
  untracked::fill_(view, -1.0);
  EXPECT_EQ(tensor.at<float>({15}), -1.0f) << "the view no longer shares the tensor's memory";
  void* const data = tensor.data_ptr();
  tensor.share_memory_();
  EXPECT_EQ(tensor.data_ptr(), data) << "sharing a shared tensor again moved it";
  EXPECT_GE(tensor.storage().shared_memory()->data_bytes(), tensor.nbytes());
}

TEST(SharedTensors, CudaTensorsStayOnTheirDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Tensor tensor = untracked::to(arange(0.0, 10.0, 1.0), Device::cuda(0));
  tensor.share_memory_();
  EXPECT_FALSE(tensor.is_shared());
  EXPECT_TRUE(tensor.device().is_cuda());
}

TEST(SharedMemory, AnotherMappingSeesTheSameBytesAndOnlyTheKindNamedOpens) {
  const std::shared_ptr<SharedMemory> made = SharedMemory::create(4096, SharedMemory::Kind::kTensorStorage);
  made->data()[100] = 42;
  std::string why;
  EXPECT_EQ(
      SharedMemory::open(::getpid(), made->fd(), made->inode(), made->file_bytes(), SharedMemory::Kind::kSegment, &why),
      nullptr);
  EXPECT_THAT(why, HasSubstr("is not a distgrad segment (/memfd:distgrad-tensor"));
  EXPECT_FALSE(SharedMemory::can_open(::getpid(), made->fd(), made->inode(), SharedMemory::Kind::kSegment));
  EXPECT_EQ(SharedMemory::open(::getpid(), made->fd(), made->inode() + 1, 0, SharedMemory::Kind::kTensorStorage, &why),
            nullptr);
  EXPECT_THAT(why, HasSubstr("is not the memory named"));

  const std::shared_ptr<SharedMemory> opened = SharedMemory::open(
      ::getpid(), made->fd(), made->inode(), made->file_bytes(), SharedMemory::Kind::kTensorStorage, &why);
  ASSERT_NE(opened, nullptr) << why;
  EXPECT_NE(opened->data(), made->data());
  EXPECT_EQ(opened->data()[100], 42);
  opened->data()[101] = 7;
  EXPECT_EQ(made->data()[101], 7);
}

TEST(SharedMemory, FindReturnsTheLiveTensorStorageOfAnInodeOnly) {
  std::shared_ptr<SharedMemory> storage = SharedMemory::create(16, SharedMemory::Kind::kTensorStorage);
  const std::shared_ptr<SharedMemory> segment = SharedMemory::create(16, SharedMemory::Kind::kSegment);
  const uint64_t inode = storage->inode();
  EXPECT_EQ(SharedMemory::find(inode), storage);
  EXPECT_EQ(SharedMemory::find(segment->inode()), nullptr);
  storage.reset();
  EXPECT_EQ(SharedMemory::find(inode), nullptr);
}

// Note [Shared tensors]: memory dropped while a message names it stays open for its receiver.
TEST(SharedMemory, AMessageInFlightKeepsTheDescriptorOpenUntilReceived) {
  std::shared_ptr<SharedMemory> sender = SharedMemory::create(1 << 20, SharedMemory::Kind::kTensorStorage);
  const int fd = sender->fd();
  const uint64_t inode = sender->inode();
  const uint64_t file_bytes = sender->file_bytes();
  sender->data()[0] = 9;
  sender->pin_for_message();
  sender->pin_for_message();
  sender.reset();
  ASSERT_TRUE(descriptor_holds(fd, inode)) << "the descriptor closed with two messages in flight";

  std::string why;
  std::shared_ptr<SharedMemory> receiver =
      SharedMemory::open(::getpid(), fd, inode, file_bytes, SharedMemory::Kind::kTensorStorage, &why);
  ASSERT_NE(receiver, nullptr) << why;
  EXPECT_EQ(receiver->data()[0], 9);
  EXPECT_EQ(receiver->messages_in_flight(), 2u);
  receiver->release_message();
  SharedMemory::create(0, SharedMemory::Kind::kTensorStorage);  // closes what can be closed
  EXPECT_TRUE(descriptor_holds(fd, inode)) << "the descriptor closed with a message in flight";
  receiver->release_message();
  receiver->release_message();  // one more than pinned: stays at zero
  EXPECT_EQ(receiver->messages_in_flight(), 0u);
  SharedMemory::create(0, SharedMemory::Kind::kTensorStorage);
  EXPECT_FALSE(descriptor_holds(fd, inode)) << "the sender's descriptor stayed open once every message was received";
  EXPECT_EQ(receiver->data()[0], 9) << "the receiver's mapping outlives the sender's descriptor";
}

TEST(SharedMemory, TheHostIdentityNamesTheBootAndTheNamespaces) {
  const std::string identity = SharedMemory::host_identity();
  EXPECT_EQ(identity, SharedMemory::host_identity());
  EXPECT_THAT(identity, HasSubstr("pid:["));
  EXPECT_THAT(identity, HasSubstr("net:["));
}

}  // namespace
}  // namespace distgrad
