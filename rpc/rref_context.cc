#include "rpc/rref_context.h"

#include <cstdio>
#include <utility>

#include "rpc/rpc.h"

namespace distgrad::rpc::detail {
namespace {

// The builtin calls of the protocol (Note [RRef lifetime] in rpc/rref.h).
constexpr char kCreate[] = "__distgrad.rref.create";
constexpr char kFetch[] = "__distgrad.rref.fetch";
constexpr char kCall[] = "__distgrad.rref.call";
constexpr char kAddFork[] = "__distgrad.rref.add_fork";
constexpr char kDelete[] = "__distgrad.rref.delete";

std::mutex current_mutex;  // guards current_context
std::shared_ptr<RRefContext> current_context;

std::shared_ptr<RRefContext> running_context(const char* what) {
  std::shared_ptr<RRefContext> context = RRefContext::current();
  if (context == nullptr) throw StatusError(StatusCode::kUnavailable, std::string(what) + ": RPC is not running");
  return context;
}

// A builtin call: its own arguments `prefix` (no tensors), then the user's `arguments`.
template <typename... Prefix>
OutgoingCall builtin_call(const char* builtin, int to, Encoded arguments, uint32_t num_arguments,
                          const Prefix&... prefix) {
  Encoder out(CallTarget{to, false});
  (Codec<Prefix>::encode(out, prefix), ...);
  Encoded call = out.finish();
  call.payload += arguments.payload;
  call.tensors = std::move(arguments.tensors);
  call.attachments = std::move(arguments.attachments);
  return OutgoingCall{builtin, static_cast<uint32_t>(sizeof...(Prefix) + num_arguments), std::move(call)};
}

// A builtin's own arguments, and the user's after them.
template <typename... Prefix>
std::pair<std::tuple<Prefix...>, CallArguments> split_arguments(const char* builtin, const CallArguments& arguments) {
  if (arguments.count < sizeof...(Prefix)) {
    throw StatusError(StatusCode::kInvalidArgument, std::string(builtin) + ": expected at least " +
                                                        std::to_string(sizeof...(Prefix)) + " arguments, found " +
                                                        std::to_string(arguments.count));
  }
  Decoder in(arguments.payload, arguments.tensors);
  auto prefix = decode_arguments<Prefix...>(builtin, in, std::index_sequence_for<Prefix...>{});
  const size_t used = arguments.payload.size() - in.remaining();
  return {std::move(prefix),
          CallArguments{arguments.payload.substr(used), arguments.tensors,
                        static_cast<uint32_t>(arguments.count - sizeof...(Prefix)), arguments.reply_to}};
}

// Only the builtin's own arguments.
template <typename... Prefix>
std::tuple<Prefix...> builtin_arguments(const char* builtin, const CallArguments& arguments) {
  return invoke_decoded<Prefix...>(builtin, arguments, [](Prefix... values) { return std::tuple(values...); });
}

std::chrono::milliseconds to_timeout(int64_t milliseconds) { return std::chrono::milliseconds(milliseconds); }

// The object of `value`, checked to be a `class_name`.
void* object_of(const OwnedValue& value, const std::string& class_name, const RRefId& id, const std::string& method) {
  if (value.type_name != class_name) {
    throw StatusError(StatusCode::kInvalidArgument,
                      method + ": RRef " + id.str() + " holds a " + value.type_name + ", not a " + class_name);
  }
  return value.object.get();
}

const ClassRegistry::Method& registered_method(const std::string& name, int rank) {
  const ClassRegistry::Method* method = ClassRegistry::instance().find_method(name);
  if (method == nullptr) {
    throw StatusError(StatusCode::kNotFound, "no method named '" + name + "' is registered on " +
                                                 get_worker_name(rank) + " (DISTGRAD_REMOTE_METHOD)");
  }
  return *method;
}

// kCreate: makes the value, keeps it (or the error), and acknowledges.
Encoded serve_create(const CallArguments& arguments) {
  auto context = running_context(kCreate);
  auto [prefix, rest] = split_arguments<RRefId, uint8_t, std::string, RRefId, int64_t>(kCreate, arguments);
  const auto& [id, producer, name, target, timeout_ms] = prefix;
  try {
    OwnedValue value;
    switch (static_cast<Producer>(producer)) {
      case Producer::kFunction: {
        const ValueMaker* make = FunctionRegistry::instance().find_value_maker(name);
        if (make == nullptr) {
          throw StatusError(StatusCode::kNotFound, "no function named '" + name + "' that returns a value is " +
                                                       "registered on " + context->name(context->rank()));
        }
        value = (*make)(rest);
        break;
      }
      case Producer::kConstructor: {
        const ValueMaker* construct = ClassRegistry::instance().find_constructor(name);
        if (construct == nullptr) {
          throw StatusError(StatusCode::kNotFound, "no class named '" + name + "' is registered on " +
                                                       context->name(context->rank()) + " (DISTGRAD_REMOTE_CLASS)");
        }
        value = (*construct)(rest);
        break;
      }
      case Producer::kMethod: {
        const ClassRegistry::Method& method = registered_method(name, context->rank());
        if (!method.make_value) {
          throw StatusError(StatusCode::kInvalidArgument, name + " returns void: there is no value to refer to");
        }
        const OwnedValue object = context->wait_for_value(target, to_timeout(timeout_ms));
        value = method.make_value(object_of(object, method.class_name, target, name), rest);
        break;
      }
      default:
        throw StatusError(StatusCode::kInvalidArgument,
                          std::string(kCreate) + ": unknown producer " + std::to_string(producer));
    }
    context->set_value(id, name, std::move(value));
  } catch (const StatusError& error) {
    context->set_error(id, name, error.code(), error.what());
  } catch (const std::exception& error) {
    context->set_error(id, name, StatusCode::kUnknown, error.what());
  } catch (...) {
    context->set_error(id, name, StatusCode::kUnknown, "an exception that is not a std::exception");
  }
  return {};
}

// kFetch: a copy of the value, for to_here.
Encoded serve_fetch(const CallArguments& arguments) {
  auto context = running_context(kFetch);
  const auto [id, timeout_ms] = builtin_arguments<RRefId, int64_t>(kFetch, arguments);
  const OwnedValue value = context->wait_for_value(id, to_timeout(timeout_ms));
  if (value.encode == nullptr) {
    throw StatusError(StatusCode::kFailedPrecondition,
                      "to_here: RRef " + id.str() + " holds a " + value.type_name + ", which has no codec");
  }
  return value.encode(value.object.get(), arguments.reply_to);
}

// kCall: a method of the value.
Encoded serve_call(const CallArguments& arguments) {
  auto context = running_context(kCall);
  auto [prefix, rest] = split_arguments<RRefId, std::string, int64_t>(kCall, arguments);
  const auto& [id, name, timeout_ms] = prefix;
  const ClassRegistry::Method& method = registered_method(name, context->rank());
  const OwnedValue object = context->wait_for_value(id, to_timeout(timeout_ms));
  return method.handler(object_of(object, method.class_name, id, name), rest);
}

Encoded serve_add_fork(const CallArguments& arguments) {
  const auto [id, fork, holder] = builtin_arguments<RRefId, ForkId, int32_t>(kAddFork, arguments);
  running_context(kAddFork)->add_fork(id, fork, holder);
  return {};
}

Encoded serve_delete(const CallArguments& arguments) {
  const auto [id, fork, creation_failed] = builtin_arguments<RRefId, ForkId, bool>(kDelete, arguments);
  running_context(kDelete)->remove_fork(id, fork, creation_failed);
  return {};
}

bool register_builtin(const char* name, Encoded (*serve)(const CallArguments&)) {
  FunctionRegistry::instance().add(name, reinterpret_cast<FunctionAddress>(serve), serve, nullptr);
  return true;
}
[[maybe_unused]] const bool kRegistered =
    register_builtin(kCreate, serve_create) && register_builtin(kFetch, serve_fetch) &&
    register_builtin(kCall, serve_call) && register_builtin(kAddFork, serve_add_fork) &&
    register_builtin(kDelete, serve_delete);

// An RRef sent to its owner in a request: its sender's state lives until the reply.
class KeepAlive final : public CallAttachment {
 public:
  explicit KeepAlive(std::shared_ptr<RRefState> state) : state_(std::move(state)) {}
  void call_failed() override {}

