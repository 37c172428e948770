#include "rendezvous/store.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
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
#include "rendezvous/world.h"

namespace distgrad::rendezvous {
namespace {

namespace wire = ::distgrad::rendezvous::wire;
using std::chrono::milliseconds;
using SystemTime = std::chrono::system_clock::time_point;

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
//
// Note [Store token before the message]
// As the Worker service (Note [Token before the message] in rpc/call_server.h), the Store is
// served as generic callback calls (the wire is the same unary calls proto/store.proto
// declares): a call's reactor looks at the token in the client's metadata and finishes the call
// UNAUTHENTICATED before it starts reading, so a request with a wrong token costs the server
// nothing of its size. A request then runs on the gRPC thread that read it, holding data_mu_
// briefly. A Get or Wait whose keys are not all set becomes a Waiter, which nothing blocks on:
// the request that sets its last key answers it, the deadline thread answers it when its
// timeout passes, its cancellation (the client gone, its deadline passed) ends it, and shutdown
// answers every one with UNAVAILABLE.

class StoreCall;

// The methods of proto/store.proto, as callers name them.
enum class Method { kSet, kGet, kWait, kAdd, kCompareSet, kDelete, kNumKeys };
constexpr std::pair<std::string_view, Method> kMethods[] = {
    {"/distgrad.rendezvous.wire.Store/Set", Method::kSet},
    {"/distgrad.rendezvous.wire.Store/Get", Method::kGet},
    {"/distgrad.rendezvous.wire.Store/Wait", Method::kWait},
    {"/distgrad.rendezvous.wire.Store/Add", Method::kAdd},
    {"/distgrad.rendezvous.wire.Store/CompareSet", Method::kCompareSet},
    {"/distgrad.rendezvous.wire.Store/Delete", Method::kDelete},
    {"/distgrad.rendezvous.wire.Store/NumKeys", Method::kNumKeys},
};

std::optional<Method> find_method(std::string_view name) {
  for (const auto& [method_name, method] : kMethods) {
    if (method_name == name) return method;
  }
  return std::nullopt;
}

// How a call ends: a status, and the response when the status is OK. Built under data_mu_,
// delivered after it is released (finishing a call may run gRPC code).
struct Answer {
  StoreCall* call;
  grpc::Status status;
  grpc::ByteBuffer response;
};

Answer answer(StoreCall* call, const google::protobuf::Message& response) {
  Answer result{call, grpc::Status::OK, {}};
  bool own_buffer = false;
  result.status =
      grpc::SerializationTraits<google::protobuf::Message>::Serialize(response, &result.response, &own_buffer);
  return result;
}

// A Get or Wait waiting for keys.
struct Waiter {
  StoreCall* call = nullptr;
  Method method = Method::kWait;  // kGet or kWait
  std::vector<std::string> keys;  // as requested (a Get's one key)
  size_t missing = 0;             // entries of `keys` not set now
  int64_t timeout_ms = 0;
  absl::Time deadline = absl::InfiniteFuture();
};

class StoreService final : public grpc::CallbackGenericService {
 public:
  explicit StoreService(std::string token) : token_(std::move(token)), deadline_thread_([this] { expire_waiters(); }) {}
  ~StoreService() override { shut_down(); }

  // Answers every waiter with UNAVAILABLE; from now on requests fail with UNAVAILABLE. Idempotent.
  void shut_down();

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override;

  // See Note [Store token before the message].
  const std::string& token() const { return token_; }
  // Runs a request whose message has arrived; the call is answered now or, for a Get or Wait
  // that waits, later.
  void handle(StoreCall& call, Method method, grpc::ByteBuffer& request);
  // The call was cancelled: ends its wait, if it waits.
  void cancel(StoreCall& call);
  size_t num_waiting() {
    absl::MutexLock lock(&data_mu_);
    return waiters_.size();
  }

 private:
  static grpc::Status shutting_down_status() { return {grpc::StatusCode::UNAVAILABLE, "the store is shutting down"}; }

  // The answer to `request` of `method`; a Get or Wait that must wait returns no answer.
  std::optional<Answer> run(StoreCall& call, Method method, grpc::ByteBuffer& request, std::vector<Answer>& woken)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_);
  // Stores `value` at `key`; the waiters it completes are answered through `woken`.
  void set_key(const std::string& key, std::string value, std::vector<Answer>& woken)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_);
  // Starts waiting for `keys` unless they are all set; returns the answer when it need not wait.
  std::optional<Answer> wait_for_keys(StoreCall& call, Method method, std::vector<std::string> keys, int64_t timeout_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_);
  // Takes the waiter of `call` out of waiters_ and waiting_on_; null when it does not wait.
  std::unique_ptr<Waiter> take_waiter(StoreCall* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_);
  // A waiter's answer: its value or missing keys, or DEADLINE_EXCEEDED for a Get still missing.
  Answer answer_waiter(const Waiter& waiter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_);
  // The deadline thread: answers each waiter whose timeout has passed.
  void expire_waiters();

