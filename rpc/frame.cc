#include "rpc/frame.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/copy.h"
#include "core/creation.h"
#include "core/cuda.h"
#include "rpc/codec.h"

namespace distgrad::rpc {
namespace {

// Reads bytes in order across the slices of a message.
// Whether `slice` keeps its bytes inside the object itself (an inlined slice). Not
// slice.c_slice().refcount: c_slice() takes a reference the caller must drop.
bool holds_bytes_inline(const grpc::Slice& slice) {
  const auto object = reinterpret_cast<uintptr_t>(&slice);
  const auto bytes = reinterpret_cast<uintptr_t>(slice.begin());
  return bytes >= object && bytes < object + sizeof slice;
}

class SliceReader {
 public:
  explicit SliceReader(const grpc::ByteBuffer& message) {
    const grpc::Status status = message.Dump(&slices_);
    if (!status.ok()) throw CodecError("cannot read the message: " + status.error_message());
    for (const grpc::Slice& slice : slices_) remaining_ += slice.size();
  }

  size_t remaining() const { return remaining_; }

  void read(void* out, size_t size) {
    need(size);
    auto* target = static_cast<uint8_t*>(out);
    while (size > 0) {
      const grpc::Slice& slice = slices_[index_];
      const size_t take = std::min(size, slice.size() - offset_);
      std::memcpy(target, slice.begin() + offset_, take);
      target += take;
      size -= take;
      advance(take);
    }
  }

  std::string read_string(size_t size) {
    std::string result(size, '\0');
    read(result.data(), size);
    return result;
  }

  // `size` bytes as CPU memory: a view of the current slice when they lie in it, suitably
  // aligned for `alignment`; else null (the caller copies with read()). An inlined slice (gRPC
  // keeps up to GRPC_SLICE_INLINED_SIZE bytes inside the grpc_slice itself, as call_socket's
  // read_body gets for a small reply) is never viewed: its bytes live in slices_, which dies with
  // this reader, and a copy of the slice copies them elsewhere.
  std::shared_ptr<grpc::Slice> view(size_t size, size_t alignment, const uint8_t** data) {
    skip_empty_slices();
    if (index_ >= slices_.size() || slices_[index_].size() - offset_ < size) return nullptr;
    if (holds_bytes_inline(slices_[index_])) return nullptr;
    const uint8_t* start = slices_[index_].begin() + offset_;
    if (reinterpret_cast<uintptr_t>(start) % alignment != 0) return nullptr;
    *data = start;
    auto owner = std::make_shared<grpc::Slice>(slices_[index_]);
    advance(size);
    return owner;
  }

 private:
  void need(size_t size) const {
    if (size > remaining_) {
      throw CodecError("truncated message: " + std::to_string(size) + " more bytes expected, " +
                       std::to_string(remaining_) + " left");
    }
  }

  void advance(size_t size) {
    offset_ += size;
    remaining_ -= size;
    skip_empty_slices();
  }

