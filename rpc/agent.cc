#include "rpc/agent.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "core/copy.h"
#include "core/cuda.h"
#include "proto/distgrad.grpc.pb.h"
#include "rpc/call_socket.h"
#include "rpc/credentials.h"
#include "rpc/executor.h"
#include "rpc/frame.h"
#include "rpc/job_store.h"
#include "rpc/net_util.h"
#include "rpc/rpc.h"
#include "rpc/shared_memory.h"

namespace distgrad::rpc {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kCallMethod[] = "/distgrad.rpc.wire.Worker/Call";
constexpr char kTokenKey[] = "distgrad-token";
constexpr char kPingFunction[] = "__distgrad.ping";
constexpr size_t kMaxStatusMessage = 4096;  // status messages travel in HTTP/2 trailers

// Answers liveness checks (graceful shutdown asks whether missing workers are still alive).
bool ping() { return true; }
DISTGRAD_REMOTE_NAMED(ping, kPingFunction);

// The hooks of install_call_hooks, and the agents to tell when they change.
std::mutex installed_hooks_mutex;
std::shared_ptr<const CallHooks>& installed_hooks_slot() {
  static auto* hooks = new std::shared_ptr<const CallHooks>(std::make_shared<const CallHooks>());
  return *hooks;
}
std::shared_ptr<const CallHooks> installed_hooks() {
  std::lock_guard<std::mutex> lock(installed_hooks_mutex);
  return installed_hooks_slot();
}

StatusCode to_status_code(grpc::StatusCode code) { return static_cast<StatusCode>(static_cast<int>(code)); }

// Cuts `message` so that it stays within kMaxStatusMessage once gRPC percent-encodes it for the
// trailers (3 bytes for each byte outside printable ASCII), at a UTF-8 character boundary.
grpc::Status to_grpc_status(StatusCode code, std::string message) {
  size_t encoded = 0, keep = 0;
  for (; keep < message.size(); ++keep) {
    const auto byte = static_cast<unsigned char>(message[keep]);
    encoded += byte >= 0x20 && byte <= 0x7e && byte != '%' ? 1 : 3;
    if (encoded > kMaxStatusMessage) break;
  }
  if (keep < message.size()) {
    while (keep > 0 && (static_cast<unsigned char>(message[keep]) & 0xc0) == 0x80) --keep;
    message = message.substr(0, keep) + " [truncated]";
  }
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(code)), message);
}

std::string seconds(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out << static_cast<double>(duration.count()) / 1000 << " s";
  return out.str();
}

// "1, 3, 7"
std::string join_ranks(const std::vector<int>& ranks) {
  std::string result;
  for (int rank : ranks) result += (result.empty() ? "" : ", ") + std::to_string(rank);
  return result;
}

// RpcOptions::keep_freed_memory.
void keep_freed_memory() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && (std::strstr(tunables, "mmap_threshold") || std::strstr(tunables, "trim_threshold"))) {
    return;
  }
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

// Sets `value` from a 0/1 switch of the environment, when set.
void read_switch(const char* name, bool* value) {
  if (std::optional<bool> on = getenv_switch(name, "init_rpc")) *value = *on;
}

// The options with the fast paths' variables applied (RpcOptions, "The environment overrides").
RpcOptions with_environment(RpcOptions options) {
  bool grpc_only = false;
  read_switch("DISTGRAD_GRPC_ONLY", &grpc_only);
  if (grpc_only) options.same_host = options.shared_memory = options.socket_calls = false;
  read_switch("DISTGRAD_SAME_HOST", &options.same_host);
  read_switch("DISTGRAD_SHM", &options.shared_memory);
  read_switch("DISTGRAD_SOCKET_CALLS", &options.socket_calls);
  if (!options.same_host) options.shared_memory = false;
  const std::string threshold = getenv_or("DISTGRAD_SHM_THRESHOLD", "");
  if (!threshold.empty()) {
    size_t bytes = 0;
    const auto [end, error] = std::from_chars(threshold.data(), threshold.data() + threshold.size(), bytes);
    DISTGRAD_CHECK(error == std::errc() && end == threshold.data() + threshold.size(),
                   "init_rpc: DISTGRAD_SHM_THRESHOLD=", threshold, " is not a number of bytes");
    options.shared_memory_threshold = bytes;
  }
  return options;
}

