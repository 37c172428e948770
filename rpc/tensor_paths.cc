#include "rpc/tensor_paths.h"

#include "core/copy.h"

namespace distgrad::rpc {

TensorPaths::TensorPaths(const RpcOptions& options) {
  if (options.shared_memory) {
    shared_memory_ =
        std::make_unique<transport::shm::Links>(options.shared_memory_threshold, options.shared_memory_pool_bytes);
  }
}

std::vector<WireTensor> TensorPaths::to_wire(const std::vector<Tensor>& tensors, const DeviceMap& map, int shared_to) {
  std::vector<WireTensor> wire;
  wire.reserve(tensors.size());
  for (const Tensor& tensor : tensors) {
    Device target = Device::cpu();
    for (const auto& [from, to] : map) {
      if (from == tensor.device()) target = to;
    }
    if (shared_memory_ && shared_to >= 0 && tensor.defined()) {
      if (std::optional<transport::shm::SegmentRef> shared = shared_memory_->put(shared_to, tensor)) {
        wire.push_back({tensor, target, shared});
        continue;
      }
    }
    wire.push_back({untracked::contiguous(untracked::to(tensor, Device::cpu())), target});
    network_tensors_.fetch_add(1, std::memory_order_relaxed);
    network_bytes_.fetch_add(tensor.nbytes(), std::memory_order_relaxed);
  }
  return wire;
}

SharedTensorReader TensorPaths::reader_from(std::function<int()> sender) const {
  if (!shared_memory_) return {};
  return [links = shared_memory_.get(), sender = std::move(sender)](const transport::shm::SegmentRef& ref,
                                                                    const Shape& sizes, DType dtype) {
    return links->view(sender(), ref, sizes, dtype);
  };
}

void TensorPaths::add_to(TransportStats& stats) const {
  stats.network_tensors = network_tensors_.load(std::memory_order_relaxed);
  stats.network_bytes = network_bytes_.load(std::memory_order_relaxed);
  if (shared_memory_) {
    stats.shared_memory_tensors = shared_memory_->counters().shared_tensors.load(std::memory_order_relaxed);
    stats.shared_memory_bytes = shared_memory_->counters().shared_bytes.load(std::memory_order_relaxed);
    stats.referenced_tensors = shared_memory_->counters().referenced_tensors.load(std::memory_order_relaxed);
    stats.referenced_bytes = shared_memory_->counters().referenced_bytes.load(std::memory_order_relaxed);
    std::tie(stats.shared_memory_segments, stats.shared_memory_segment_bytes) = shared_memory_->pool_size();
  }
}

}  // namespace distgrad::rpc
