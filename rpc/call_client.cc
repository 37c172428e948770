#include "rpc/call_client.h"

#include <grpcpp/impl/codegen/client_unary_call.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "proto/worker.grpc.pb.h"
#include "rpc/frame.h"
#include "rpc/loopback.h"
#include "rpc/registry.h"
#include "trace/trace.h"

namespace distgrad::rpc {
namespace {

constexpr char kCallMethod[] = "/distgrad.rpc.wire.Worker/Call";
constexpr char kPingFunction[] = "__distgrad.ping";

// What is left of `timeout` (0: no deadline) since `start`; at least 1 ms.
std::chrono::milliseconds time_left(std::chrono::milliseconds timeout, std::chrono::steady_clock::time_point start) {
  if (timeout.count() <= 0) return timeout;
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  return std::max(std::chrono::milliseconds(1), timeout - spent);
}

// Answers liveness checks (a graceful shutdown asks whether missing workers are still alive).
bool ping() { return true; }
DISTGRAD_REMOTE_NAMED(ping, kPingFunction);

StatusCode to_status_code(grpc::StatusCode code) { return static_cast<StatusCode>(static_cast<int>(code)); }

// The ends of a call's asynchronous span on the caller (Note [Calls in a trace]); `id` 0: the call
// is not traced.
void trace_call_begun(uint64_t id, int to, const std::string& function, int64_t issued_ns, size_t request_bytes) {
  if (id == 0) return;
  trace::record({'b',
                 "rpc.call",
                 function,
                 issued_ns,
                 0,
                 id,
                 {{"to", int64_t{to}}, {"request_bytes", static_cast<int64_t>(request_bytes)}}});
}

void trace_call_ended(uint64_t id, const std::string& function, size_t reply_bytes, bool failed) {
  if (id == 0) return;
  trace::record({'e',
                 "rpc.call",
                 function,
                 trace::now_ns(),
                 0,
                 id,
                 {{"reply_bytes", static_cast<int64_t>(reply_bytes)}, {"failed", int64_t{failed}}}});
}

// A new call's trace id; 0 when this process does not record.
uint64_t new_trace_id() { return trace::enabled() ? trace::new_id() : 0; }

}  // namespace

// What a worker needs to call a peer.
struct CallClient::Peer {
  PeerAddress address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::unique_ptr<grpc::internal::RpcMethod> method;  // registered on the channel, for blocking calls
  // The call socket, connected on first use (this worker's Loopback for itself); null when it
  // could not be.
  std::unique_ptr<call_socket::Channel> socket;
  bool socket_tried = false;
};

// One asynchronous gRPC call from its start to its completion callback.
struct CallClient::AsyncCall {
  grpc::ClientContext context;
  grpc::ByteBuffer request, response;
  Promise<Encoded> promise;
  int to = 0;
  std::string function;
  uint64_t trace_id = 0;
};

CallClient::CallClient(Setup setup) : setup_(std::move(setup)), addresses_(setup_.peers) {
  peers_.resize(setup_.world.world_size);
}

CallClient::~CallClient() = default;

CallClient::Peer& CallClient::peer(int rank) {
  DISTGRAD_CHECK(rank >= 0 && rank < setup_.world.world_size, "rpc: no worker ", rank, " in a world of ",
                 setup_.world.world_size);
  std::lock_guard<std::mutex> lock(peers_mutex_);
  DISTGRAD_CHECK(!closed_, "rpc: ", setup_.names[setup_.world.rank], " cannot call ", setup_.names[rank],
                 ": RPC has shut down");
  std::unique_ptr<Peer>& peer = peers_[rank];
  if (!peer) {
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(rendezvous::grpc_message_limit(setup_.max_message_bytes));
    arguments.SetMaxSendMessageSize(-1);
    setup_.credentials.configure(arguments);
    peer = std::make_unique<Peer>();
    peer->address = addresses_[rank];
    peer->channel = grpc::CreateCustomChannel(peer->address.grpc, setup_.credentials.channel, arguments);
    peer->stub = std::make_unique<grpc::GenericStub>(peer->channel);
    peer->method =
        std::make_unique<grpc::internal::RpcMethod>(kCallMethod, grpc::internal::RpcMethod::NORMAL_RPC, peer->channel);
  }
  return *peer;
}

call_socket::Channel* CallClient::socket_for(int rank, const grpc::ByteBuffer& request,
                                             std::chrono::milliseconds timeout) {
  Peer& peer = this->peer(rank);
  const PeerAddress& address = peer.address;
  if (!in_process(rank) &&
      (address.socket.empty() || (!address.socket_takes_any_frame && request.Length() > setup_.socket_frame_limit))) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(peers_mutex_);
  if (!peer.socket_tried && in_process(rank)) {
    peer.socket_tried = true;
    peer.socket = std::make_unique<Loopback>(setup_.serve_own_calls);
  } else if (!peer.socket_tried) {
    peer.socket_tried = true;
    try {
      constexpr std::chrono::milliseconds kConnectTimeout = std::chrono::seconds(10);
      const std::chrono::milliseconds connect_timeout =
          timeout.count() > 0 ? std::min(timeout, kConnectTimeout) : kConnectTimeout;
      peer.socket = std::make_unique<call_socket::Client>(address.socket, setup_.token, connect_timeout,
                                                          setup_.max_message_bytes);
    } catch (const Error& error) {
      std::fprintf(stderr, "[%s] rpc: calling %s over gRPC: %s\n", setup_.names[setup_.world.rank].c_str(),
                   setup_.names[rank].c_str(), error.what());
    }
  }
  return peer.socket && peer.socket->is_open() ? peer.socket.get() : nullptr;
}

void CallClient::replace_peer(int rank, PeerAddress address) {
  DISTGRAD_CHECK(rank >= 0 && rank < setup_.world.world_size, "rpc: no worker ", rank, " in a world of ",
                 setup_.world.world_size);
  std::lock_guard<std::mutex> lock(peers_mutex_);
  if (closed_) return;
  addresses_[rank] = std::move(address);
  if (peers_[rank]) retired_peers_.push_back(std::move(peers_[rank]));
}

void CallClient::call_started(const void* call, grpc::ClientContext* context) {
  std::lock_guard<std::recursive_mutex> lock(calls_mutex_);
  calls_in_flight_.emplace(call, context);
}

void CallClient::call_finished(const void* call) {
  std::lock_guard<std::recursive_mutex> lock(calls_mutex_);
  calls_in_flight_.erase(call);
  calls_finished_.notify_all();
}

void CallClient::wait_for_calls() {
  std::unique_lock<std::recursive_mutex> lock(calls_mutex_);
  calls_finished_.wait(lock, [this] { return calls_in_flight_.empty(); });
}

bool CallClient::cancel_calls(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(peers_mutex_);
    for (const auto* peers : {&peers_, &retired_peers_}) {
      for (const std::unique_ptr<Peer>& peer : *peers) {
        if (peer && peer->socket) {
          peer->socket->close(grpc::Status(grpc::StatusCode::CANCELLED, "RPC is shutting down"));
        }
      }
    }
  }
  bool finished = false;
  {
    // While the lock is held no call can finish on another thread, so every context in the copy is
    // alive when it is cancelled (one finished inline is erased from the set, not the copy).
    std::unique_lock<std::recursive_mutex> lock(calls_mutex_);
    std::vector<grpc::ClientContext*> in_flight;
    for (const auto& [call, context] : calls_in_flight_) {
      if (context != nullptr) in_flight.push_back(context);
    }
    for (grpc::ClientContext* context : in_flight) context->TryCancel();
    finished = calls_finished_.wait_for(lock, timeout, [this] { return calls_in_flight_.empty(); });
  }
  return finished;
}