  const std::string token_;
  absl::Mutex data_mu_;
  absl::CondVar waiters_changed_;  // wakes the deadline thread: a new waiter, or shutdown
  absl::flat_hash_map<std::string, std::string> data_ ABSL_GUARDED_BY(data_mu_);
  absl::flat_hash_map<StoreCall*, std::unique_ptr<Waiter>> waiters_ ABSL_GUARDED_BY(data_mu_);
  // Each key not set now -> the waiters missing it (a waiter once per time it names the key).
  absl::flat_hash_map<std::string, std::vector<Waiter*>> waiting_on_ ABSL_GUARDED_BY(data_mu_);
  bool shutting_down_ ABSL_GUARDED_BY(data_mu_) = false;
  std::thread deadline_thread_;  // last: started once the fields above exist
};

// One call of the Store service: checked, read, handed to the service, answered once.
class StoreCall final : public grpc::ServerGenericBidiReactor {
 public:
  StoreCall(StoreService& service, const grpc::GenericCallbackServerContext& context) : service_(service) {
    const std::optional<Method> method = find_method(context.method());
    if (!method) {
      Finish({grpc::StatusCode::UNIMPLEMENTED, "the store has no method " + quoted_excerpt(context.method())});
      return;
    }
    method_ = *method;
    switch (check_job_token(context, service_.token())) {
      case TokenCheck::kMissing:
        Finish({grpc::StatusCode::UNAUTHENTICATED, "the request carries no job token (metadata distgrad-token)"});
        return;
      case TokenCheck::kWrong:
        Finish({grpc::StatusCode::UNAUTHENTICATED, "the request carries a wrong job token"});
        return;
      case TokenCheck::kAccepted: StartRead(&request_);
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish({grpc::StatusCode::INVALID_ARGUMENT, "the call ended before its request arrived"});
      return;
    }
    service_.handle(*this, method_, request_);
  }

  void OnCancel() override { service_.cancel(*this); }
  void OnDone() override { delete this; }

  // Ends the call with `status` and, when it is OK, `response`.
  void deliver(grpc::Status status, grpc::ByteBuffer response) {
    if (!status.ok()) {
      Finish(std::move(status));
      return;
    }
    response_ = std::move(response);
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }

  // Set by cancel() (under the service's data_mu_) so that a call cancelled before it starts
  // waiting does not wait.
  bool cancelled = false;

 private:
  StoreService& service_;
  Method method_ = Method::kSet;
  grpc::ByteBuffer request_, response_;
};

void deliver(std::vector<Answer>& answers) {
  for (Answer& answer : answers) answer.call->deliver(std::move(answer.status), std::move(answer.response));
  answers.clear();
}

grpc::ServerGenericBidiReactor* StoreService::CreateReactor(grpc::GenericCallbackServerContext* context) {
  return new StoreCall(*this, *context);
}

