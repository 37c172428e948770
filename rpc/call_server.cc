#include "rpc/call_server.h"

#include <grpcpp/generic/async_generic_service.h>

#include <vector>

#include "core/error.h"
#include "proto/worker.pb.h"
#include "rpc/codec.h"
#include "rpc/errors.h"
#include "rpc/frame.h"
#include "rpc/registry.h"
#include "trace/trace.h"

namespace distgrad::rpc {
namespace {

constexpr size_t kMaxStatusMessage = 4096;  // status messages travel in HTTP/2 trailers
// The Worker service's one method (proto/worker.proto), as callers name it.
constexpr char kCallMethod[] = "/distgrad.rpc.wire.Worker/Call";

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

}  // namespace

// One call of the Worker service's Call method (Note [Token before the message]): the token is
// checked before the request is read; the request then runs on the executor, which finishes the
// call. gRPC's threads never block.
class CallServer::CallReactor final : public grpc::ServerGenericBidiReactor {
 public:
  CallReactor(CallServer& server, const grpc::GenericCallbackServerContext& context) : server_(server) {
    if (context.method() != kCallMethod) {
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          server_.setup_.name + " serves " + kCallMethod + " only, not " + context.method()));
    } else if (rendezvous::check_job_token(context, server_.setup_.token) != rendezvous::TokenCheck::kAccepted) {
      Finish(to_grpc_status(StatusCode::kUnauthenticated,
                            server_.setup_.name + " refused a call without the job's token (DISTGRAD_TOKEN)"));
    } else {
      StartRead(&request_);
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the call ended before its request arrived"));
      return;
    }
    const int64_t arrived_ns = trace::enabled() ? trace::now_ns() : 0;
    server_.setup_.executor.submit([this, arrived_ns] {
      if (!server_.wait_until_calls_open()) return Finish(server_.not_serving());
      const grpc::Status status = server_.serve(request_, &response_, arrived_ns);
      if (!status.ok()) return Finish(status);
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    });
  }

  void OnDone() override { delete this; }

 private:
  CallServer& server_;
  grpc::ByteBuffer request_, response_;
};

class CallServer::WorkerService final : public grpc::CallbackGenericService {
 public:
  explicit WorkerService(CallServer& server) : server_(server) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override {
    return new CallReactor(server_, *context);
  }

 private:
  CallServer& server_;
};

CallServer::CallServer(Setup setup) : setup_(std::move(setup)) {}

CallServer::~CallServer() = default;

int CallServer::start(const std::string& bind_host) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(bind_host + ":0", setup_.credentials.server, &port);
  builder.SetMaxReceiveMessageSize(rendezvous::grpc_message_limit(setup_.max_message_bytes));
  builder.SetMaxSendMessageSize(-1);
  service_ = std::make_unique<WorkerService>(*this);
  builder.RegisterCallbackGenericService(service_.get());
  server_ = builder.BuildAndStart();
  DISTGRAD_CHECK(server_ != nullptr && port > 0, "init_rpc: ", setup_.name, " could not start its server on ",
                 bind_host);
  if (setup_.socket_calls) {
    // TCP beside the Unix socket unless TLS is on (the socket protocol has no encryption).
    socket_server_ =
        std::make_unique<call_socket::Server>(setup_.token, frame_handler(), setup_.credentials.tls ? "" : bind_host,
                                              call_socket::ServerLimits{.max_request_bytes = setup_.max_message_bytes});
  }
  return port;
}

call_socket::Server::Handler CallServer::frame_handler() {
  return [this](grpc::ByteBuffer request, call_socket::Completion respond) {
    const int64_t arrived_ns = trace::enabled() ? trace::now_ns() : 0;
    setup_.executor.submit([this, request = std::move(request), respond = std::move(respond), arrived_ns] {
      if (!wait_until_calls_open()) return respond(not_serving(), {});
      grpc::ByteBuffer response;
      const grpc::Status status = serve(request, &response, arrived_ns);
      respond(status, std::move(response));
    });
  };
}

std::string CallServer::socket_name() const { return socket_server_ ? socket_server_->name() : ""; }

int CallServer::socket_tcp_port() const { return socket_server_ ? socket_server_->tcp_port() : 0; }

bool CallServer::wait_until_calls_open() {
  std::unique_lock<std::mutex> lock(gate_mutex_);
  gate_changed_.wait_for(lock, setup_.init_timeout, [this] { return calls_open_ || calls_closed_; });
  return calls_open_ && !calls_closed_;
}

void CallServer::set_gate(bool open) {
  std::lock_guard<std::mutex> lock(gate_mutex_);
  (open ? calls_open_ : calls_closed_) = true;
  gate_changed_.notify_all();
}

void CallServer::open_calls() { set_gate(/*open=*/true); }