  void skip_empty_slices() {
    while (index_ < slices_.size() && offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }

  std::vector<grpc::Slice> slices_;
  size_t index_ = 0, offset_ = 0, remaining_ = 0;
};

void release_string(void* string) { delete static_cast<std::string*>(string); }
void release_tensor(void* tensor) { delete static_cast<Tensor*>(tensor); }

Device device_from_wire(int32_t type, int32_t index) {
  if (type == static_cast<int32_t>(DeviceType::kCPU) && index == 0) return Device::cpu();
  if (type == static_cast<int32_t>(DeviceType::kCUDA) && index >= 0) return Device::cuda(index);
  throw CodecError("invalid device (type " + std::to_string(type) + ", index " + std::to_string(index) + ")");
}

DType dtype_from_wire(int32_t dtype) {
  if (dtype < 0 || dtype > static_cast<int32_t>(kLastDType)) {
    throw CodecError("invalid dtype " + std::to_string(dtype));
  }
  return static_cast<DType>(dtype);
}

transport::shm::SegmentRef segment_ref(const wire::SharedSegment& segment) {
  return {.fd = segment.fd(),
          .inode = segment.inode(),
          .file_bytes = segment.file_bytes(),
          .ticket = segment.ticket(),
          .tensor_storage = segment.tensor_storage(),
          .byte_offset = segment.byte_offset()};
}

// The tensor a shared-memory reference names; a reference that does not match its segment is a
// malformed message.
Tensor view_shared(const SharedTensorReader& shared, const transport::shm::SegmentRef& ref, const Shape& sizes,
                   DType dtype) {
  try {
    return shared(ref, sizes, dtype);
  } catch (const transport::shm::SegmentError& error) {
    throw CodecError(error.what());
  }
}

// Reads one tensor's bytes as `meta` describes them and puts it on its target device.
Tensor read_tensor(SliceReader& reader, const wire::TensorMeta& meta, size_t index, const SharedTensorReader& shared) {
  const DType dtype = dtype_from_wire(meta.dtype());
  const Device device = device_from_wire(meta.device_type(), meta.device_index());
  if (meta.sizes_size() > kMaxTensorDims) {
    throw CodecError("tensor " + std::to_string(index) + " has " + std::to_string(meta.sizes_size()) +
                     " dims, at most " + std::to_string(kMaxTensorDims) + " travel");
  }
  Shape sizes;
  uint64_t numel = 1;
  uint64_t extent = 1;  // the product of the sizes with zeros counted as ones: the largest stride
  constexpr auto kMaxExtent = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (int64_t size : meta.sizes()) {
    if (size < 0) throw CodecError("tensor " + std::to_string(index) + " has a negative size " + std::to_string(size));
    const auto factor = static_cast<uint64_t>(std::max<int64_t>(size, 1));
    if (extent > kMaxExtent / factor) throw CodecError("tensor " + std::to_string(index) + "'s shape overflows");
    extent *= factor;
    numel *= static_cast<uint64_t>(size);
    sizes.push_back(size);
  }
  const uint64_t element = element_size(dtype);
  if (numel > std::numeric_limits<uint64_t>::max() / element || numel * element != meta.nbytes()) {
    throw CodecError("tensor " + std::to_string(index) + " of shape " + shape_str(sizes) + " and dtype " +
                     dtype_name(dtype) + " cannot have " + std::to_string(meta.nbytes()) + " bytes");
  }
  Tensor tensor;
  if (meta.has_shared()) {
    if (!shared) {
      throw CodecError("tensor " + std::to_string(index) +
                       " is in a shared-memory segment, which this process does not take from this sender");
    }
    tensor = view_shared(shared, segment_ref(meta.shared()), sizes, dtype);
  } else if (meta.nbytes() > reader.remaining()) {
    throw CodecError("truncated message: tensor " + std::to_string(index) + " needs " + std::to_string(meta.nbytes()) +
                     " bytes, " + std::to_string(reader.remaining()) + " left");
  } else if (const uint8_t* data = nullptr;
             auto owner = meta.nbytes() > 0 ? reader.view(meta.nbytes(), element, &data) : nullptr) {
    Storage storage = Storage::wrap(const_cast<uint8_t*>(data), meta.nbytes(), Device::cpu(),
                                    [owner = std::move(owner)](void*) mutable { owner.reset(); });
    tensor = Tensor(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype);
  } else {
    tensor = empty(sizes, {.dtype = dtype});
    reader.read(tensor.data_ptr(), meta.nbytes());
  }
  if (device.is_cuda()) {
    if (!cuda::is_available()) {
      throw CodecError("tensor " + std::to_string(index) + " is meant for " + device.str() +
                       ", but this process sees no CUDA device");
    }
    tensor = untracked::to(tensor, device);
  }
  return tensor;
}

}  // namespace

void describe_tensor(const WireTensor& tensor, wire::TensorMeta* meta) {
  meta->set_dtype(static_cast<int32_t>(tensor.data.dtype()));
  for (int64_t size : tensor.data.sizes()) meta->add_sizes(size);
  meta->set_device_type(static_cast<int32_t>(tensor.target_device.type));
  meta->set_device_index(tensor.target_device.index);
  meta->set_nbytes(tensor.data.nbytes());
  if (tensor.shared) {
    wire::SharedSegment* segment = meta->mutable_shared();
    segment->set_fd(tensor.shared->fd);
    segment->set_inode(tensor.shared->inode);
    segment->set_file_bytes(tensor.shared->file_bytes);
    segment->set_ticket(tensor.shared->ticket);
    segment->set_tensor_storage(tensor.shared->tensor_storage);
    segment->set_byte_offset(tensor.shared->byte_offset);
  }
}

grpc::ByteBuffer encode_frame(const google::protobuf::MessageLite& header, std::string payload,
                              const std::vector<WireTensor>& tensors) {
  auto* head = new std::string;
  const auto header_size = static_cast<uint32_t>(header.ByteSizeLong());
  head->reserve(sizeof header_size + header_size + payload.size());
  head->append(reinterpret_cast<const char*>(&header_size), sizeof header_size);
  header.AppendToString(head);
  head->append(payload);
  std::vector<grpc::Slice> slices;
  slices.reserve(1 + tensors.size());
  slices.emplace_back(head->data(), head->size(), &release_string, head);
  for (const WireTensor& tensor : tensors) {
    const size_t nbytes = tensor.data.nbytes();
    if (nbytes == 0 || tensor.shared) continue;
    // The slice keeps the tensor (and so its memory) alive until gRPC has sent it.
    slices.emplace_back(tensor.data.data_ptr(), nbytes, &release_tensor, new Tensor(tensor.data));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

template <typename Header>
DecodedFrame decode_frame(const grpc::ByteBuffer& message, Header& header, const SharedTensorReader& shared) {
  SliceReader reader(message);
  uint32_t header_size = 0;
  reader.read(&header_size, sizeof header_size);
  if (header_size > reader.remaining()) {
    throw CodecError("the header claims " + std::to_string(header_size) + " bytes, the message has " +
                     std::to_string(reader.remaining()) + " left");
  }
  if (header_size > kMaxHeaderBytes) {
    throw CodecError("a header of " + std::to_string(header_size) + " bytes, at most " +
                     std::to_string(kMaxHeaderBytes) + " travel (too many tensors in one call?)");
  }
  if (!header.ParseFromString(reader.read_string(header_size))) throw CodecError("the header is not valid protobuf");
  if (header.tensors_size() > kMaxTensorsPerFrame) {
    throw CodecError("a frame of " + std::to_string(header.tensors_size()) + " tensors, at most " +
                     std::to_string(kMaxTensorsPerFrame) + " travel in one call");
  }
  DecodedFrame frame;
  if (header.payload_bytes() > reader.remaining()) {
    throw CodecError("the header claims a payload of " + std::to_string(header.payload_bytes()) + " bytes, " +
                     std::to_string(reader.remaining()) + " are left");
  }
  frame.payload = reader.read_string(header.payload_bytes());
  frame.tensors.reserve(header.tensors_size());
  int i = 0;
  try {
    for (; i < header.tensors_size(); ++i) {
      frame.tensors.push_back(read_tensor(reader, header.tensors(i), i, shared));
    }
  } catch (const CodecError&) {
    // The sender's segments named after the bad tensor would stay occupied: view each as an empty
    // tensor and drop it, which releases it.
    for (++i; shared && i < header.tensors_size(); ++i) {
      if (!header.tensors(i).has_shared()) continue;
      try {
        view_shared(shared, segment_ref(header.tensors(i).shared()), {0}, DType::kBool);
      } catch (const CodecError&) {  // a segment that cannot be opened holds nothing to release
      }
    }
    throw;
  }
  if (reader.remaining() != 0) {
    throw CodecError(std::to_string(reader.remaining()) + " bytes follow the last tensor");
  }
  return frame;
}

template DecodedFrame decode_frame(const grpc::ByteBuffer&, wire::CallHeader&, const SharedTensorReader&);
template DecodedFrame decode_frame(const grpc::ByteBuffer&, wire::ReplyHeader&, const SharedTensorReader&);

}  // namespace distgrad::rpc