void CallClient::close() {
  // Destroyed outside the lock: their readers may be finishing calls.
  std::vector<std::unique_ptr<Peer>> closed, retired;
  std::lock_guard<std::mutex> lock(peers_mutex_);
  closed.swap(peers_);
  retired.swap(retired_peers_);
  closed_ = true;
}

void CallClient::prepare_context(grpc::ClientContext& context, std::chrono::milliseconds timeout) const {
  if (!setup_.token.empty()) context.AddMetadata(rendezvous::kTokenMetadataKey, setup_.token);
  if (timeout.count() > 0) context.set_deadline(std::chrono::system_clock::now() + timeout);
}

grpc::ByteBuffer CallClient::encode_request(int to, OutgoingCall& call, uint64_t trace_id) {
  const int64_t issued_ns = trace_id != 0 ? trace::now_ns() : 0;
  trace::Span span("rpc", "encode request");
  wire::CallHeader header;
  setup_.interceptors.before_request({to, call.function}, call.arguments.tensors, header);
  header.set_function(call.function);
  header.set_num_arguments(call.num_arguments);
  header.set_payload_bytes(call.arguments.payload.size());
  header.set_caller_rank(setup_.world.rank);
  transport::shm::Links* shared_memory = setup_.paths.shared_memory();
  header.set_reply_through_shared_memory(shared_memory && shared_memory->reads_from(to));
  static const DeviceMap kNoMap;
  auto map = setup_.device_maps.find(setup_.names[to]);
  const DeviceMap& device_map = map == setup_.device_maps.end() ? kNoMap : map->second;
  for (const auto& [caller, callee] : device_map) {
    wire::DevicePair* pair = header.add_reply_devices();
    pair->set_caller_type(static_cast<int32_t>(caller.type));
    pair->set_caller_index(caller.index);
    pair->set_callee_type(static_cast<int32_t>(callee.type));
    pair->set_callee_index(callee.index);
  }
  const std::vector<WireTensor> tensors =
      setup_.paths.to_wire(call.arguments.tensors, device_map, shared_memory && shared_memory->read_by(to) ? to : -1);
  for (const WireTensor& tensor : tensors) describe_tensor(tensor, header.add_tensors());
  if (trace_id != 0) {
    header.set_trace_flow(trace_id);
    span.flow_out(trace_id);
  }
  grpc::ByteBuffer frame = encode_frame(header, std::move(call.arguments.payload), tensors);
  span.arg("bytes", static_cast<int64_t>(frame.Length()));
  trace_call_begun(trace_id, to, call.function, issued_ns, frame.Length());
  return frame;
}