// The options with a map for calls to `world`'s own worker, unless they name one: each CUDA
// device to itself, so that a call to this process keeps its tensors where they are.
RpcOptions with_own_device_map(RpcOptions options, const WorldInfo& world) {
  std::vector<std::pair<Device, Device>> identity;
  for (int index = 0; index < cuda::device_count(); ++index) {
    identity.emplace_back(Device::cuda(index), Device::cuda(index));
  }
  options.device_maps.try_emplace(worker_name(world.rank, world.world_size), std::move(identity));
  return options;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Agent::Impl {
  class WorkerService;

  // What a worker needs to call a peer.
  struct Peer {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::GenericStub> stub;
    std::unique_ptr<grpc::internal::RpcMethod> method;  // registered on the channel, for blocking calls
    // The call socket (Note [Socket calls]), connected on first use; null when it could not.
    std::unique_ptr<call_socket::Client> socket;
    bool socket_tried = false;
  };

  // One asynchronous call from its start to its completion callback.
  struct AsyncCall {
    grpc::ClientContext context;
    grpc::ByteBuffer request, response;
    Promise<Encoded> promise;
    int to = 0;
    std::string function;
  };

  Impl(Agent& agent, RpcOptions options)
      : agent(agent),
        options(with_own_device_map(with_environment(std::move(options)), world_info())),
        world(world_info()),
        token(getenv_or("DISTGRAD_TOKEN", "")) {
    if (this->options.shared_memory) {
      shared_memory =
          std::make_unique<shm::Links>(this->options.shared_memory_threshold, this->options.shared_memory_pool_bytes);
    }
  }

  Agent& agent;
  const RpcOptions options;
  const WorldInfo world;
  const std::string token;
  const TransportCredentials& credentials = transport_credentials();
  std::vector<std::string> names;
  std::shared_ptr<JobStore> store;  // shared with the process groups (Note [Job store])
  std::unique_ptr<Executor> executor;
  std::unique_ptr<WorkerService> service;
  std::unique_ptr<grpc::Server> server;
  std::vector<std::string> peer_addresses;
  const std::string host_identity = shm::host_identity();  // read once: it reads /proc
  // Same-host shared memory (Note [Shared-memory path] in rpc/shared_memory.h); null when off.
  std::unique_ptr<shm::Links> shared_memory;
  std::atomic<uint64_t> network_tensors{0}, network_bytes{0};
  // Calls over distgrad's own sockets (Note [Socket calls] in rpc/call_socket.h).
  std::unique_ptr<call_socket::Server> socket_server;  // null when off
  // Per rank: "unix:NAME" or "tcp:HOST:PORT", empty when calls to it use gRPC; and whether every
  // call may use it (Unix sockets) or only small frames (TCP).
  std::vector<std::string> socket_addresses;
  std::vector<bool> socket_takes_any_frame;
  std::atomic<uint64_t> socket_calls{0}, grpc_calls{0};
  std::mutex peers_mutex;  // guards peers
  std::vector<std::unique_ptr<Peer>> peers;
  // Read by every call, replaced whole by set_hooks (which may run while calls are served).
  std::atomic<std::shared_ptr<const CallHooks>> hooks{installed_hooks()};
  // This worker's client calls in flight (async and sync). A graceful shutdown waits for them;
  // stop() cancels them and waits for their completions, so that no callback outlives the agent
  // and no call is left inside gRPC when the process exits. Recursive: gRPC may run a cancelled
  // call's callback (which calls call_finished) inline, inside TryCancel. Keyed by each call's
  // state; the gRPC context to cancel, or null for socket calls (closing the sockets
  // fails those).
  std::recursive_mutex calls_mutex;
  std::condition_variable_any calls_finished;  // notified under calls_mutex
  std::unordered_map<const void*, grpc::ClientContext*> calls_in_flight ABSL_GUARDED_BY(calls_mutex);
  int barrier_generation = 0;
  bool stopped = false;
  // Note [Calls before init_rpc returns]: requests wait until calls_open or calls_closed.
  std::mutex gate_mutex;
  std::condition_variable gate_changed;  // notified under gate_mutex
  bool calls_open ABSL_GUARDED_BY(gate_mutex) = false;
  bool calls_closed ABSL_GUARDED_BY(gate_mutex) = false;

  // Waits until requests may run; false when the agent stopped or init_timeout passed first.
  bool wait_until_calls_open() {
    std::unique_lock<std::mutex> lock(gate_mutex);
    gate_changed.wait_for(lock, options.init_timeout, [this] { return calls_open || calls_closed; });
    return calls_open && !calls_closed;
  }
  void set_gate(bool open) {
    std::lock_guard<std::mutex> lock(gate_mutex);
    (open ? calls_open : calls_closed) = true;
    gate_changed.notify_all();
  }

  std::string key(const std::string& name) const { return store->key("rpc", name); }
  std::vector<std::string> rank_keys(const std::string& name) const { return store->rank_keys("rpc", name); }

  // The ranks whose key among rank_keys(name) is in `missing`.
  std::vector<int> missing_ranks(const std::string& name, const std::vector<std::string>& missing) const {
    std::vector<int> ranks;
    const std::vector<std::string> keys = rank_keys(name);
    for (int rank = 0; rank < world.world_size; ++rank) {
      if (std::find(missing.begin(), missing.end(), keys[rank]) != missing.end()) ranks.push_back(rank);
    }
    return ranks;
  }

  void call_started(const void* call, grpc::ClientContext* context) {
    std::lock_guard<std::recursive_mutex> lock(calls_mutex);
    calls_in_flight.emplace(call, context);
  }
  void call_finished(const void* call) {
    std::lock_guard<std::recursive_mutex> lock(calls_mutex);
    calls_in_flight.erase(call);
    calls_finished.notify_all();
  }
  // Waits until no client call is in flight (each has its own deadline).
  void wait_for_calls() {
    std::unique_lock<std::recursive_mutex> lock(calls_mutex);
    calls_finished.wait(lock, [this] { return calls_in_flight.empty(); });
  }
  // Cancels the client calls in flight; returns whether they all finished within `timeout`.
  // While the lock is held no call can finish on another thread, so every context in the copy
  // is alive when it is cancelled (one finished inline is erased from the set, not the copy).
  bool cancel_calls(std::chrono::milliseconds timeout) {
    std::unique_lock<std::recursive_mutex> lock(calls_mutex);
    std::vector<grpc::ClientContext*> in_flight;
    for (const auto& [call, context] : calls_in_flight) {
      if (context != nullptr) in_flight.push_back(context);
    }
    for (grpc::ClientContext* context : in_flight) context->TryCancel();
    return calls_finished.wait_for(lock, timeout, [this] { return calls_in_flight.empty(); });
  }

  void start();
  void start_server();
  void add_peer_entry(int rank, const std::string& entry);
  Peer& peer(int rank);
  void prepare_context(grpc::ClientContext& context, std::chrono::milliseconds timeout) const;
  grpc::ByteBuffer encode_request(int to, OutgoingCall& call);
  Encoded decode_reply(int from, const grpc::ByteBuffer& response);
  SharedTensorReader shared_tensors_from(std::function<int()> sender);
  RemoteError call_error(int to, const std::string& function, const grpc::Status& status) const;
  // Whether a gRPC request carries the job token (Note [Job token]).
  bool token_accepted(const grpc::CallbackServerContext& context) const;
  // Runs the call a request frame asks for, from either transport.
  grpc::Status serve(const grpc::ByteBuffer& request, grpc::ByteBuffer* response);
  // The answer to requests that arrive when init_rpc did not finish.
  grpc::Status not_serving() const;
  // The socket for a call of `request` to `rank`; null when it goes over gRPC.
  call_socket::Client* socket_for(int rank, const grpc::ByteBuffer& request);
  Future<Encoded> call_over_socket(call_socket::Client& socket, int to, const std::string& function,
                                   const grpc::ByteBuffer& request, std::chrono::milliseconds timeout);
  // `shared_to`: the peer whose segments may carry the tensors (-1: none may).
  std::vector<WireTensor> to_wire(const std::vector<Tensor>& tensors, const std::vector<std::pair<Device, Device>>& map,
                                  int shared_to);
  void wait_for_everyone(const std::string& name, std::chrono::milliseconds timeout, const char* what);
  void stop();
};

// The Worker service: hands each request to the executor and never blocks gRPC's threads.
class Agent::Impl::WorkerService final : public wire::Worker::WithRawCallbackMethod_Call<wire::Worker::Service> {
 public:
  explicit WorkerService(Impl& impl) : impl_(impl) {}

  grpc::ServerUnaryReactor* Call(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    impl_.executor->submit([this, context, request, response, reactor] {
      if (!impl_.wait_until_calls_open()) {
        reactor->Finish(impl_.not_serving());
      } else if (!impl_.token_accepted(*context)) {
        reactor->Finish(to_grpc_status(StatusCode::kUnauthenticated, impl_.names[impl_.world.rank] +
                                                                         " refused a call without the job's token "
                                                                         "(DISTGRAD_TOKEN)"));
      } else {
        reactor->Finish(impl_.serve(*request, response));
      }
    });
    return reactor;
  }

 private:
  Impl& impl_;
};

void Agent::Impl::start_server() {
  const bool loopback_only = token.empty() && getenv_or("DISTGRAD_INSECURE", "0") != "1";
  const std::string bind_host = loopback_only || is_loopback_host(world.master_addr) ? "127.0.0.1" : "0.0.0.0";
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(bind_host + ":0", credentials.server, &port);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  service = std::make_unique<WorkerService>(*this);
  builder.RegisterService(service.get());
  server = builder.BuildAndStart();
  DISTGRAD_CHECK(server != nullptr && port > 0, "init_rpc: ", names[world.rank], " could not start its server on ",
                 bind_host);
  const std::string host = getenv_or("DISTGRAD_HOST", local_address_towards(world.master_addr, world.master_port));
  if (options.socket_calls) {
    // TCP beside the Unix socket unless TLS is on (the socket protocol has no encryption).
    socket_server = std::make_unique<call_socket::Server>(
        token,
        [this](grpc::ByteBuffer request, call_socket::Completion respond) {
          executor->submit([this, request = std::move(request), respond = std::move(respond)] {
            if (!wait_until_calls_open()) return respond(not_serving(), {});
            grpc::ByteBuffer response;
            const grpc::Status status = serve(request, &response);
            respond(status, std::move(response));
          });
        },
        credentials.tls ? "" : bind_host);
  }
  // The entry (Note [Rendezvous entry]).
  std::string entry = host + ":" + std::to_string(port) + "\n" + (options.same_host ? host_identity : "-");
  if (shared_memory) entry += "\nshm " + shared_memory->card();
  if (socket_server) entry += "\nsocket " + socket_server->name();
  if (socket_server && socket_server->tcp_port() > 0) entry += "\ntcp " + std::to_string(socket_server->tcp_port());
  store->client().set(key("address/" + std::to_string(world.rank)), entry);
}

// Note [Rendezvous entry]
// Each worker publishes one Store entry, one item per line: "HOST:PORT" (gRPC), its host identity
// (rpc/shared_memory.h; "-" with RpcOptions::same_host off), then "shm PID FD INODE" when its
// shared-memory path is on, and "socket NAME" (its Unix socket) and "tcp PORT" (the same server on
// TCP at HOST) when it takes socket calls. Peers with this worker's identity use shm and socket;
// the others tcp.
void Agent::Impl::add_peer_entry(int rank, const std::string& entry) {
  std::vector<std::string> lines;
  for (size_t start = 0; start <= entry.size();) {
    const size_t end = std::min(entry.find('\n', start), entry.size());
    lines.push_back(entry.substr(start, end - start));
    start = end + 1;
  }
  peer_addresses.push_back(lines[0]);
  socket_addresses.emplace_back();
  socket_takes_any_frame.push_back(false);
  const bool same_host = options.same_host && lines.size() >= 2 && lines[1] == host_identity;
  for (size_t i = 2; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (same_host && line.rfind("shm ", 0) == 0 && shared_memory) shared_memory->add_peer(rank, line.substr(4));
    if (same_host && line.rfind("socket ", 0) == 0 && socket_server) {
      socket_addresses.back() = "unix:" + line.substr(7);
      socket_takes_any_frame.back() = true;
    }
    if (!same_host && line.rfind("tcp ", 0) == 0 && socket_server && socket_server->tcp_port() > 0) {
      socket_addresses.back() = "tcp:" + lines[0].substr(0, lines[0].rfind(':')) + ":" + line.substr(4);
    }
  }
}

void Agent::Impl::start() {
  if (options.keep_freed_memory) keep_freed_memory();
  for (const std::string& name : FunctionRegistry::instance().duplicate_names()) {
    DISTGRAD_FAIL("init_rpc: the function name '", name, "' is registered twice (DISTGRAD_REMOTE); use ",
                  "DISTGRAD_REMOTE_NAMED to give one of them another name");
  }
  for (int rank = 0; rank < world.world_size; ++rank) names.push_back(rpc::worker_name(rank, world.world_size));
  store = JobStore::connect("init_rpc", options.init_timeout);
  executor = std::make_unique<Executor>(options.num_worker_threads, options.max_worker_threads);
  start_server();
  const std::vector<std::string> keys = rank_keys("address");
  const std::vector<std::string> missing = store->client().wait_for(keys, options.init_timeout);
  if (!missing.empty()) {
    DISTGRAD_FAIL("init_rpc: ", names[world.rank], " waited ", seconds(options.init_timeout),
                  " for workers to start, and these did not: ", join_ranks(missing_ranks("address", missing)), " (of ",
                  world.world_size, ")");
  }
  for (int rank = 0; rank < world.world_size; ++rank) add_peer_entry(rank, store->client().get(keys[rank]));
  peers.resize(world.world_size);
}

Agent::Impl::Peer& Agent::Impl::peer(int rank) {
  DISTGRAD_CHECK(rank >= 0 && rank < world.world_size, "rpc: no worker ", rank, " in a world of ", world.world_size);
  std::lock_guard<std::mutex> lock(peers_mutex);
  std::unique_ptr<Peer>& peer = peers[rank];
  if (!peer) {
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(-1);
    arguments.SetMaxSendMessageSize(-1);
    credentials.configure(arguments);
    peer = std::make_unique<Peer>();
    peer->channel = grpc::CreateCustomChannel(peer_addresses[rank], credentials.channel, arguments);
    peer->stub = std::make_unique<grpc::GenericStub>(peer->channel);
    peer->method =
        std::make_unique<grpc::internal::RpcMethod>(kCallMethod, grpc::internal::RpcMethod::NORMAL_RPC, peer->channel);
  }
  return *peer;
}

call_socket::Client* Agent::Impl::socket_for(int rank, const grpc::ByteBuffer& request) {
  if (socket_addresses[rank].empty() ||
      (!socket_takes_any_frame[rank] && request.Length() > options.socket_frame_limit)) {
    return nullptr;
  }
  Peer& peer = this->peer(rank);
  std::lock_guard<std::mutex> lock(peers_mutex);
  if (!peer.socket_tried) {
    peer.socket_tried = true;
    try {
      peer.socket = std::make_unique<call_socket::Client>(socket_addresses[rank], token, std::chrono::seconds(10));
    } catch (const Error& error) {
      std::fprintf(stderr, "[%s] rpc: calling %s over gRPC: %s\n", names[world.rank].c_str(), names[rank].c_str(),
                   error.what());
    }
  }
  return peer.socket && peer.socket->is_open() ? peer.socket.get() : nullptr;
}

Future<Encoded> Agent::Impl::call_over_socket(call_socket::Client& socket, int to, const std::string& function,
                                              const grpc::ByteBuffer& request, std::chrono::milliseconds timeout) {
  struct SocketCall {
    Promise<Encoded> promise;
    std::string function;
  };
  auto state = std::make_shared<SocketCall>();
  state->function = function;
  Future<Encoded> future = state->promise.future();
  call_started(state.get(), nullptr);
  socket_calls.fetch_add(1, std::memory_order_relaxed);
  socket.call(request, timeout, [this, state, to](grpc::Status status, grpc::ByteBuffer reply) {
    try {
      if (!status.ok()) throw call_error(to, state->function, status);
      state->promise.set_value(decode_reply(to, reply));
    } catch (...) {
      state->promise.set_error(std::current_exception());
    }
    call_finished(state.get());  // the last use of this
  });
  return future;
}

void Agent::Impl::prepare_context(grpc::ClientContext& context, std::chrono::milliseconds timeout) const {
  if (!token.empty()) context.AddMetadata(kTokenKey, token);
  if (timeout.count() > 0) context.set_deadline(std::chrono::system_clock::now() + timeout);
}

std::vector<WireTensor> Agent::Impl::to_wire(const std::vector<Tensor>& tensors,
                                             const std::vector<std::pair<Device, Device>>& map, int shared_to) {
  std::vector<WireTensor> wire;
  wire.reserve(tensors.size());
  for (const Tensor& tensor : tensors) {
    Device target = Device::cpu();
    for (const auto& [from, to] : map) {
      if (from == tensor.device()) target = to;
    }
    if (shared_memory && shared_to >= 0 && tensor.defined()) {
      if (std::optional<shm::SegmentRef> shared = shared_memory->put(shared_to, tensor)) {
        wire.push_back({tensor, target, tensor.requires_grad(), shared});
        continue;
      }
    }
    wire.push_back({ops::contiguous(ops::to(tensor, Device::cpu())), target, tensor.requires_grad()});
    network_tensors.fetch_add(1, std::memory_order_relaxed);
    network_bytes.fetch_add(tensor.numel() * tensor.element_size(), std::memory_order_relaxed);
  }
  return wire;
}

SharedTensorReader Agent::Impl::shared_tensors_from(std::function<int()> sender) {
  if (!shared_memory) return {};
  return [links = shared_memory.get(), sender = std::move(sender)](const shm::SegmentRef& ref, const Shape& sizes,
                                                                   DType dtype) {
    return links->view(sender(), ref, sizes, dtype);
  };
}

grpc::ByteBuffer Agent::Impl::encode_request(int to, OutgoingCall& call) {
  wire::CallHeader header;
  AutogradIds ids;
  const std::shared_ptr<const CallHooks> hooks = this->hooks.load();
  if (hooks->before_request) hooks->before_request(to, call.arguments.tensors, ids);
  header.set_function(call.function);
  header.set_num_arguments(call.num_arguments);
  header.set_payload_bytes(call.arguments.payload.size());
  header.set_caller_rank(world.rank);
  header.set_autograd_context_id(ids.context_id);
  header.set_autograd_message_id(ids.message_id);
  header.set_reply_through_shared_memory(shared_memory && shared_memory->reads_from(to));
  static const std::vector<std::pair<Device, Device>> kNoMap;
  auto map = options.device_maps.find(names[to]);
  const auto& device_map = map == options.device_maps.end() ? kNoMap : map->second;
  for (const auto& [caller, callee] : device_map) {
    wire::DevicePair* pair = header.add_reply_devices();
    pair->set_caller_type(static_cast<int32_t>(caller.type));
    pair->set_caller_index(caller.index);
    pair->set_callee_type(static_cast<int32_t>(callee.type));
    pair->set_callee_index(callee.index);
  }
  const std::vector<WireTensor> tensors =
      to_wire(call.arguments.tensors, device_map, shared_memory && shared_memory->read_by(to) ? to : -1);
  for (const WireTensor& tensor : tensors) describe_tensor(tensor, header.add_tensors());
  return encode_frame(header, std::move(call.arguments.payload), tensors);
}

Encoded Agent::Impl::decode_reply(int from, const grpc::ByteBuffer& response) {
  wire::ReplyHeader header;
  DecodedFrame frame = decode_frame(response, header, shared_tensors_from([from] { return from; }));
  if (shared_memory) shared_memory->set_read_by(from, header.callee_reads_shared_memory());
  const std::shared_ptr<const CallHooks> hooks = this->hooks.load();
  if (hooks->on_reply) {
    hooks->on_reply(from, frame.tensors, frame.requires_grad,
                    {header.autograd_context_id(), header.autograd_message_id()});
  }
  return {std::move(frame.payload), std::move(frame.tensors)};
}

RemoteError Agent::Impl::call_error(int to, const std::string& function, const grpc::Status& status) const {
  std::string message = status.error_message();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    message = "the worker is unreachable (it may have exited): " + message;
  } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    message = "no reply before the call's deadline: " + message;
  }
  return RemoteError(to_status_code(status.error_code()), names[to], function, message);
}

