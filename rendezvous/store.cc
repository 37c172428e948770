#include "rendezvous/store.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/error.h"
#include "proto/store.grpc.pb.h"
#include "proto/store.pb.h"
#include "rendezvous/credentials.h"

namespace distgrad::rendezvous {
namespace {

namespace wire = ::distgrad::rendezvous::wire;
using std::chrono::milliseconds;
using SystemTime = std::chrono::system_clock::time_point;

// A waiting request checks this often whether its client went away.
constexpr absl::Duration kCancellationPoll = absl::Milliseconds(200);
// Waits longer than this are unbounded (and deadlines this far out would overflow the clocks).
constexpr int64_t kUnboundedMs = int64_t{10} * 365 * 24 * 3600 * 1000;
// How long after a wait's timeout the client gives the server to deliver its answer, so that
// "still missing" comes from the server rather than from a cut-off call.
constexpr milliseconds kReplyGrace{250};
// Keys named in one error message; the rest are counted.
constexpr size_t kMaxKeysInMessage = 16;
// Characters of a key or value quoted in an error message.
constexpr size_t kMaxQuotedChars = 120;

// `text` in quotes, cut at kMaxQuotedChars. Not named `quoted`: std::quoted, found by
// argument-dependent lookup for a std::string, would win where <iomanip> is included (GCC 13).
std::string quoted_excerpt(std::string_view text) {
  if (text.size() <= kMaxQuotedChars) return detail::str_cat("\"", text, "\"");
  return detail::str_cat("\"", text.substr(0, kMaxQuotedChars), "...\" (", text.size(), " bytes)");
}

// `key "a"` or `keys "a", "b"` (the first kMaxKeysInMessage of them).
template <typename Keys>
std::string describe_keys(const Keys& keys) {
  std::string text = keys.size() == 1 ? "key " : "keys ";
  size_t shown = 0;
  for (const std::string& key : keys) {
    if (shown == kMaxKeysInMessage) {
      text += detail::str_cat(" and ", keys.size() - shown, " more");
      break;
    }
    text += (shown++ == 0 ? "" : ", ") + quoted_excerpt(key);
  }
  return text;
}

std::optional<int64_t> parse_int64(std::string_view text) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

bool insecure_allowed() {
  const char* insecure = std::getenv("DISTGRAD_INSECURE");
  return insecure != nullptr && std::string_view(insecure) == "1";
}

// ---------------------------------------------------------------------------------------------
// The service.

// The Store's data and its synchronous handlers. Get and Wait block a gRPC thread on
// `key_set_` until their keys are set, their timeout passes, their client goes away or the
// server shuts down.
class StoreService final : public wire::Store::Service {
 public:
  explicit StoreService(std::string token) : token_(std::move(token)) {}

  // Wakes every waiter; from now on requests fail with UNAVAILABLE.
  void shut_down() {
    absl::MutexLock lock(&data_mu_);
    shutting_down_ = true;
    key_set_.SignalAll();
  }

  grpc::Status Set(grpc::ServerContext* context, const wire::SetRequest* request, wire::SetResponse*) override {
    if (grpc::Status denied = admit(*context); !denied.ok()) return denied;
    std::string value = request->value();
    absl::MutexLock lock(&data_mu_);
    if (shutting_down_) return shutting_down_status();
    data_.insert_or_assign(request->key(), std::move(value));
    key_set_.SignalAll();
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext* context, const wire::GetRequest* request,
                   wire::GetResponse* response) override {
    if (grpc::Status denied = admit(*context); !denied.ok()) return denied;
    std::vector<std::string> keys = {request->key()};
    absl::MutexLock lock(&data_mu_);
    std::vector<std::string> missing = await_keys(*context, keys, request->timeout_ms());
    if (!missing.empty()) {
      if (shutting_down_) return shutting_down_status();
      if (context->IsCancelled()) return grpc::Status::CANCELLED;
      return {grpc::StatusCode::DEADLINE_EXCEEDED,
              detail::str_cat("key ", quoted_excerpt(request->key()), " was not set within ", request->timeout_ms(),
                              " ms")};
    }
    response->set_value(data_.at(request->key()));
    return grpc::Status::OK;
  }

  grpc::Status Wait(grpc::ServerContext* context, const wire::WaitRequest* request,
                    wire::WaitResponse* response) override {
    if (grpc::Status denied = admit(*context); !denied.ok()) return denied;
    absl::MutexLock lock(&data_mu_);
    std::vector<std::string> missing = await_keys(*context, request->keys(), request->timeout_ms());
    if (!missing.empty() && shutting_down_) return shutting_down_status();
    for (std::string& key : missing) response->add_missing(std::move(key));
    return grpc::Status::OK;
  }

