// Shared-memory segments in one process (transport/shared_memory.h): a process can open its own
// memfds through /proc/self, so sender and receiver sides meet here without a second process. The
// multi-process behaviour, through RPC, is in tests/rpc/shared_memory_test.cc.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "core/creation.h"
#include "core/ops.h"
#include "tests/core/test_util.h"
#include "transport/shared_memory.h"

namespace distgrad::transport::shm {
namespace {

using ::testing::HasSubstr;

Tensor floats(int64_t n, double start = 0) { return arange(start, start + static_cast<double>(n), 1.0); }

std::string segment_error(const std::function<void()>& call) { return testing::message_of<SegmentError>(call); }

TEST(SharedMemorySegments, AViewSeesTheSentBytesAndKeepsTheSegmentBusyUntilDropped) {
  SendPool pool(size_t{1} << 30);
  PeerSegments receiver(::getpid());
  const Tensor sent = floats(1 << 16);
  const std::optional<SegmentRef> ref = pool.put(sent);
  ASSERT_TRUE(ref.has_value());
  {
    const Tensor view = receiver.view(*ref, {1 << 16}, kFloat32);
    EXPECT_TRUE(untracked::equal(view, sent));
    // While the view lives, the next tensor needs a second segment.
    ASSERT_TRUE(pool.put(floats(1 << 16, 5)).has_value());
    EXPECT_EQ(pool.size().first, 2u);
  }
  // The second segment was never received; the first is free again and reused.
  const std::optional<SegmentRef> again = pool.put(floats(1 << 16, 9));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->inode, ref->inode);
  EXPECT_EQ(pool.size().first, 2u);
  EXPECT_TRUE(untracked::equal(receiver.view(*again, {1 << 16}, kFloat32), floats(1 << 16, 9)));
}

TEST(SharedMemorySegments, ASegmentIsReceivedOnce) {
  SendPool pool(size_t{1} << 30);
  PeerSegments receiver(::getpid());
  const SegmentRef ref = *pool.put(floats(1000));
  const Tensor view = receiver.view(ref, {1000}, kFloat32);
  EXPECT_THAT(segment_error([&] { receiver.view(ref, {1000}, kFloat32); }), HasSubstr("already received"));
}

TEST(SharedMemorySegments, NonContiguousTensorsArriveAsTheirValues) {
  SendPool pool(size_t{1} << 30);
  PeerSegments receiver(::getpid());
  const Tensor matrix = untracked::reshape(floats(600), {20, 30});
  const Tensor transposed = untracked::transpose(matrix, 0, 1);
  const Tensor view = receiver.view(*pool.put(transposed), {30, 20}, kFloat32);
  EXPECT_TRUE(untracked::equal(view, untracked::contiguous(transposed)));
}

TEST(SharedMemorySegments, TheCapSendsTheRestOverTheNetwork) {
  SendPool pool(size_t{1} << 16);  // one segment of the smallest size
  PeerSegments receiver(::getpid());
  const std::optional<SegmentRef> first = pool.put(floats(1000));
  ASSERT_TRUE(first.has_value());
  const Tensor held = receiver.view(*first, {1000}, kFloat32);
  EXPECT_FALSE(pool.put(floats(1000)).has_value());  // busy, and no room for another
  EXPECT_FALSE(pool.put(floats(1 << 15)).has_value());
}

TEST(SharedMemorySegments, AViewOutlivesItsSender) {
  PeerSegments receiver(::getpid());
  Tensor view;
  {
    SendPool pool(size_t{1} << 30);
    view = receiver.view(*pool.put(floats(5000, 3)), {5000}, kFloat32);
  }  // the sender's segments are unmapped and closed; the receiver's mapping keeps the memory
  EXPECT_TRUE(untracked::equal(view, floats(5000, 3)));
}

TEST(SharedMemorySegments, ReferencesThatDoNotMatchAreRefusedNamingWhat) {
  SendPool pool(size_t{1} << 30);
  PeerSegments receiver(::getpid());
  const SegmentRef ref = *pool.put(floats(1000));
  SegmentRef wrong_inode = ref;
  wrong_inode.inode += 1;
  EXPECT_THAT(segment_error([&] { receiver.view(wrong_inode, {1000}, kFloat32); }), HasSubstr("expected inode"));
  SegmentRef wrong_ticket = ref;
  wrong_ticket.ticket += 1;
  EXPECT_THAT(segment_error([&] { receiver.view(wrong_ticket, {1000}, kFloat32); }),
              HasSubstr("holds message " + std::to_string(ref.ticket)));
  EXPECT_THAT(segment_error([&] { receiver.view(ref, {1 << 20}, kFloat32); }), HasSubstr("cannot hold"));
  SegmentRef no_such_fd = ref;
  no_such_fd.fd = 1 << 20;
  EXPECT_THAT(segment_error([&] { receiver.view(no_such_fd, {1000}, kFloat32); }), HasSubstr("cannot open"));
  SegmentRef zero_ticket = ref;
  zero_ticket.ticket = 0;
  EXPECT_THAT(segment_error([&] { receiver.view(zero_ticket, {1000}, kFloat32); }), HasSubstr("invalid"));
  // None of that consumed the message.
  EXPECT_TRUE(untracked::equal(receiver.view(ref, {1000}, kFloat32), floats(1000)));
}

// Note [Only our own segments]: a reference to any other file the sender has open is refused
// before anything is written to it, even with the file's own inode and size.
TEST(SharedMemorySegments, AReferenceToAFileThatIsNotASegmentIsRefusedAndTheFileLeftAlone) {
  PeerSegments receiver(::getpid());
  testing::ScratchDir scratch;
  const std::string path = scratch.file("dataset.bin");
  const std::string contents(size_t{1} << 20, 'x');
  {
    std::ofstream file(path, std::ios::binary);
    file << contents;
  }
  const auto reference_to = [](int fd) {
    struct stat info {};
    EXPECT_EQ(::fstat(fd, &info), 0);
    return SegmentRef{fd, static_cast<uint64_t>(info.st_ino), static_cast<uint64_t>(info.st_size), 1};
  };
  const int read_only = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  EXPECT_THAT(segment_error([&] { receiver.view(reference_to(read_only), {16}, kFloat32); }),
              HasSubstr("is not a distgrad segment (" + path));
  ::close(read_only);
  std::ifstream file(path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(file), {}), contents) << "the file was written to";