bool Agent::Impl::token_accepted(const grpc::CallbackServerContext& context) const {
  if (token.empty()) return true;
  const auto& metadata = context.client_metadata();
  auto sent = metadata.find(kTokenKey);
  return sent != metadata.end() && same_token(std::string_view(sent->second.data(), sent->second.size()), token);
}

grpc::Status Agent::Impl::not_serving() const {
  return to_grpc_status(StatusCode::kUnavailable, names[world.rank] +
                                                      " is not serving calls: its init_rpc did not finish (it "
                                                      "stopped, or init_timeout passed)");
}

grpc::Status Agent::Impl::serve(const grpc::ByteBuffer& request, grpc::ByteBuffer* response) {
  wire::CallHeader header;
  try {
    DecodedFrame frame = decode_frame(request, header, shared_tensors_from([&header] { return header.caller_rank(); }));
    const Handler* handler = FunctionRegistry::instance().find(header.function());
    if (handler == nullptr) {
      return to_grpc_status(StatusCode::kNotFound,
                            "no function named '" + header.function() + "' is registered on " + names[world.rank]);
    }
    const int caller = header.caller_rank();
    const bool known_caller = caller >= 0 && caller < world.world_size;
    const std::shared_ptr<const CallHooks> hooks = this->hooks.load();
    std::shared_ptr<void> scope;
    if (hooks->on_request && known_caller) {
      scope = hooks->on_request(caller, frame.tensors, frame.requires_grad,
                                {header.autograd_context_id(), header.autograd_message_id()});
    }
    Encoded result = (*handler)(frame.payload, frame.tensors, header.num_arguments());
    wire::ReplyHeader reply;
    AutogradIds ids;
    if (hooks->before_reply && known_caller) hooks->before_reply(caller, result.tensors, ids);
    reply.set_payload_bytes(result.payload.size());
    reply.set_autograd_context_id(ids.context_id);
    reply.set_autograd_message_id(ids.message_id);
    reply.set_callee_reads_shared_memory(shared_memory && known_caller && shared_memory->reads_from(caller));
    std::vector<std::pair<Device, Device>> back;  // callee device -> caller device
    for (const wire::DevicePair& pair : header.reply_devices()) {
      back.emplace_back(Device{static_cast<DeviceType>(pair.callee_type()), pair.callee_index()},
                        Device{static_cast<DeviceType>(pair.caller_type()), pair.caller_index()});
    }
    const std::vector<WireTensor> tensors =
        to_wire(result.tensors, back, known_caller && header.reply_through_shared_memory() ? caller : -1);
    for (const WireTensor& tensor : tensors) describe_tensor(tensor, reply.add_tensors());
    *response = encode_frame(reply, std::move(result.payload), tensors);
    scope.reset();
    return grpc::Status::OK;
  } catch (const CodecError& error) {
    return to_grpc_status(StatusCode::kInvalidArgument,
                          names[world.rank] + " received a malformed call" +
                              (header.function().empty() ? "" : " of " + header.function()) + ": " + error.what());
  } catch (const StatusError& error) {
    return to_grpc_status(error.code(), error.what());
  } catch (const std::exception& error) {
    return to_grpc_status(StatusCode::kUnknown, error.what());
  } catch (...) {  // escaping here would terminate the worker
    return to_grpc_status(StatusCode::kUnknown, header.function() + " threw an exception that is not a std::exception");
  }
}

