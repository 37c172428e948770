// Frames: round trips of calls and replies, and every way a received message can be wrong.
#include "rpc/frame.h"

#include <gmock/gmock.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "core/creation.h"
#include "core/ops.h"
#include "rpc/codec.h"
#include "tests/core/test_util.h"
#include "transport/shared_memory.h"

namespace distgrad::rpc {
namespace {

using ::testing::HasSubstr;

struct Built {
  wire::CallHeader header;
  grpc::ByteBuffer message;
};

Built build(const std::vector<Tensor>& tensors, std::string payload = "payload") {
  Built built;
  built.header.set_function("f");
  built.header.set_num_arguments(1);
  built.header.set_payload_bytes(payload.size());
  std::vector<WireTensor> wire;
  for (const Tensor& t : tensors) wire.push_back({untracked::contiguous(t), Device::cpu()});
  for (const WireTensor& t : wire) describe_tensor(t, built.header.add_tensors());
  built.message = encode_frame(built.header, payload, wire);
  return built;
}

std::string flatten(const grpc::ByteBuffer& message) {
  grpc::Slice slice;
  EXPECT_TRUE(message.DumpToSingleSlice(&slice).ok());
  return std::string(reinterpret_cast<const char*>(slice.begin()), slice.size());
}

grpc::ByteBuffer message_of(const std::string& bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

TEST(Frame, RoundTripsHeaderPayloadAndTensors) {
  const Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = from_vector<int64_t>({7});
  const Tensor scalar = scalar_tensor(3.5, {.dtype = kFloat32});
  const Tensor empty_tensor = zeros({0, 4});
  const Tensor flags = from_vector<bool>({true, false});
  const Tensor halves = untracked::to(from_vector<float>({0.5f, -65504.0f, 0.1f}), kFloat16);
  const Tensor brains = untracked::to(from_vector<float>({1e30f, -0.0f}), kBFloat16);
  const Built built = build({untracked::t(a), b, scalar, empty_tensor, flags, halves, brains});
  wire::CallHeader header;
  const DecodedFrame frame = decode_frame(message_of(flatten(built.message)), header);
  EXPECT_EQ(header.function(), "f");
  EXPECT_EQ(frame.payload, "payload");
  ASSERT_EQ(frame.tensors.size(), 7u);
  EXPECT_TRUE(untracked::equal(frame.tensors[0], untracked::t(a)));
  EXPECT_TRUE(untracked::equal(frame.tensors[1], b));
  EXPECT_TRUE(untracked::equal(frame.tensors[2], scalar));
  EXPECT_EQ(frame.tensors[3].sizes(), (Shape{0, 4}));
  EXPECT_TRUE(untracked::equal(frame.tensors[4], flags));
  for (size_t i : {5u, 6u}) {  // half precision: same dtype, same bits
    const Tensor& sent = i == 5 ? halves : brains;
    EXPECT_EQ(frame.tensors[i].dtype(), sent.dtype());
    EXPECT_TRUE(untracked::equal(untracked::to(frame.tensors[i], kFloat32), untracked::to(sent, kFloat32)));
  }
}

TEST(Frame, TensorsArrivingInOneSliceAreNotCopied) {
  const Tensor a = ones({1000});
  const Built built = build({a});  // the message's second slice is a's own memory
  wire::CallHeader header;
  const DecodedFrame frame = decode_frame(built.message, header);
  EXPECT_EQ(frame.tensors[0].data_ptr(), a.data_ptr());
  const std::string bytes = flatten(built.message);  // one slice: the tensor is at an offset
  const DecodedFrame copied = decode_frame(message_of(bytes), header);
  EXPECT_TRUE(untracked::equal(copied.tensors[0], a));
}

// call_socket reads a small reply into one grpc::Slice(n), which gRPC inlines (n <= 23 bytes:
// the bytes live inside the grpc_slice struct). A tensor must not view those bytes: they belong
// to the decoder's copy of the slice, freed when decode_frame returns.
TEST(Frame, TensorsInAnInlinedSliceOutliveTheDecoder) {
  for (size_t padding = 0; padding < 4; ++padding) {  // one of these leaves the float aligned
    wire::ReplyHeader header;
    const std::string payload(1 + padding, 'p');
    header.set_payload_bytes(payload.size());
    std::vector<WireTensor> wire = {{scalar_tensor(3.5, {.dtype = kFloat32}), Device::cpu()}};
    describe_tensor(wire[0], header.add_tensors());
    const std::string bytes = flatten(encode_frame(header, payload, wire));
    ASSERT_LE(bytes.size(), size_t{GRPC_SLICE_INLINED_SIZE});
    grpc::Slice slice(bytes.size());  // as call_socket's read_body
    ASSERT_LT(reinterpret_cast<uintptr_t>(slice.begin()) - reinterpret_cast<uintptr_t>(&slice), sizeof slice)
        << "gRPC did not inline a slice of " << bytes.size() << " bytes";
    std::memcpy(const_cast<uint8_t*>(slice.begin()), bytes.data(), bytes.size());
    wire::ReplyHeader decoded;
    const DecodedFrame frame = decode_frame(grpc::ByteBuffer(&slice, 1), decoded);
    for (int i = 0; i < 16; ++i) {  // reuse the memory the decoder freed
      std::vector<grpc::Slice> junk(1, grpc::Slice(std::string(20, '\xff')));
    }
    EXPECT_EQ(frame.tensors[0].item<float>(), 3.5f) << "padding " << padding;
  }
}

// A small frame must not make the receiver build far more than it carries: the counts of
// tensors and dims, and the header's bytes, are capped before anything is made of them.
TEST(Frame, AFrameListingTooManyTensorsOrDimsIsRefusedBeforeAnyIsMade) {
  const auto listing = [](int tensors, int dims) {
    wire::CallHeader header;
    header.set_function("f");
    for (int i = 0; i < tensors; ++i) {
      wire::TensorMeta* meta = header.add_tensors();
      meta->set_dtype(static_cast<int32_t>(kFloat32));
      meta->set_device_type(static_cast<int32_t>(DeviceType::kCPU));
      for (int d = 0; d < dims; ++d) meta->add_sizes(1);
      if (dims == 0) meta->add_sizes(0);  // an empty tensor
      meta->set_nbytes(dims > 0 ? 4 : 0);
    }
    const std::string bytes = header.SerializeAsString();
    const auto size = static_cast<uint32_t>(bytes.size());
    return std::string(reinterpret_cast<const char*>(&size), sizeof size) + bytes + std::string(dims > 0 ? 4 : 0, '\0');
  };
  wire::CallHeader header;
  EXPECT_ERROR_CONTAINS(decode_frame(message_of(listing(kMaxTensorsPerFrame + 1, 0)), header),
                        "a frame of 65537 tensors, at most 65536 travel in one call");
  EXPECT_ERROR_CONTAINS(decode_frame(message_of(listing(1'000'000, 0)), header), "bytes, at most 4194304 travel");
  EXPECT_ERROR_CONTAINS(decode_frame(message_of(listing(1, kMaxTensorDims + 1)), header),
                        "tensor 0 has 65 dims, at most 64 travel");
  EXPECT_EQ(decode_frame(message_of(listing(1, kMaxTensorDims)), header).tensors.at(0).dim(), kMaxTensorDims);
}

TEST(Frame, MalformedMessagesAreErrorsNamingTheProblem) {
  const Built built = build({ones({4})});
  const std::string bytes = flatten(built.message);
  wire::CallHeader header;
  for (size_t cut = 0; cut < bytes.size(); ++cut) {  // every truncation
    EXPECT_THROW(decode_frame(message_of(bytes.substr(0, cut)), header), CodecError) << "cut at " << cut;
  }
  EXPECT_ERROR_CONTAINS(decode_frame(message_of(bytes + "xx"), header), "2 bytes follow the last tensor");
  std::string huge_header = bytes;
  huge_header[3] = '\x7f';
  EXPECT_ERROR_CONTAINS(decode_frame(message_of(huge_header), header), "the header claims");

  auto with_meta = [&](auto edit) {
    wire::CallHeader lying = built.header;
    edit(*lying.mutable_tensors(0));
    std::vector<WireTensor> wire = {{ones({4}), Device::cpu()}};
    return flatten(encode_frame(lying, "payload", wire));
  };
  EXPECT_ERROR_CONTAINS(decode_frame(message_of(with_meta([](auto& m) { m.set_nbytes(12); })), header),
                        "tensor 0 of shape [4] and dtype float32 cannot have 12 bytes");
  EXPECT_ERROR_CONTAINS(decode_frame(message_of(with_meta([](auto& m) { m.set_dtype(9); })), header),
                        "invalid dtype 9");
  EXPECT_ERROR_CONTAINS(decode_frame(message_of(with_meta([](auto& m) { m.set_sizes(0, -4); })), header),
                        "negative size -4");
  EXPECT_ERROR_CONTAINS(decode_frame(message_of(with_meta([](auto& m) { m.set_device_type(7); })), header),
                        "invalid device");
}

TEST(Frame, RandomBytesNeverCrash) {
  std::mt19937 random(7);
  const std::string valid = flatten(build({ones({3}), zeros({2, 2})}).message);
  wire::CallHeader header;
  for (int trial = 0; trial < 5000; ++trial) {
    std::string bytes = valid;
    for (int flips = 0; flips < 4; ++flips) bytes[random() % bytes.size()] = static_cast<char>(random());
    try {
      decode_frame(message_of(bytes), header);
    } catch (const CodecError&) {
    }
  }
}

Tensor floats(int64_t n) { return arange(0, static_cast<double>(n), 1.0); }

std::string codec_error(const std::function<void()>& call) { return testing::message_of<CodecError>(call); }

// Frames: a tensor in shared memory needs a reader, and a frame that fails to decode releases the
// segments it named after the bad tensor.
TEST(SharedMemoryFrames, TensorsInSegmentsDecodeThroughTheReaderOnly) {
  transport::shm::SendPool pool(size_t{1} << 30);
  transport::shm::PeerSegments receiver(::getpid());
  const Tensor tensor = floats(2000);
  wire::ReplyHeader header;
  WireTensor wire{tensor, Device::cpu(), pool.put(tensor)};
  describe_tensor(wire, header.add_tensors());
  header.set_payload_bytes(0);
  const grpc::ByteBuffer frame = encode_frame(header, "", {wire});
  wire::ReplyHeader decoded_header;
  EXPECT_THAT(codec_error([&] { decode_frame(frame, decoded_header); }), HasSubstr("shared-memory segment"));
  const SharedTensorReader reader = [&](const transport::shm::SegmentRef& ref, const Shape& sizes, DType dtype) {
    return receiver.view(ref, sizes, dtype);
  };
  const DecodedFrame decoded = decode_frame(frame, decoded_header, reader);
  ASSERT_EQ(decoded.tensors.size(), 1u);
  EXPECT_TRUE(untracked::equal(decoded.tensors[0], tensor));
}

TEST(SharedMemoryFrames, AFrameThatFailsReleasesTheSegmentsItNamed) {
  transport::shm::SendPool pool(size_t{1} << 16);  // room for one segment
  transport::shm::PeerSegments receiver(::getpid());
  const Tensor tensor = floats(2000);
  wire::ReplyHeader header;
  WireTensor bad{floats(4), Device::cpu(), std::nullopt};
  WireTensor shared{tensor, Device::cpu(), pool.put(tensor)};
  describe_tensor(bad, header.add_tensors());
  describe_tensor(shared, header.add_tensors());
  header.mutable_tensors(0)->set_nbytes(3);  // cannot be 4 float32 values
  const grpc::ByteBuffer frame = encode_frame(header, "", {bad, shared});
  const SharedTensorReader reader = [&](const transport::shm::SegmentRef& ref, const Shape& sizes, DType dtype) {
    return receiver.view(ref, sizes, dtype);
  };
  wire::ReplyHeader decoded_header;
  EXPECT_THAT(codec_error([&] { decode_frame(frame, decoded_header, reader); }), HasSubstr("cannot have 3 bytes"));
  EXPECT_TRUE(pool.put(tensor).has_value());  // the only segment is free again
}

}  // namespace
}  // namespace distgrad::rpc