  // A memfd of the segments' name that is not sealed as they are: refused too.
  const int unsealed = ::memfd_create("distgrad-segment", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(::ftruncate(unsealed, 1 << 20), 0);
  EXPECT_THAT(segment_error([&] { receiver.view(reference_to(unsealed), {16}, kFloat32); }),
              HasSubstr("not sealed as one"));
  ::close(unsealed);
}

TEST(SharedMemoryLinks, PeersOnThisHostReadEachOthersSegmentsOthersDoNot) {
  Links links(/*threshold=*/1024, size_t{1} << 30);
  links.add_peer(0, links.card());                               // this process, as a peer
  links.add_peer(2, std::to_string(::getpid()) + " 1000000 7");  // a probe that cannot be opened
  EXPECT_TRUE(links.reads_from(0));
  EXPECT_FALSE(links.reads_from(1));  // never added: another host, or the path off there
  EXPECT_FALSE(links.reads_from(2));
  EXPECT_FALSE(links.read_by(0));  // until the peer says it can read them
  links.set_read_by(0, true);
  EXPECT_TRUE(links.read_by(0));
  EXPECT_FALSE(links.put(0, floats(10)).has_value());  // below the threshold
  const std::optional<SegmentRef> ref = links.put(0, floats(1000));
  ASSERT_TRUE(ref.has_value());
  EXPECT_TRUE(untracked::equal(links.view(0, *ref, {1000}, kFloat32), floats(1000)));
  EXPECT_EQ(links.counters().shared_tensors.load(), 1u);
  EXPECT_EQ(links.counters().shared_bytes.load(), 4000u);
  links.set_read_by(1, true);  // ignored: not on this host
  EXPECT_FALSE(links.read_by(1));
  EXPECT_FALSE(links.put(1, floats(1000)).has_value());
  EXPECT_THAT(segment_error([&] { links.view(1, *ref, {1000}, kFloat32); }), HasSubstr("not on this host"));
}

// A worker that rejoined the world is a new process: adding its rank again starts its link anew
// (its agreement and pool), while a tensor received over the old link stays readable.
TEST(SharedMemoryLinks, AddingAPeerAgainReplacesItsLink) {
  Links links(/*threshold=*/1024, size_t{1} << 30);
  links.add_peer(0, links.card());
  links.set_read_by(0, true);
  const std::optional<SegmentRef> ref = links.put(0, floats(1000));
  ASSERT_TRUE(ref.has_value());
  const Tensor received = links.view(0, *ref, {1000}, kFloat32);
  EXPECT_EQ(links.pool_size().first, 1u);
  links.add_peer(0, links.card());
  EXPECT_FALSE(links.read_by(0));          // the new process has not said it can read them
  EXPECT_EQ(links.pool_size().first, 0u);  // the old pool went with the old link
  EXPECT_TRUE(links.reads_from(0));        // probed anew
  EXPECT_TRUE(untracked::equal(received, floats(1000)));
  links.add_peer(0, std::to_string(::getpid()) + " 1000000 7");  // a card whose probe cannot be opened
  EXPECT_FALSE(links.reads_from(0));
}

// Note [Shared tensors]: a tensor in shared memory is named, not copied, whatever its size; the
// receiver's tensor views that memory.
TEST(SharedMemoryLinks, ATensorInSharedMemoryIsNamedNotCopiedAndViewedInPlace) {
  Links links(/*threshold=*/1 << 16, size_t{1} << 30);
  links.add_peer(0, links.card());
  const Tensor shared = floats(1000).share_memory_();
  const Tensor tail = untracked::slice(shared, 0, 10, 1000);
  const std::optional<SegmentRef> ref = links.put(0, tail);
  ASSERT_TRUE(ref.has_value());
  EXPECT_TRUE(ref->tensor_storage);
  EXPECT_EQ(ref->byte_offset, 40u);
  EXPECT_EQ(shared.storage().shared_memory()->messages_in_flight(), 1u);
  EXPECT_EQ(links.counters().referenced_tensors.load(), 1u);
  EXPECT_EQ(links.counters().shared_tensors.load(), 0u);
  EXPECT_EQ(links.pool_size().first, 0u) << "no segment was needed";

  const Tensor received = links.view(0, *ref, {990}, kFloat32);
  EXPECT_EQ(shared.storage().shared_memory()->messages_in_flight(), 0u);
  EXPECT_EQ(received.data_ptr(), tail.data_ptr()) << "this process's own memory was mapped again";
  EXPECT_TRUE(received.is_shared());
  untracked::fill_(received, 5.0);
  EXPECT_EQ(shared.at<float>({10}), 5.0f);
  EXPECT_EQ(shared.at<float>({9}), 9.0f);

  // Not contiguous: copied into a segment, as any tensor of its size.
  const Tensor columns = untracked::transpose(untracked::reshape(floats(1 << 16).share_memory_(), {256, 256}), 0, 1);
  const std::optional<SegmentRef> copied = links.put(0, columns);
  ASSERT_TRUE(copied.has_value());
  EXPECT_FALSE(copied->tensor_storage);
  EXPECT_TRUE(untracked::equal(links.view(0, *copied, {256, 256}, kFloat32), columns));
}

TEST(SharedMemoryLinks, AReferenceToSharedMemoryThatDoesNotFitIsRefused) {
  Links links(/*threshold=*/1 << 16, size_t{1} << 30);
  links.add_peer(0, links.card());
  const Tensor shared = floats(1000).share_memory_();
  const SegmentRef ref = *links.put(0, shared);
  SegmentRef misaligned = ref;
  misaligned.byte_offset = 2;
  EXPECT_THAT(segment_error([&] { links.view(0, misaligned, {10}, kFloat32); }), HasSubstr("cannot start at byte 2"));
  SegmentRef past_the_end = ref;
  past_the_end.byte_offset = 3000;
  EXPECT_THAT(segment_error([&] { links.view(0, past_the_end, {1000}, kFloat32); }), HasSubstr("cannot hold"));
  // A segment named as a tensor's memory is not opened as one.
  Segment segment(4096);
  SegmentRef not_a_tensor = segment.ref(1);
  not_a_tensor.tensor_storage = true;
  EXPECT_THAT(segment_error([&] { links.view(0, not_a_tensor, {16}, kFloat32); }),
              HasSubstr("is not a distgrad shared tensor"));
  EXPECT_TRUE(untracked::equal(links.view(0, ref, {1000}, kFloat32), floats(1000)));
}

TEST(SharedMemoryLinks, AMalformedCardIsAnErrorNamingTheWorker) {
  Links links(1024, size_t{1} << 30);
  try {
    links.add_peer(3, "not numbers");
    FAIL() << "a malformed card was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("worker 3"));
    EXPECT_THAT(error.what(), HasSubstr("not numbers"));
  }
}

}  // namespace
}  // namespace distgrad::transport::shm