void StoreService::shut_down() {
  std::vector<Answer> answers;
  {
    absl::MutexLock lock(&data_mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    for (auto& [call, waiter] : waiters_) answers.push_back({call, shutting_down_status(), {}});
    waiters_.clear();
    waiting_on_.clear();
    waiters_changed_.SignalAll();
  }
  deliver(answers);
  deadline_thread_.join();
}

void StoreService::handle(StoreCall& call, Method method, grpc::ByteBuffer& request) {
  std::vector<Answer> answers;
  {
    absl::MutexLock lock(&data_mu_);
    if (shutting_down_) {
      answers.push_back({&call, shutting_down_status(), {}});
    } else if (std::optional<Answer> now = run(call, method, request, answers)) {
      answers.push_back(std::move(*now));
    }
  }
  deliver(answers);
}

void StoreService::cancel(StoreCall& call) {
  std::unique_ptr<Waiter> waiter;
  {
    absl::MutexLock lock(&data_mu_);
    call.cancelled = true;
    waiter = take_waiter(&call);
  }
  if (waiter) call.deliver(grpc::Status::CANCELLED, {});
}

template <typename Request>
bool parse(grpc::ByteBuffer& bytes, Request& request) {
  return grpc::SerializationTraits<google::protobuf::Message>::Deserialize(&bytes, &request).ok();
}

grpc::Status malformed(std::string_view method) {
  return {grpc::StatusCode::INVALID_ARGUMENT, detail::str_cat("the ", method, " request is not a valid message")};
}

std::optional<Answer> StoreService::run(StoreCall& call, Method method, grpc::ByteBuffer& bytes,
                                        std::vector<Answer>& woken) {
  switch (method) {
    case Method::kSet: {
      wire::SetRequest request;
      if (!parse(bytes, request)) return Answer{&call, malformed("Set"), {}};
      set_key(request.key(), std::move(*request.mutable_value()), woken);
      return answer(&call, wire::SetResponse());
    }
    case Method::kGet: {
      wire::GetRequest request;
      if (!parse(bytes, request)) return Answer{&call, malformed("Get"), {}};
      return wait_for_keys(call, Method::kGet, {request.key()}, request.timeout_ms());
    }
    case Method::kWait: {
      wire::WaitRequest request;
      if (!parse(bytes, request)) return Answer{&call, malformed("Wait"), {}};
      return wait_for_keys(call, Method::kWait, {request.keys().begin(), request.keys().end()}, request.timeout_ms());
    }
    case Method::kAdd: {
      wire::AddRequest request;
      if (!parse(bytes, request)) return Answer{&call, malformed("Add"), {}};
      int64_t current = 0;
      if (auto it = data_.find(request.key()); it != data_.end()) {
        std::optional<int64_t> parsed = parse_int64(it->second);
        if (!parsed) {
          return Answer{&call,
                        {grpc::StatusCode::FAILED_PRECONDITION,
                         detail::str_cat("the value at key ", quoted_excerpt(request.key()),
                                         " is not an integer: ", quoted_excerpt(it->second))},
                        {}};
        }
        current = *parsed;
      }
      int64_t sum = 0;
      if (__builtin_add_overflow(current, request.amount(), &sum)) {
        return Answer{&call,
                      {grpc::StatusCode::OUT_OF_RANGE,
                       detail::str_cat("adding ", request.amount(), " to key ", quoted_excerpt(request.key()), " (",
                                       current, ") overflows")},
                      {}};
      }
      set_key(request.key(), std::to_string(sum), woken);
      wire::AddResponse response;
      response.set_value(sum);
      return answer(&call, response);
    }
    case Method::kCompareSet: {
      wire::CompareSetRequest request;
      if (!parse(bytes, request)) return Answer{&call, malformed("CompareSet"), {}};
      wire::CompareSetResponse response;
      auto it = data_.find(request.key());
      if (it == data_.end() ? request.expected_value().empty() : it->second == request.expected_value()) {
        set_key(request.key(), request.desired_value(), woken);
        response.set_value(request.desired_value());
      } else if (it != data_.end()) {
        response.set_value(it->second);
      }  // else still absent: an empty value
      return answer(&call, response);
    }
    case Method::kDelete: {
      wire::DeleteRequest request;
      if (!parse(bytes, request)) return Answer{&call, malformed("Delete"), {}};
      wire::DeleteResponse response;
      response.set_deleted(data_.erase(request.key()) > 0);
      if (response.deleted()) {
        // Waiters that counted the key as set miss it again.
        for (auto& [waiting_call, waiter] : waiters_) {
          for (const std::string& key : waiter->keys) {
            if (key != request.key()) continue;
            ++waiter->missing;
            waiting_on_[key].push_back(waiter.get());
          }
        }
      }
      return answer(&call, response);
    }
    case Method::kNumKeys: {
      wire::NumKeysRequest request;
      if (!parse(bytes, request)) return Answer{&call, malformed("NumKeys"), {}};
      wire::NumKeysResponse response;
      response.set_num_keys(static_cast<int64_t>(data_.size()));
      return answer(&call, response);
    }
  }
  return Answer{&call, {grpc::StatusCode::INTERNAL, "unknown store method"}, {}};
}

void StoreService::set_key(const std::string& key, std::string value, std::vector<Answer>& woken) {
  data_.insert_or_assign(key, std::move(value));
  auto waiting = waiting_on_.find(key);
  if (waiting == waiting_on_.end()) return;
  std::vector<Waiter*> waiters = std::move(waiting->second);
  waiting_on_.erase(waiting);
  for (Waiter* waiter : waiters) {
    if (--waiter->missing > 0) continue;
    woken.push_back(answer_waiter(*waiter));
    waiters_.erase(waiter->call);  // `waiter` is gone; a waiter is listed once per key it misses
  }
}

std::optional<Answer> StoreService::wait_for_keys(StoreCall& call, Method method, std::vector<std::string> keys,
                                                  int64_t timeout_ms) {
  auto waiter = std::make_unique<Waiter>();
  waiter->call = &call;
  waiter->method = method;
  waiter->keys = std::move(keys);
  waiter->timeout_ms = timeout_ms;
  for (const std::string& key : waiter->keys) waiter->missing += data_.contains(key) ? 0 : 1;
  const absl::Time now = absl::Now();
  waiter->deadline =
      timeout_ms >= kUnboundedMs ? absl::InfiniteFuture() : now + absl::Milliseconds(std::max<int64_t>(timeout_ms, 0));
  if (waiter->missing == 0 || waiter->deadline <= now) return answer_waiter(*waiter);
  if (call.cancelled) return Answer{&call, grpc::Status::CANCELLED, {}};
  for (const std::string& key : waiter->keys) {
    if (!data_.contains(key)) waiting_on_[key].push_back(waiter.get());
  }
  waiters_.emplace(&call, std::move(waiter));
  waiters_changed_.Signal();
  return std::nullopt;
}

std::unique_ptr<Waiter> StoreService::take_waiter(StoreCall* call) {
  auto it = waiters_.find(call);
  if (it == waiters_.end()) return nullptr;
  std::unique_ptr<Waiter> waiter = std::move(it->second);
  waiters_.erase(it);
  for (const std::string& key : waiter->keys) {
    auto waiting = waiting_on_.find(key);
    if (waiting == waiting_on_.end()) continue;
    std::erase(waiting->second, waiter.get());
    if (waiting->second.empty()) waiting_on_.erase(waiting);
  }
  return waiter;
}

Answer StoreService::answer_waiter(const Waiter& waiter) {
  if (waiter.method == Method::kGet) {
    const std::string& key = waiter.keys.front();
    auto it = data_.find(key);
    if (it == data_.end()) {
      return {waiter.call,
              {grpc::StatusCode::DEADLINE_EXCEEDED,
               detail::str_cat("key ", quoted_excerpt(key), " was not set within ", waiter.timeout_ms, " ms")},
              {}};
    }
    wire::GetResponse response;
    response.set_value(it->second);
    return answer(waiter.call, response);
  }
  wire::WaitResponse response;
  for (const std::string& key : waiter.keys) {
    if (!data_.contains(key)) response.add_missing(key);
  }
  return answer(waiter.call, response);
}

void StoreService::expire_waiters() {
  while (true) {
    std::vector<Answer> expired;
    {
      absl::MutexLock lock(&data_mu_);
      while (expired.empty()) {
        if (shutting_down_) return;  // shut_down() answers the waiters
        absl::Time next = absl::InfiniteFuture();
        const absl::Time now = absl::Now();
        std::vector<StoreCall*> due;
        for (const auto& [call, waiter] : waiters_) {
          if (waiter->deadline <= now) {
            due.push_back(call);
          } else {
            next = std::min(next, waiter->deadline);
          }
        }
        for (StoreCall* call : due) expired.push_back(answer_waiter(*take_waiter(call)));
        if (expired.empty()) waiters_changed_.WaitWithDeadline(&data_mu_, next);
      }
    }
    deliver(expired);
  }
}

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
  builder.SetMaxReceiveMessageSize(
      grpc_message_limit(getenv_bytes(kMaxMessageBytesVariable, "StoreServer").value_or(0)));
  builder.SetMaxSendMessageSize(-1);
  // gRPC sets SO_REUSEPORT by default: a second store could then bind a port already in use.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterCallbackGenericService(&impl_->service);
  impl_->server = builder.BuildAndStart();
  DISTGRAD_CHECK(impl_->server != nullptr && impl_->port != 0, "StoreServer: cannot listen on ", requested,
                 " (the port is in use, or the host is not an address of this machine)");
}

StoreServer::~StoreServer() { shutdown(); }

int StoreServer::port() const { return impl_->port; }

size_t StoreServer::num_waiting() const { return impl_->service.num_waiting(); }

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
      case grpc::StatusCode::RESOURCE_EXHAUSTED:
        DISTGRAD_FAIL("the store at ", address, " refused a request larger than it accepts (", kMaxMessageBytesVariable,
                      " where it runs) while ", what, ": ", status.error_message());
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