void Agent::Impl::wait_for_everyone(const std::string& name, std::chrono::milliseconds timeout, const char* what) {
  store->client().set(key(name + "/" + std::to_string(world.rank)), "1");
  const std::vector<std::string> keys = rank_keys(name);
  const auto start = Clock::now();
  for (;;) {
    const auto left = timeout.count() > 0
                          ? std::chrono::duration_cast<std::chrono::milliseconds>(timeout - (Clock::now() - start))
                          : std::chrono::milliseconds(1000);
    const std::vector<std::string> missing = store->client().wait_for(
        keys, std::max(std::chrono::milliseconds(1), std::min(left, std::chrono::milliseconds(1000))));
    if (missing.empty()) return;
    const std::vector<int> ranks = missing_ranks(name, missing);
    if (timeout.count() > 0 && Clock::now() - start >= timeout) {
      DISTGRAD_FAIL(what, ": ", names[world.rank], " waited ", seconds(timeout), " and workers ", join_ranks(ranks),
                    " (of ", world.world_size, ") did not arrive");
    }
    if (timeout.count() == 0) {  // no deadline: make sure the missing workers are still alive
      for (int rank : ranks) {
        grpc::ClientContext context;
        prepare_context(context, std::chrono::seconds(10));
        OutgoingCall call{kPingFunction, 0, {}};
        grpc::ByteBuffer reply;
        const grpc::Status status = grpc::internal::BlockingUnaryCall(peer(rank).channel.get(), *peer(rank).method,
                                                                      &context, encode_request(rank, call), &reply);
        if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
          DISTGRAD_FAIL(what, ": ", names[rank], " exited before reaching it (", status.error_message(), ")");
        }
      }
    }
  }
}