Encoded CallClient::decode_reply(int from, const std::string& function, const grpc::ByteBuffer& response,
                                 uint64_t trace_id) {
  trace::Span span("rpc", "decode reply");
  wire::ReplyHeader header;
  DecodedFrame frame = decode_frame(response, header, setup_.paths.reader_from([from] { return from; }));
  span.flow_in(header.trace_flow());
  if (transport::shm::Links* shared_memory = setup_.paths.shared_memory()) {
    shared_memory->set_read_by(from, header.callee_reads_shared_memory());
  }
  setup_.interceptors.on_reply({from, function}, frame.tensors, header);
  trace_call_ended(trace_id, function, response.Length(), /*failed=*/false);
  return {std::move(frame.payload), std::move(frame.tensors)};
}

RemoteError CallClient::call_error(int to, const std::string& function, const grpc::Status& status) const {
  std::string message = status.error_message();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    message = "the worker is unreachable (it may have exited): " + message;
  } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    message = "no reply before the call's deadline: " + message;
  } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    message =
        "a message was larger than a worker accepts (RpcOptions::max_message_bytes, DISTGRAD_MAX_MESSAGE_BYTES): " +
        message;
  }
  return RemoteError(to_status_code(status.error_code()), setup_.names[to], function, message);
}

void CallClient::count_channel_call(int rank) {
  (in_process(rank) ? in_process_calls_ : socket_calls_).fetch_add(1, std::memory_order_relaxed);
}

Future<Encoded> CallClient::call_over_socket(call_socket::Channel& socket, int to, const std::string& function,
                                             const grpc::ByteBuffer& request, std::chrono::milliseconds timeout,
                                             uint64_t trace_id) {
  struct SocketCall {
    Promise<Encoded> promise;
    std::string function;
    uint64_t trace_id = 0;
  };
  auto state = std::make_shared<SocketCall>();
  state->function = function;
  state->trace_id = trace_id;
  Future<Encoded> future = state->promise.future();
  call_started(state.get(), nullptr);
  count_channel_call(to);
  socket.call(request, timeout, [this, state, to](grpc::Status status, grpc::ByteBuffer reply) {
    try {
      if (!status.ok()) throw call_error(to, state->function, status);
      state->promise.set_value(decode_reply(to, state->function, reply, state->trace_id));
    } catch (...) {
      trace_call_ended(state->trace_id, state->function, 0, /*failed=*/true);
      state->promise.set_error(std::current_exception());
    }
    call_finished(state.get());  // the last use of this
  });
  return future;
}