 private:
  std::shared_ptr<RRefState> state_;
};

// A fork registered for the receiver of a request: released when the request fails.
class SentFork final : public CallAttachment {
 public:
  SentFork(std::shared_ptr<RRefContext> context, RRefId id, ForkId fork, int owner)
      : context_(std::move(context)), id_(id), fork_(fork), owner_(owner) {}
  void call_failed() override { context_->release(id_, fork_, owner_, Future<void>::ready(std::monostate{})); }

 private:
  std::shared_ptr<RRefContext> context_;
  RRefId id_;
  ForkId fork_;
  int owner_;
};

// Rethrows the error of a call made for `what` as the error of `what`.
[[noreturn]] void rethrow_as(const std::exception_ptr& error, const std::string& what) {
  try {
    std::rethrow_exception(error);
  } catch (const RemoteError& remote) {
    throw RemoteError(remote.code(), remote.worker(), what, remote.remote_message());
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The context.

RRefContext::RRefContext(Setup setup) : setup_(std::move(setup)), next_id_(setup_.first_id) {
  holder_checks_ = std::thread([this] { check_holders(); });
}

RRefContext::~RRefContext() { close(); }

std::shared_ptr<RRefContext> RRefContext::current() {
  std::lock_guard<std::mutex> lock(current_mutex);
  return current_context;
}

void RRefContext::install(std::shared_ptr<RRefContext> context) {
  std::lock_guard<std::mutex> lock(current_mutex);
  current_context = std::move(context);
}

void RRefContext::close() {
  std::vector<Entry> values;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (closed_) return;
    closed_ = true;
    changed_.notify_all();
    changed_.wait(lock, [this] { return sends_under_way_ == 0; });
    for (auto& [id, entry] : entries_) values.push_back(std::move(entry));
    entries_.clear();
  }
  if (holder_checks_.joinable()) holder_checks_.join();
  finished(std::move(values));
}

GloballyUniqueId RRefContext::new_id() { return {setup_.rank, next_id_++}; }

RRefContext::Entry& RRefContext::entry_for(const RRefId& id) {
  auto [it, added] = entries_.try_emplace(id);
  if (added) it->second.forks.emplace(id, id.created_on);  // the creator's fork
  return it->second;
}

std::optional<RRefContext::Entry> RRefContext::erase_if_unheld(const RRefId& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.forks.empty()) return std::nullopt;
  Entry entry = std::move(it->second);
  entries_.erase(it);
  return entry;
}

void RRefContext::finished(std::vector<Entry> entries) {
  for (const Entry& entry : entries) {
    if (entry.created && entry.error_code != StatusCode::kOk && !entry.error_seen) {
      std::fprintf(stderr, "[%s] rpc: the call of %s that made an RRef's value failed, and nobody fetched it: %s\n",
                   name(rank()).c_str(), entry.producer.c_str(), entry.error.c_str());
    }
  }
  entries.clear();  // the values' destructors may release RRefs of their own: outside the lock
}

void RRefContext::add_fork(const RRefId& id, const ForkId& fork, int holder) {
  std::lock_guard<std::mutex> lock(mutex_);
  entry_for(id).forks.emplace(fork, holder);
}

void RRefContext::remove_fork(const RRefId& id, const ForkId& fork, bool creation_failed) {
  std::optional<Entry> unheld;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      if (creation_failed) cancelled_.insert(id);
      return;
    }
    it->second.forks.erase(fork);
    unheld = erase_if_unheld(id);
  }
  if (unheld) finished({std::move(*unheld)});
}

