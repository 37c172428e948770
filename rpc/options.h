// RpcOptions: how init_rpc sets up this process's RPC agent.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "rpc/interceptor.h"

namespace distgrad::rpc {

struct RpcOptions {
  // The default deadline of every call (0 = none); rpc_async/rpc_sync may give their own.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // How long init_rpc waits for every worker to publish its address, and barrier() by default.
  std::chrono::milliseconds init_timeout{std::chrono::seconds(300)};
  // How long a graceful shutdown waits for the other workers to reach it (0 = as long as
  // they are alive; a dead worker is detected and reported either way).
  std::chrono::milliseconds shutdown_timeout{0};
  // How long a worker that a graceful shutdown or a barrier waits for may take to answer "are you
  // alive?" (served by its RPC threads, whatever its program is doing); one that does not answer
  // in time (stopped, frozen, its host unreachable) counts as lost, and the wait fails naming it.
  std::chrono::milliseconds liveness_timeout{std::chrono::seconds(10)};
  // How often the owner of RRefs' values checks that the workers holding RRefs to them are alive
  // (Note [RRef lifetime] in rpc/rref.h); those that exited no longer keep the values.
  std::chrono::milliseconds holder_check_interval{std::chrono::seconds(1)};
  // Threads that run registered functions; more are started while some block (rpc/executor.h).
  int num_worker_threads = 16;
  int max_worker_threads = 256;
  // Where this worker's CUDA tensors go on each other worker: device_maps["worker1"] =
  // {{cuda:0, cuda:1}} sends cuda:0 tensors to worker1's cuda:1. Unmapped devices send to the
  // CPU. Result tensors come back through the inverse map.
  std::map<std::string, std::vector<std::pair<Device, Device>>> device_maps = {};
  // Code that takes part in every call (rpc/interceptor.h), run in this order. init_rpc
  // (dist_autograd/init_rpc.h) adds distributed autograd's; every process of a job needs the same.
  std::vector<std::shared_ptr<CallInterceptor>> interceptors = {};
  // Keep freed memory in the process rather than handing it back to the kernel (glibc's
  // M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 4 GiB). gRPC frees its receive buffers after
  // every message; given back, they fault in again on the next one, which made a 64 MB round
  // trip 1.6x slower (docs/benchmarks.md, "RPC"). Process-wide: the heap stays at its peak.
  // So that the peak is kept per core, not per thread, threads share one malloc arena per core
  // (M_ARENA_MAX; glibc's default is 8 per core): with an arena per thread, memory one thread
  // freed was kept for it alone, and the main example's workers grew without end (docs/rpc.md,
  // "Memory").
  // Each setting is left alone when GLIBC_TUNABLES or MALLOC_ARENA_MAX sets it.
  bool keep_freed_memory = true;
  // The fast paths (docs/rpc.md, "Fast paths"). Workers on this host are recognised as such
  // (false: every peer is treated as on another host).
  bool same_host = true;
  // Tensors of at least `shared_memory_threshold` bytes to or from a worker on this host travel
  // through shared memory, in segments of which this worker keeps at most
  // `shared_memory_pool_bytes` per peer (beyond that, and to other hosts, in the messages).
  bool shared_memory = true;
  size_t shared_memory_threshold = size_t{64} << 10;
  size_t shared_memory_pool_bytes = size_t{1} << 30;
  // Calls go over a socket of distgrad's own instead of gRPC: a Unix-domain socket to a worker on
  // this host (every call), TCP to one on another host (calls whose frame is at most
  // `socket_frame_limit` bytes; not with TLS).
  bool socket_calls = true;
  size_t socket_frame_limit = size_t{64} << 10;
  // A blocking call (rpc_sync) over a call socket reads its reply on its own thread when no other
  // thread reads the socket, instead of being woken by the socket's reader thread (Note [Reading
  // one's own reply] in rpc/call_socket.h).
  bool socket_own_reads = true;
  // A worker's calls to itself skip the socket: the request is handed to its own server and the
  // reply back in the process (Note [Calls to oneself] in rpc/loopback.h). Only with socket calls
  // on and same_host (otherwise calls to oneself take the same path as calls to others).
  bool loopback = true;
  // The largest message this worker accepts, a request from a caller or a reply to its own call,
  // in bytes (0 = no limit; tensors that travel through shared memory do not count). A larger
  // one fails its call with RESOURCE_EXHAUSTED naming both sizes, and is never held in memory
  // (over gRPC it is cut off by gRPC; on a call socket its bytes are read past).
  uint64_t max_message_bytes = 0;
  // The environment overrides these: DISTGRAD_SAME_HOST, DISTGRAD_SHM, DISTGRAD_SOCKET_CALLS,
  // DISTGRAD_SOCKET_OWN_READS, DISTGRAD_LOOPBACK (0 or 1), DISTGRAD_SHM_THRESHOLD and DISTGRAD_MAX_MESSAGE_BYTES
  // (bytes), and DISTGRAD_GRPC_ONLY=1 turns every fast path off.
};

}  // namespace distgrad::rpc