Future<Encoded> CallClient::call_async(int to, OutgoingCall call, std::chrono::milliseconds timeout) {
  Peer& peer = this->peer(to);
  const uint64_t trace_id = new_trace_id();
  grpc::ByteBuffer request = encode_request(to, call, trace_id);
  const auto start = std::chrono::steady_clock::now();
  if (call_socket::Channel* socket = socket_for(to, request, timeout)) {
    return call_over_socket(*socket, to, call.function, request, timeout, trace_id);
  }
  timeout = time_left(timeout, start);  // a failed first connection took some of it
  grpc_calls_.fetch_add(1, std::memory_order_relaxed);
  auto* state = new AsyncCall;
  state->to = to;
  state->function = call.function;
  state->trace_id = trace_id;
  state->request = std::move(request);
  Future<Encoded> future = state->promise.future();
  prepare_context(state->context, timeout);
  call_started(&state->context, &state->context);
  peer.stub->UnaryCall(
      &state->context, kCallMethod, grpc::StubOptions(), &state->request, &state->response,
      [this, state](const grpc::Status& status) {
        std::unique_ptr<AsyncCall> call(state);
        try {
          if (!status.ok()) throw call_error(call->to, call->function, status);
          call->promise.set_value(decode_reply(call->to, call->function, call->response, call->trace_id));
        } catch (...) {
          trace_call_ended(call->trace_id, call->function, 0, /*failed=*/true);
          call->promise.set_error(std::current_exception());
        }
        call_finished(&call->context);  // the last use of this
      });
  return future;
}

Encoded CallClient::call_sync(int to, OutgoingCall call, std::chrono::milliseconds timeout) {
  Peer& peer = this->peer(to);
  const uint64_t trace_id = new_trace_id();
  const grpc::ByteBuffer request = encode_request(to, call, trace_id);
  const auto start = std::chrono::steady_clock::now();
  if (call_socket::Channel* socket = socket_for(to, request, timeout)) {
    if (!setup_.socket_own_reads && !in_process(to)) {
      Future<Encoded> reply = call_over_socket(*socket, to, call.function, request, timeout, trace_id);
      trace::Span wait("rpc", "wait for reply");
      return reply.get();
    }
    count_channel_call(to);
    call_started(&request, nullptr);
    grpc::ByteBuffer reply;
    grpc::Status status;
    {
      detail::BlockingScope blocking;
      trace::Span wait("rpc", "wait for reply");
      status = socket->call_sync(request, timeout, &reply);  // Note [Reading one's own reply]
    }
    try {
      if (!status.ok()) throw call_error(to, call.function, status);
      Encoded result = decode_reply(to, call.function, reply, trace_id);
      call_finished(&request);
      return result;
    } catch (...) {
      trace_call_ended(trace_id, call.function, 0, /*failed=*/true);
      call_finished(&request);
      throw;
    }
  }
  timeout = time_left(timeout, start);
  grpc_calls_.fetch_add(1, std::memory_order_relaxed);
  grpc::ClientContext context;
  prepare_context(context, timeout);
  grpc::ByteBuffer response;
  call_started(&context, &context);
  grpc::Status status;
  {
    detail::BlockingScope blocking;
    trace::Span wait("rpc", "wait for reply");
    status = grpc::internal::BlockingUnaryCall(peer.channel.get(), *peer.method, &context, request, &response);
  }
  call_finished(&context);
  try {
    if (!status.ok()) throw call_error(to, call.function, status);
    return decode_reply(to, call.function, response, trace_id);
  } catch (...) {
    trace_call_ended(trace_id, call.function, 0, /*failed=*/true);
    throw;
  }
}

grpc::Status CallClient::ping(int rank, std::chrono::milliseconds timeout) {
  Peer& peer = this->peer(rank);
  grpc::ClientContext context;
  prepare_context(context, timeout);
  OutgoingCall call{kPingFunction, 0, {}};
  grpc::ByteBuffer reply;
  return grpc::internal::BlockingUnaryCall(peer.channel.get(), *peer.method, &context,
                                           encode_request(rank, call, /*trace_id=*/0), &reply);
}

void CallClient::add_to(TransportStats& stats) const {
  stats.socket_calls = socket_calls_.load(std::memory_order_relaxed);
  stats.in_process_calls = in_process_calls_.load(std::memory_order_relaxed);
  stats.grpc_calls = grpc_calls_.load(std::memory_order_relaxed);
}

}  // namespace distgrad::rpc