void CallServer::stop_listening() {
  set_gate(/*open=*/false);  // requests still waiting for init_rpc give up
  if (socket_server_) socket_server_->stop();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

void CallServer::wait() {
  if (server_) server_->Wait();
}

grpc::Status CallServer::not_serving() const {
  return to_grpc_status(StatusCode::kUnavailable, setup_.name +
                                                      " is not serving calls: its init_rpc did not finish (it "
                                                      "stopped, or init_timeout passed)");
}

grpc::Status CallServer::serve(const grpc::ByteBuffer& request, grpc::ByteBuffer* response, int64_t arrived_ns) {
  // Note [Calls in a trace] (rpc/call_client.h). The wait in the queue is an asynchronous span:
  // this thread may have served another call meanwhile.
  if (arrived_ns != 0) {
    const uint64_t id = trace::new_id();
    trace::record({'b', "rpc.queue", "queue", arrived_ns, 0, id, {}});
    trace::record({'e', "rpc.queue", "queue", trace::now_ns(), 0, id, {}});
  }
  trace::Span span("rpc.serve", "call");
  span.arg("request_bytes", static_cast<int64_t>(request.Length()));
  wire::CallHeader header;
  const grpc::Status status = run_call(request, header, response, span);
  if (!header.function().empty()) span.set_name(header.function());
  span.arg("from", int64_t{header.caller_rank()});
  span.arg("reply_bytes", status.ok() ? static_cast<int64_t>(response->Length()) : 0);
  span.arg("failed", int64_t{!status.ok()});
  return status;
}

grpc::Status CallServer::run_call(const grpc::ByteBuffer& request, wire::CallHeader& header, grpc::ByteBuffer* response,
                                  trace::Span& span) {
  try {
    DecodedFrame frame = [&] {
      trace::Span decoding("rpc", "decode request");
      return decode_frame(request, header, setup_.paths.reader_from([&header] { return header.caller_rank(); }));
    }();
    span.flow_in(header.trace_flow());
    const Handler* handler = FunctionRegistry::instance().find(header.function());
    if (handler == nullptr) {
      return to_grpc_status(StatusCode::kNotFound,
                            "no function named '" + header.function() + "' is registered on " + setup_.name);
    }
    const int caller = header.caller_rank();
    const bool known_caller = caller >= 0 && caller < setup_.world.world_size;
    const CallSite call{caller, header.function()};
    InterceptorChain::Scopes scopes;
    if (known_caller) scopes = setup_.interceptors.on_request(call, frame.tensors, header);
    Encoded result = [&] {
      trace::Span running("rpc", "run");
      return (*handler)(CallArguments{frame.payload, frame.tensors, header.num_arguments(), CallTarget{caller, true}});
    }();
    trace::Span encoding("rpc", "encode reply");
    wire::ReplyHeader reply;
    if (known_caller) setup_.interceptors.before_reply(call, result.tensors, reply);
    reply.set_payload_bytes(result.payload.size());
    transport::shm::Links* shared_memory = setup_.paths.shared_memory();
    reply.set_callee_reads_shared_memory(shared_memory && known_caller && shared_memory->reads_from(caller));
    DeviceMap back;  // callee device -> caller device
    for (const wire::DevicePair& pair : header.reply_devices()) {
      back.emplace_back(Device{static_cast<DeviceType>(pair.callee_type()), pair.callee_index()},
                        Device{static_cast<DeviceType>(pair.caller_type()), pair.caller_index()});
    }
    const std::vector<WireTensor> tensors =
        setup_.paths.to_wire(result.tensors, back, known_caller && header.reply_through_shared_memory() ? caller : -1);
    for (const WireTensor& tensor : tensors) describe_tensor(tensor, reply.add_tensors());
    if (header.trace_flow() != 0 && encoding.active()) {
      reply.set_trace_flow(header.trace_flow() + 1);
      encoding.flow_out(header.trace_flow() + 1);
    }
    *response = encode_frame(reply, std::move(result.payload), tensors);
    while (!scopes.empty()) scopes.pop_back();  // the innermost first
    return grpc::Status::OK;
  } catch (const CodecError& error) {
    return to_grpc_status(StatusCode::kInvalidArgument,
                          setup_.name + " received a malformed call" +
                              (header.function().empty() ? "" : " of " + header.function()) + ": " + error.what());
  } catch (const StatusError& error) {
    return to_grpc_status(error.code(), error.what());
  } catch (const std::exception& error) {
    return to_grpc_status(StatusCode::kUnknown, error.what());
  } catch (...) {  // escaping here would terminate the worker
    return to_grpc_status(StatusCode::kUnknown, header.function() + " threw an exception that is not a std::exception");
  }
}

}  // namespace distgrad::rpc