  grpc::Status Add(grpc::ServerContext* context, const wire::AddRequest* request,
                   wire::AddResponse* response) override {
    if (grpc::Status denied = admit(*context); !denied.ok()) return denied;
    absl::MutexLock lock(&data_mu_);
    if (shutting_down_) return shutting_down_status();
    int64_t current = 0;
    if (auto it = data_.find(request->key()); it != data_.end()) {
      std::optional<int64_t> parsed = parse_int64(it->second);
      if (!parsed) {
        return {grpc::StatusCode::FAILED_PRECONDITION,
                detail::str_cat("the value at key ", quoted_excerpt(request->key()),
                                " is not an integer: ", quoted_excerpt(it->second))};
      }
      current = *parsed;
    }
    int64_t sum = 0;
    if (__builtin_add_overflow(current, request->amount(), &sum)) {
      return {grpc::StatusCode::OUT_OF_RANGE,
              detail::str_cat("adding ", request->amount(), " to key ", quoted_excerpt(request->key()), " (", current,
                              ") overflows")};
    }
    data_.insert_or_assign(request->key(), std::to_string(sum));
    key_set_.SignalAll();
    response->set_value(sum);
    return grpc::Status::OK;
  }

  grpc::Status CompareSet(grpc::ServerContext* context, const wire::CompareSetRequest* request,
                          wire::CompareSetResponse* response) override {
    if (grpc::Status denied = admit(*context); !denied.ok()) return denied;
    absl::MutexLock lock(&data_mu_);
    if (shutting_down_) return shutting_down_status();
    auto it = data_.find(request->key());
    if (it == data_.end()) {
      if (!request->expected_value().empty()) return grpc::Status::OK;  // still absent: empty value
      it = data_.emplace(request->key(), request->desired_value()).first;
      key_set_.SignalAll();
    } else if (it->second == request->expected_value()) {
      it->second = request->desired_value();
    }
    response->set_value(it->second);
    return grpc::Status::OK;
  }

  grpc::Status Delete(grpc::ServerContext* context, const wire::DeleteRequest* request,
                      wire::DeleteResponse* response) override {
    if (grpc::Status denied = admit(*context); !denied.ok()) return denied;
    absl::MutexLock lock(&data_mu_);
    if (shutting_down_) return shutting_down_status();
    response->set_deleted(data_.erase(request->key()) > 0);
    return grpc::Status::OK;
  }

  grpc::Status NumKeys(grpc::ServerContext* context, const wire::NumKeysRequest*,
                       wire::NumKeysResponse* response) override {
    if (grpc::Status denied = admit(*context); !denied.ok()) return denied;
    absl::MutexLock lock(&data_mu_);
    if (shutting_down_) return shutting_down_status();
    response->set_num_keys(static_cast<int64_t>(data_.size()));
    return grpc::Status::OK;
  }

 private:
  static grpc::Status shutting_down_status() { return {grpc::StatusCode::UNAVAILABLE, "the store is shutting down"}; }

  // See Note [Store token].
  grpc::Status admit(const grpc::ServerContext& context) const {
    if (token_.empty()) return grpc::Status::OK;
    const auto& metadata = context.client_metadata();
    auto it = metadata.find(kTokenMetadataKey);
    if (it == metadata.end()) {
      return {grpc::StatusCode::UNAUTHENTICATED, "the request carries no job token (metadata distgrad-token)"};
    }
    if (!same_token(std::string_view(it->second.data(), it->second.size()), token_)) {
      return {grpc::StatusCode::UNAUTHENTICATED, "the request carries a wrong job token"};
    }
    return grpc::Status::OK;
  }

  // Blocks until every key is set, `timeout_ms` passes (never longer), the client goes away or
  // the server shuts down; returns the keys still missing.
  template <typename Keys>
  std::vector<std::string> await_keys(const grpc::ServerContext& context, const Keys& keys, int64_t timeout_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_) {
    absl::Time deadline = timeout_ms >= kUnboundedMs
                              ? absl::InfiniteFuture()
                              : absl::Now() + absl::Milliseconds(std::max<int64_t>(timeout_ms, 0));
    while (true) {
      std::vector<std::string> missing;
      for (const std::string& key : keys) {
        if (!data_.contains(key)) missing.push_back(key);
      }
      absl::Time now = absl::Now();
      if (missing.empty() || shutting_down_ || now >= deadline || context.IsCancelled()) return missing;
      key_set_.WaitWithDeadline(&data_mu_, std::min(deadline, now + kCancellationPoll));
    }
  }

