// Frames: a call or a reply as the bytes of one gRPC message (internal to rpc/).
//
// Layout (docs/rpc.md, "Wire format"): a little-endian u32 header length, the header
// (wire::CallHeader or wire::ReplyHeader, protobuf), the payload (rpc/codec.h), then the bytes
// of each tensor the header lists, in order. encode_frame builds the message from slices
// that point into the tensors' own memory (no copy on send); decode_frame checks every length
// against the header and the message, and hands out tensors that view gRPC's receive buffers
// when a tensor's bytes arrived in one piece (no copy on receive), or a copy otherwise. Tensors
// sent through shared memory (Note [Shared-memory path] in transport/shared_memory.h) are named in the
// header and their bytes left out of the frame.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "proto/worker.pb.h"
#include "transport/shared_memory.h"

namespace distgrad::rpc {

// A tensor's wire form: contiguous bytes on the CPU, and where the receiver should put it.
struct WireTensor {
  Tensor data;           // contiguous, on the CPU, unless `shared` holds the bytes
  Device target_device;  // the receiver's device for it
  // The segment the bytes travel in, not in the frame (none: in the frame).
  std::optional<transport::shm::SegmentRef> shared = std::nullopt;
};

// The metadata of a wire tensor.
void describe_tensor(const WireTensor& tensor, wire::TensorMeta* meta);

// What one frame may hold, whoever sent it: its header's bytes, its tensors, each tensor's dims.
// A small frame would otherwise make the receiver build far more than it carries (a 7.8 MB
// header listing a million empty tensors cost 575 MB of tensor objects).
inline constexpr size_t kMaxHeaderBytes = size_t{4} << 20;
inline constexpr int kMaxTensorsPerFrame = 65'536;
inline constexpr int kMaxTensorDims = 64;

// A message of `header` (whose tensor list must describe `tensors`), `payload` and the
// tensors' bytes.
grpc::ByteBuffer encode_frame(const google::protobuf::MessageLite& header, std::string payload,
                              const std::vector<WireTensor>& tensors);

// The parts of a received frame. Throws CodecError naming what is malformed.
struct DecodedFrame {
  std::string payload;
  std::vector<Tensor> tensors;  // on the devices the header names, without autograd state
};
// Turns a tensor whose bytes are in a shared-memory segment into a tensor (PeerSegments::view).
using SharedTensorReader = std::function<Tensor(const transport::shm::SegmentRef&, const Shape&, DType)>;
// Tensors in shared memory are refused (CodecError) when `shared` is empty.
template <typename Header>
DecodedFrame decode_frame(const grpc::ByteBuffer& message, Header& header, const SharedTensorReader& shared = {});

}  // namespace distgrad::rpc