void RRefContext::set_value(const RRefId& id, const std::string& producer, OwnedValue value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!cancelled_.erase(id) && !closed_) {
      Entry& entry = entry_for(id);
      entry.created = true;
      entry.producer = producer;
      entry.value = std::move(value);
      changed_.notify_all();
      return;
    }
  }
  // The creator gave up before this arrived: `value` is destroyed here, outside the lock.
}

void RRefContext::set_error(const RRefId& id, const std::string& producer, StatusCode code,
                            const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cancelled_.erase(id) || closed_) return;
  Entry& entry = entry_for(id);
  entry.created = true;
  entry.producer = producer;
  entry.error_code = code == StatusCode::kOk ? StatusCode::kUnknown : code;
  entry.error = message;
  changed_.notify_all();
}

OwnedValue RRefContext::wait_for_value(const RRefId& id, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto made = [&] {
    auto it = entries_.find(id);
    return closed_ || (it != entries_.end() && it->second.created);
  };
  if (!made()) {
    BlockingScope blocking;
    if (timeout.count() > 0) {
      changed_.wait_for(lock, timeout, made);
    } else {
      changed_.wait(lock, made);
    }
  }
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.created) {
    throw StatusError(StatusCode::kNotFound, "RRef " + id.str() + " has no value on " + name(rank()) +
                                                 " (its creation did not arrive within " +
                                                 std::to_string(timeout.count()) +
                                                 " ms, or every RRef to it was deleted)");
  }
  Entry& entry = it->second;
  if (entry.error_code != StatusCode::kOk) {
    entry.error_seen = true;
    throw StatusError(entry.error_code, "the call of " + entry.producer + " on " + name(rank()) + " that made RRef " +
                                            id.str() + "'s value failed: " + entry.error);
  }
  return *entry.value;
}