void Agent::Impl::stop() {
  if (stopped) return;
  stopped = true;
  set_gate(/*open=*/false);  // requests still waiting for init_rpc give up
  if (socket_server) socket_server->stop();
  if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  {
    std::lock_guard<std::mutex> lock(peers_mutex);
    for (const std::unique_ptr<Peer>& peer : peers) {
      if (peer && peer->socket) peer->socket->close(grpc::Status(grpc::StatusCode::CANCELLED, "RPC is shutting down"));
    }
  }
  // Cancelled calls complete at once; a callback still running user continuations gets a while.
  if (!cancel_calls(std::chrono::seconds(10))) {
    std::fprintf(stderr, "[%s] rpc: calls still in flight 10 s after they were cancelled at shutdown\n",
                 names.empty() ? "worker" : names[world.rank].c_str());
  }
  executor.reset();
  if (server) server->Wait();
  std::vector<std::unique_ptr<Peer>> closed;  // destroyed outside the lock: their readers may be finishing calls
  {
    std::lock_guard<std::mutex> lock(peers_mutex);
    closed.swap(peers);
  }
  closed.clear();
  store.reset();
}

// ---------------------------------------------------------------------------------------------

Agent::Agent(RpcOptions options) : impl_(std::make_unique<Impl>(*this, std::move(options))) {}

