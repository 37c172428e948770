// TensorPaths: which way each tensor of an agent's frames travels (internal to rpc/): its bytes
// in the frame, or, to and from workers on this host, through shared-memory segments
// (Note [Shared-memory path] in transport/shared_memory.h); and the device it lands on (the
// caller's device maps, RpcOptions::device_maps). Counts what went which way.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "rpc/agent.h"
#include "rpc/frame.h"
#include "rpc/options.h"
#include "transport/shared_memory.h"

namespace distgrad::rpc {

// Pairs of (this side's device, the other side's device).
using DeviceMap = std::vector<std::pair<Device, Device>>;

class TensorPaths {
 public:
  // Shared memory as RpcOptions::shared_memory and its threshold and pool size say.
  explicit TensorPaths(const RpcOptions& options);

  // The same-host links; null when shared memory is off.
  transport::shm::Links* shared_memory() const { return shared_memory_.get(); }

  // The wire form of `tensors`: each on the device `map` pairs with its own (the CPU when none),
  // in a segment of `shared_to`'s when one takes it (-1: none may), else in the frame.
  std::vector<WireTensor> to_wire(const std::vector<Tensor>& tensors, const DeviceMap& map, int shared_to);
  // Reads tensors that `sender()` put in its segments; empty when shared memory is off.
  SharedTensorReader reader_from(std::function<int()> sender) const;

  // Adds the counts of tensors and bytes per path, and the segments held, to `stats`.
  void add_to(TransportStats& stats) const;

 private:
  std::unique_ptr<transport::shm::Links> shared_memory_;
  std::atomic<uint64_t> network_tensors_{0}, network_bytes_{0};
};

}  // namespace distgrad::rpc