Future<Encoded> RRefContext::send(int to, OutgoingCall call, std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) {
      Promise<Encoded> failed;
      failed.set_error(std::make_exception_ptr(
          RemoteError(StatusCode::kUnavailable, name(to), call.function, "RPC was shut down on " + name(rank()))));
      return failed.future();
    }
    ++sends_under_way_;
  }
  Future<Encoded> reply;
  try {
    reply = send_async(to, std::move(call), timeout);
  } catch (...) {
    Promise<Encoded> failed;
    failed.set_error(std::current_exception());
    reply = failed.future();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--sends_under_way_ == 0) changed_.notify_all();
  }
  return reply;
}

ForkId RRefContext::fork_for(const RRefState& rref, int holder) {
  const ForkId fork = new_id();
  if (rref.owner() == rank()) {
    add_fork(rref.id(), fork, holder);
    return fork;
  }
  const Future<Encoded> reply =
      send(rref.owner(), builtin_call(kAddFork, rref.owner(), {}, 0, rref.id(), fork, holder), default_timeout());
  if (reply.error() != nullptr) {
    try {
      std::rethrow_exception(reply.error());
    } catch (const std::exception& error) {
      DISTGRAD_FAIL("rpc: RRef ", rref.id().str(), " could not be passed to ", name(holder), ": its owner ",
                    name(rref.owner()), " did not register the new fork: ", error.what());
    }
  }
  return fork;
}

void RRefContext::send_delete(const RRefId& id, const ForkId& fork, int owner, bool creation_failed) {
  // Nobody waits for the answer; an owner that is gone has nothing left to free.
  send(owner, builtin_call(kDelete, owner, {}, 0, id, fork, creation_failed), default_timeout());
}

void RRefContext::release(const RRefId& id, const ForkId& fork, int owner, const Future<void>& creation) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
  }
  auto release_now = [this, id, fork, owner](bool creation_failed) {
    if (owner == rank()) {
      remove_fork(id, fork, creation_failed);
    } else {
      send_delete(id, fork, owner, creation_failed);
    }
  };
  if (fork != id) return release_now(false);
  // The creator's fork: once the owner acknowledged (or failed) the creation.
  creation.then(
      [context = shared_from_this(), release_now](const Future<void>& done) { release_now(done.error() != nullptr); });
}

void RRefContext::check_holders() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!closed_) {
    changed_.wait_for(lock, setup_.holder_check_interval, [this] { return closed_; });
    if (closed_) return;
    std::set<int> holders;
    for (const auto& [id, entry] : entries_) {
      for (const auto& [fork, holder] : entry.forks) {
        if (holder != rank()) holders.insert(holder);
      }
    }
    lock.unlock();
    std::set<int> exited;
    for (int holder : holders) {
      if (setup_.exited(holder)) exited.insert(holder);
    }
    lock.lock();
    if (!exited.empty()) release_forks_of(exited, "exited", lock);
  }
}

void RRefContext::forget_holder(int rank) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!closed_) release_forks_of({rank}, "rejoined", lock);
}