Agent::~Agent() { impl_->stop(); }

void Agent::start() { impl_->start(); }

void Agent::open_calls() { impl_->set_gate(/*open=*/true); }

const WorldInfo& Agent::world() const { return impl_->world; }
const RpcOptions& Agent::options() const { return impl_->options; }
const std::string& Agent::worker_name(int rank) const {
  DISTGRAD_CHECK(rank >= 0 && rank < impl_->world.world_size, "rpc: no worker ", rank, " in a world of ",
                 impl_->world.world_size);
  return impl_->names[rank];
}
StoreClient& Agent::store() { return impl_->store->client(); }

TransportStats Agent::transport_stats() const {
  TransportStats stats;
  stats.network_tensors = impl_->network_tensors.load(std::memory_order_relaxed);
  stats.socket_calls = impl_->socket_calls.load(std::memory_order_relaxed);
  stats.grpc_calls = impl_->grpc_calls.load(std::memory_order_relaxed);
  stats.network_bytes = impl_->network_bytes.load(std::memory_order_relaxed);
  if (const shm::Links* links = impl_->shared_memory.get()) {
    stats.shared_memory_tensors = links->counters().shared_tensors.load(std::memory_order_relaxed);
    stats.shared_memory_bytes = links->counters().shared_bytes.load(std::memory_order_relaxed);
    std::tie(stats.shared_memory_segments, stats.shared_memory_segment_bytes) = links->pool_size();
  }
  return stats;
}
void install_call_hooks(CallHooks hooks) {
  auto shared = std::make_shared<const CallHooks>(std::move(hooks));
  {
    std::lock_guard<std::mutex> lock(installed_hooks_mutex);
    installed_hooks_slot() = shared;
  }
  if (is_initialized()) agent().set_hooks(*shared);
}