  const std::string token_;
  absl::Mutex data_mu_;
  absl::CondVar key_set_;  // signalled whenever a key is set, and on shutdown
  absl::flat_hash_map<std::string, std::string> data_ ABSL_GUARDED_BY(data_mu_);
  bool shutting_down_ ABSL_GUARDED_BY(data_mu_) = false;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// StoreServer

struct StoreServer::Impl {
  std::string host;
  int port = 0;
  StoreService service;
  std::unique_ptr<grpc::Server> server;
  std::once_flag shut_down;

  explicit Impl(std::string token) : service(std::move(token)) {}
};

StoreServer::StoreServer(const std::string& host, int port, std::string token) {
  std::string requested = join_host_port(host, port);
  DISTGRAD_CHECK(port >= 0 && port <= 65535, "StoreServer: ", requested, ": the port is not in 0..65535");
  DISTGRAD_CHECK(!token.empty() || is_loopback_host(host) || insecure_allowed(), "StoreServer: refusing to serve ",
                 requested,
                 " without a job token: anyone who can reach it could use the store. Set DISTGRAD_TOKEN, bind a "
                 "loopback address, or set DISTGRAD_INSECURE=1 on a trusted network");
  impl_ = std::make_unique<Impl>(std::move(token));
  impl_->host = host;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(requested, transport_credentials().server, &impl_->port);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  // gRPC sets SO_REUSEPORT by default: a second store could then bind a port already in use.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&impl_->service);
  impl_->server = builder.BuildAndStart();
  DISTGRAD_CHECK(impl_->server != nullptr && impl_->port != 0, "StoreServer: cannot listen on ", requested,
                 " (the port is in use, or the host is not an address of this machine)");
}

StoreServer::~StoreServer() { shutdown(); }

int StoreServer::port() const { return impl_->port; }

std::string StoreServer::address() const { return join_host_port(impl_->host, impl_->port); }

void StoreServer::shutdown() {
  std::call_once(impl_->shut_down, [this] {
    impl_->service.shut_down();
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  });
}

// ---------------------------------------------------------------------------------------------
// StoreClient

struct StoreClient::Impl {
  std::string address;
  std::string token;
  milliseconds timeout;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<wire::Store::Stub> stub;

  // A call context with the token and, unless `timeout` is 0 (no limit), a deadline.
  std::unique_ptr<grpc::ClientContext> context(milliseconds timeout) const {
    auto context = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) context->AddMetadata(kTokenMetadataKey, token);
    if (timeout.count() > 0 && timeout.count() < kUnboundedMs) {
      context->set_deadline(std::chrono::system_clock::now() + timeout);
    }
    return context;
  }

  // The request's timeout_ms for a wait of `timeout` (0 = no limit).
  static int64_t wait_ms(milliseconds timeout) { return timeout.count() == 0 ? kUnboundedMs : timeout.count(); }
  // The call deadline of a wait: the server answers at `timeout`; see kReplyGrace.
  static milliseconds wait_call_timeout(milliseconds timeout) {
    return timeout.count() == 0 ? timeout : timeout + kReplyGrace;
  }

  // Throws the error for a failed call; `what` says what the call was doing.
  [[noreturn]] void fail(const grpc::Status& status, std::string_view what, milliseconds timeout) const {
    switch (status.error_code()) {
      case grpc::StatusCode::UNAUTHENTICATED:
        DISTGRAD_FAIL("the store at ", address,
                      " refused the job token (check DISTGRAD_TOKEN): ", status.error_message());
      case grpc::StatusCode::UNAVAILABLE:
        DISTGRAD_FAIL("the store at ", address, " is unreachable (", status.error_message(), ") while ", what);
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        DISTGRAD_FAIL("timed out after ", timeout.count(), " ms at the store at ", address, " ", what);
      default:
        DISTGRAD_FAIL("the store at ", address, " failed ", what, ": ",
                      absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())), ": ",
                      status.error_message());
    }
  }
};

namespace {

milliseconds checked_timeout(milliseconds timeout, std::string_view operation) {
  DISTGRAD_CHECK(timeout.count() >= 0, "StoreClient::", operation, ": the timeout must not be negative, got ",
                 timeout.count(), " ms");
  return timeout;
}

}  // namespace

StoreClient::StoreClient(std::string address, std::string token, milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->address = std::move(address);
  impl_->token = std::move(token);
  impl_->timeout = checked_timeout(timeout, "StoreClient");
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  arguments.SetMaxSendMessageSize(-1);
  // Retry connecting quickly while the store is not up yet (gRPC's default backoff grows to
  // two minutes).
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  transport_credentials().configure(arguments);
  impl_->channel = grpc::CreateCustomChannel(impl_->address, transport_credentials().channel, arguments);
  impl_->stub = wire::Store::NewStub(impl_->channel);
}

StoreClient::~StoreClient() = default;
StoreClient::StoreClient(StoreClient&&) noexcept = default;
StoreClient& StoreClient::operator=(StoreClient&&) noexcept = default;