void RRefContext::release_forks_of(const std::set<int>& holders, const char* why, std::unique_lock<std::mutex>& lock) {
  std::vector<Entry> unheld;
  size_t released = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    for (auto fork = it->second.forks.begin(); fork != it->second.forks.end();) {
      if (holders.count(fork->second)) {
        fork = it->second.forks.erase(fork);
        ++released;
      } else {
        ++fork;
      }
    }
    if (it->second.forks.empty()) {
      unheld.push_back(std::move(it->second));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  if (released == 0) return;
  std::string names;
  for (int holder : holders) names += (names.empty() ? "" : ", ") + name(holder);
  std::fprintf(stderr, "[%s] rpc: %s %s holding %zu RRefs to values of %s; released them (%zu values freed)\n",
               name(rank()).c_str(), names.c_str(), why, released, name(rank()).c_str(), unheld.size());
  lock.unlock();
  finished(std::move(unheld));
  lock.lock();
}

RRefDebugInfo RRefContext::debug_info() {
  std::lock_guard<std::mutex> lock(mutex_);
  RRefDebugInfo info;
  info.num_owned_values = entries_.size();
  for (const auto& [id, entry] : entries_) info.num_forks += entry.forks.size();
  info.num_user_rrefs = static_cast<size_t>(num_user_rrefs_.load());
  return info;
}

// ---------------------------------------------------------------------------------------------
// RRefState and the functions of rpc/rref.h.

RRefState::RRefState(std::shared_ptr<RRefContext> context, RRefId id, ForkId fork, int owner, std::string type_name,
                     Future<void> created)
    : context_(std::move(context)),
      id_(id),
      fork_(fork),
      owner_(owner),
      type_name_(std::move(type_name)),
      created_(std::move(created)) {
  if (!is_owner()) context_->count_user_rref(+1);
}

RRefState::~RRefState() {
  if (!is_owner()) context_->count_user_rref(-1);
  context_->release(id_, fork_, owner_, created_);
}

bool RRefState::is_owner() const { return owner_ == context_->rank(); }

void* RRefState::local_object(const char* what) {
  if (!is_owner()) {
    DISTGRAD_FAIL("RRef::", what, ": RRef ", id_.str(), " is owned by ", context_->name(owner_), ", not by ",
                  context_->name(context_->rank()), " (use to_here() or the RRef's methods)");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (local_object_ == nullptr) {
    try {
      local_object_ = context_->wait_for_value(id_, default_timeout()).object;
    } catch (const StatusError& error) {
      DISTGRAD_FAIL("RRef::", what, ": ", error.what());
    }
  }
  return local_object_.get();
}

Future<Encoded> RRefState::send_in_order(OutgoingCall call, std::chrono::milliseconds timeout) {
  auto shared_call = std::make_shared<OutgoingCall>(std::move(call));
  Promise<Encoded> answered;
  Future<Encoded> result = answered.future();
  Future<void> previous;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    previous = last_call_;
    last_call_ = result.then([](const Future<Encoded>&) {});
  }
  auto send = [context = context_, owner = owner_, shared_call, timeout, answered]() mutable {
    context->send(owner, std::move(*shared_call), timeout).then([answered](const Future<Encoded>& reply) mutable {
      if (reply.error() != nullptr) {
        answered.set_error(reply.error());
      } else {
        answered.set_value(reply.get());
      }
    });
  };
  if (!previous.valid()) {
    send();
  } else {
    previous.then([send](const Future<void>&) mutable { send(); });
  }
  return result;
}

std::shared_ptr<RRefState> create_remote(int owner, Producer producer, const std::string& name,
                                         const std::shared_ptr<RRefState>& target, std::string type_name,
                                         Encoded arguments, uint32_t num_arguments) {
  std::shared_ptr<RRefContext> context = RRefContext::current();
  DISTGRAD_CHECK(context != nullptr, "rpc::remote: RPC is not running in this process; call init_rpc() first");
  const RRefId id = context->new_id();
  const std::chrono::milliseconds timeout = default_timeout();
  OutgoingCall call =
      builtin_call(kCreate, owner, std::move(arguments), num_arguments, id, static_cast<uint8_t>(producer), name,
                   target ? target->id() : RRefId{}, static_cast<int64_t>(timeout.count()));
  Future<Encoded> acknowledged = target != nullptr ? target->send_in_order(std::move(call), timeout)
                                                   : context->send(owner, std::move(call), timeout);
  Future<void> created = acknowledged.then([name](const Future<Encoded>& done) {
    if (done.error() != nullptr) rethrow_as(done.error(), name);
  });
  return std::make_shared<RRefState>(context, id, id, owner, std::move(type_name), std::move(created));
}

std::shared_ptr<RRefState> own_here(OwnedValue value, const char* what) {
  std::shared_ptr<RRefContext> context = RRefContext::current();
  DISTGRAD_CHECK(context != nullptr, "rpc::", what, ": RPC is not running in this process; call init_rpc() first");
  const RRefId id = context->new_id();
  std::string type_name = value.type_name;
  context->set_value(id, what, std::move(value));
  return std::make_shared<RRefState>(context, id, id, context->rank(), std::move(type_name),
                                     Future<void>::ready(std::monostate{}));
}

Encoded fetch(const std::shared_ptr<RRefState>& rref, std::chrono::milliseconds timeout) {
  if (rref->created().is_ready() && rref->created().error() != nullptr) std::rethrow_exception(rref->created().error());
  std::shared_ptr<RRefContext> context = RRefContext::current();
  DISTGRAD_CHECK(context != nullptr, "RRef::to_here: RPC is not running in this process");
  const Future<Encoded> reply = context->send(
      rref->owner(), builtin_call(kFetch, rref->owner(), {}, 0, rref->id(), int64_t{timeout.count()}), timeout);
  if (reply.error() != nullptr) rethrow_as(reply.error(), "to_here");
  return reply.get();
}

Future<Encoded> call_method(const std::shared_ptr<RRefState>& rref, const std::string& method, Encoded arguments,
                            uint32_t num_arguments, std::chrono::milliseconds timeout) {
  return rref
      ->send_in_order(builtin_call(kCall, rref->owner(), std::move(arguments), num_arguments, rref->id(), method,
                                   int64_t{timeout.count()}),
                      timeout)
      .then([rref, method](const Future<Encoded>& reply) {
        if (reply.error() != nullptr) rethrow_as(reply.error(), method);
        return reply.get();
      });
}

void check_valid(const std::shared_ptr<RRefState>& rref, const char* what) {
  DISTGRAD_CHECK(rref != nullptr, "RRef::", what, ": the RRef refers to nothing (default-constructed)");
}

void encode_rref(Encoder& out, const std::shared_ptr<RRefState>& rref) {
  check_valid(rref, "encode");
  const CallTarget& to = out.target();
  DISTGRAD_CHECK(to.peer >= 0, "rpc: RRef ", rref->id().str(),
                 " can only travel in a call's arguments or result, not in other encoded values");
  std::shared_ptr<RRefContext> context = RRefContext::current();
  DISTGRAD_CHECK(context != nullptr, "rpc: an RRef can only be sent while RPC is running");
  ForkId fork;
  if (!to.is_reply && to.peer == rref->owner()) {
    out.attach(std::make_shared<KeepAlive>(rref));
  } else {
    fork = context->fork_for(*rref, to.peer);
    out.attach(std::make_shared<SentFork>(context, rref->id(), fork, rref->owner()));
  }
  out.put_tag(WireTag::kRRef);
  out.put_string(rref->type_name());
  Codec<int32_t>::encode(out, rref->owner());
  Codec<RRefId>::encode(out, rref->id());
  Codec<ForkId>::encode(out, fork);
}

std::shared_ptr<RRefState> decode_rref(Decoder& in, const std::string& type_name) {
  in.expect_tag(WireTag::kRRef, "RRef<" + type_name + ">");
  const std::string found(in.get_string());
  if (found != type_name) throw CodecError("expected RRef<" + type_name + ">, found RRef<" + found + ">");
  const int32_t owner = Codec<int32_t>::decode(in);
  const RRefId id = Codec<RRefId>::decode(in);
  ForkId fork = Codec<ForkId>::decode(in);
  std::shared_ptr<RRefContext> context = RRefContext::current();
  if (context == nullptr) throw CodecError("an RRef arrived while RPC is not running");
  if (owner < 0 || owner >= get_world_size() || !id.valid()) {
    throw CodecError("an RRef with owner " + std::to_string(owner) + " and id " + id.str() + " in a world of " +
                     std::to_string(get_world_size()));
  }
  if (!fork.valid()) {
    if (owner != context->rank()) {
      throw CodecError("an RRef without a fork reached " + context->name(context->rank()) + ", not its owner " +
                       context->name(owner));
    }
    fork = context->new_id();
    context->add_fork(id, fork, owner);
  }
  return std::make_shared<RRefState>(context, id, fork, owner, type_name, Future<void>::ready(std::monostate{}));
}

}  // namespace distgrad::rpc::detail

namespace distgrad::rpc {

RRefDebugInfo get_rref_debug_info() {
  std::shared_ptr<detail::RRefContext> context = detail::RRefContext::current();
  return context != nullptr ? context->debug_info() : RRefDebugInfo{};
}

}  // namespace distgrad::rpc