void Agent::set_hooks(CallHooks hooks) { impl_->hooks.store(std::make_shared<const CallHooks>(std::move(hooks))); }

Future<Encoded> Agent::call_async(int to, OutgoingCall call, std::chrono::milliseconds timeout) {
  Impl::Peer& peer = impl_->peer(to);
  grpc::ByteBuffer request = impl_->encode_request(to, call);
  if (call_socket::Client* socket = impl_->socket_for(to, request)) {
    return impl_->call_over_socket(*socket, to, call.function, request, timeout);
  }
  impl_->grpc_calls.fetch_add(1, std::memory_order_relaxed);
  auto* state = new Impl::AsyncCall;
  state->to = to;
  state->function = call.function;
  state->request = std::move(request);
  Future<Encoded> future = state->promise.future();
  impl_->prepare_context(state->context, timeout);
  impl_->call_started(&state->context, &state->context);
  peer.stub->UnaryCall(&state->context, kCallMethod, grpc::StubOptions(), &state->request, &state->response,
                       [impl = impl_.get(), state](const grpc::Status& status) {
                         std::unique_ptr<Impl::AsyncCall> call(state);
                         try {
                           if (!status.ok()) throw impl->call_error(call->to, call->function, status);
                           call->promise.set_value(impl->decode_reply(call->to, call->response));
                         } catch (...) {
                           call->promise.set_error(std::current_exception());
                         }
                         impl->call_finished(&call->context);  // the last use of impl
                       });
  return future;
}