const std::string& StoreClient::address() const { return impl_->address; }

milliseconds StoreClient::timeout() const { return impl_->timeout; }

void StoreClient::set(const std::string& key, const std::string& value) {
  wire::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  wire::SetResponse response;
  grpc::Status status = impl_->stub->Set(impl_->context(impl_->timeout).get(), request, &response);
  if (!status.ok()) impl_->fail(status, "setting key " + quoted_excerpt(key), impl_->timeout);
}

std::string StoreClient::get(const std::string& key) { return get(key, impl_->timeout); }

std::string StoreClient::get(const std::string& key, milliseconds timeout) {
  checked_timeout(timeout, "get");
  wire::GetRequest request;
  request.set_key(key);
  request.set_timeout_ms(Impl::wait_ms(timeout));
  wire::GetResponse response;
  grpc::Status status = impl_->stub->Get(impl_->context(Impl::wait_call_timeout(timeout)).get(), request, &response);
  if (!status.ok()) impl_->fail(status, "waiting for key " + quoted_excerpt(key), timeout);
  return std::move(*response.mutable_value());
}

void StoreClient::wait(const std::vector<std::string>& keys) { wait(keys, impl_->timeout); }

void StoreClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::vector<std::string> missing = wait_for(keys, timeout);
  DISTGRAD_CHECK(missing.empty(), "timed out after ", timeout.count(), " ms at the store at ", impl_->address,
                 " waiting for ", describe_keys(missing), " (", missing.size(), " of ", keys.size(), " missing)");
}

std::vector<std::string> StoreClient::wait_for(const std::vector<std::string>& keys, milliseconds timeout) {
  checked_timeout(timeout, "wait");
  if (keys.empty()) return {};
  wire::WaitRequest request;
  for (const std::string& key : keys) request.add_keys(key);
  request.set_timeout_ms(Impl::wait_ms(timeout));
  wire::WaitResponse response;
  grpc::Status status = impl_->stub->Wait(impl_->context(Impl::wait_call_timeout(timeout)).get(), request, &response);
  // A call cut off by its own deadline cannot tell which keys arrived: all count as missing.
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return keys;
  if (!status.ok()) impl_->fail(status, "waiting for " + describe_keys(keys), timeout);
  return {response.missing().begin(), response.missing().end()};
}

int64_t StoreClient::add(const std::string& key, int64_t amount) {
  wire::AddRequest request;
  request.set_key(key);
  request.set_amount(amount);
  wire::AddResponse response;
  grpc::Status status = impl_->stub->Add(impl_->context(impl_->timeout).get(), request, &response);
  if (!status.ok())
    impl_->fail(status, detail::str_cat("adding ", amount, " to key ", quoted_excerpt(key)), impl_->timeout);
  return response.value();
}

std::string StoreClient::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  wire::CompareSetRequest request;
  request.set_key(key);
  request.set_expected_value(expected);
  request.set_desired_value(desired);
  wire::CompareSetResponse response;
  grpc::Status status = impl_->stub->CompareSet(impl_->context(impl_->timeout).get(), request, &response);
  if (!status.ok()) impl_->fail(status, "comparing and setting key " + quoted_excerpt(key), impl_->timeout);
  return std::move(*response.mutable_value());
}

bool StoreClient::delete_key(const std::string& key) {
  wire::DeleteRequest request;
  request.set_key(key);
  wire::DeleteResponse response;
  grpc::Status status = impl_->stub->Delete(impl_->context(impl_->timeout).get(), request, &response);
  if (!status.ok()) impl_->fail(status, "deleting key " + quoted_excerpt(key), impl_->timeout);
  return response.deleted();
}

int64_t StoreClient::num_keys() {
  wire::NumKeysResponse response;
  grpc::Status status = impl_->stub->NumKeys(impl_->context(impl_->timeout).get(), {}, &response);
  if (!status.ok()) impl_->fail(status, "counting keys", impl_->timeout);
  return response.num_keys();
}

void StoreClient::wait_until_reachable(milliseconds timeout) {
  checked_timeout(timeout, "wait_until_reachable");
  std::unique_ptr<grpc::ClientContext> context = impl_->context(timeout);
  context->set_wait_for_ready(true);  // gRPC keeps reconnecting until the deadline
  wire::NumKeysResponse response;
  grpc::Status status = impl_->stub->NumKeys(context.get(), {}, &response);
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    DISTGRAD_FAIL("the store at ", impl_->address, " is unreachable: no answer within ", timeout.count(), " ms");
  }
  if (!status.ok()) impl_->fail(status, "waiting for it to be reachable", timeout);
}

}  // namespace distgrad::rendezvous