Encoded Agent::call_sync(int to, OutgoingCall call, std::chrono::milliseconds timeout) {
  Impl::Peer& peer = impl_->peer(to);
  const grpc::ByteBuffer request = impl_->encode_request(to, call);
  if (call_socket::Client* socket = impl_->socket_for(to, request)) {
    return impl_->call_over_socket(*socket, to, call.function, request, timeout).get();
  }
  impl_->grpc_calls.fetch_add(1, std::memory_order_relaxed);
  grpc::ClientContext context;
  impl_->prepare_context(context, timeout);
  const std::string function = call.function;
  grpc::ByteBuffer response;
  impl_->call_started(&context, &context);
  grpc::Status status;
  {
    detail::BlockingScope blocking;
    status = grpc::internal::BlockingUnaryCall(peer.channel.get(), *peer.method, &context, request, &response);
  }
  impl_->call_finished(&context);
  if (!status.ok()) throw impl_->call_error(to, function, status);
  return impl_->decode_reply(to, response);
}

void Agent::barrier(std::chrono::milliseconds timeout) {
  impl_->wait_for_everyone("barrier/" + std::to_string(impl_->barrier_generation++), timeout, "barrier");
}

void Agent::shutdown(bool graceful) {
  if (graceful && !impl_->stopped) {
    // Everyone arrives; then every worker's calls are answered before any server stops.
    impl_->wait_for_everyone("shutdown", impl_->options.shutdown_timeout, "shutdown");
    impl_->wait_for_calls();
    impl_->wait_for_everyone("drained", impl_->options.shutdown_timeout, "shutdown");
    // The Store's host leaves last, once everyone has read what they needed from it.
    impl_->store->leave("rpc", std::chrono::seconds(30));
  }
  impl_->stop();
}

}  // namespace distgrad::rpc
