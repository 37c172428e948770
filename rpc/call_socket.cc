#include "rpc/call_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>

#include "core/error.h"
#include "rendezvous/credentials.h"
#include "rendezvous/net_util.h"
#include "trace/trace.h"

namespace distgrad::rpc::call_socket {
namespace {

using Clock = std::chrono::steady_clock;

// What a message carries (MessageHeader::kind).
enum Kind : uint32_t { kHello = 1, kRequest = 2, kReply = 3 };

// Every message: this header, then `bytes` bytes (the token, a frame, or a status message).
struct MessageHeader {
  uint64_t id = 0;
  uint32_t kind = 0;
  uint32_t status = 0;  // grpc::StatusCode of a reply or a hello's answer
  uint64_t bytes = 0;
};

// Bodies are read in slices of at most this many bytes: a lying count allocates no more, and
// slices stay below the size glibc maps afresh for every allocation (32 MiB with
// RpcOptions::keep_freed_memory), so their pages are reused from call to call.
constexpr size_t kSliceBytes = size_t{16} << 20;
// How often a reader looks at its calls' deadlines while nothing arrives.
constexpr auto kDeadlineCheck = std::chrono::milliseconds(100);
// How long the reader thread keeps reading after the last call with a completion answered.
constexpr auto kLinger = std::chrono::milliseconds(2);
// The largest token message a connection may send.
constexpr uint64_t kMaxHelloBytes = 4096;
// How long the acceptor waits after an accept failed for want of descriptors or memory.
constexpr int kAcceptBackoffMs = 100;

std::string errno_text() { return std::strerror(errno); }

sockaddr_un abstract_address(const std::string& name, socklen_t* length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t size = std::min(name.size(), sizeof address.sun_path - 1);
  std::memcpy(address.sun_path + 1, name.data(), size);  // sun_path[0] == 0: the abstract namespace
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + size);
  return address;
}

// TCP_NODELAY (a call is one message: send it now), and keepalive probes that notice a peer host
// that went away within about 25 s (10 s idle, then 3 probes 5 s apart).
void tune_tcp(int fd) {
  const int on = 1, idle = 10, interval = 5, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

// A connected socket to "unix:NAME" or "tcp:HOST:PORT" within `timeout_ms`; -1 with `why` set.
int connect_to(const std::string& address, int timeout_ms, std::string* why) {
  if (address.rfind("unix:", 0) == 0) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t length = 0;
    const sockaddr_un target = abstract_address(address.substr(5), &length);
    if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&target), length) != 0) {
      *why = "cannot connect: " + errno_text();
      if (fd >= 0) ::close(fd);
      return -1;
    }
    return fd;
  }
  if (address.rfind("tcp:", 0) != 0) {
    *why = "not a unix: or tcp: address";
    return -1;
  }
  rendezvous::HostPort target;
  try {
    target = rendezvous::split_host_port(address.substr(4));
  } catch (const Error& error) {
    *why = error.what();
    return -1;
  }
  const std::string& host = target.host;
  const std::string port = std::to_string(target.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); error != 0) {
    *why = "cannot resolve " + host + ": " + ::gai_strerror(error);
    return -1;
  }
  int fd = -1;
  *why = "no address of " + host;
  for (addrinfo* entry = found; entry != nullptr && fd < 0; entry = entry->ai_next) {
    fd = ::socket(entry->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int error = 0;
    socklen_t size = sizeof error;
    pollfd writable{fd, POLLOUT, 0};
    const bool connected = ::connect(fd, entry->ai_addr, entry->ai_addrlen) == 0 ||
                           (errno == EINPROGRESS && ::poll(&writable, 1, timeout_ms) == 1 &&
                            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0);
    if (!connected) {
      *why = "cannot connect: " + std::string(std::strerror(error != 0 ? error : errno != 0 ? errno : ETIMEDOUT));
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    tune_tcp(fd);
    why->clear();
  }
  return fd;
}

// A TCP socket listening on a free port of `host`; -1 with `why` set.
int listen_tcp(const std::string& host, int* port, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(host.c_str(), "0", &hints, &found); error != 0) {
    *why = "cannot resolve " + host + ": " + ::gai_strerror(error);
    return -1;
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_storage bound{};
  socklen_t size = sizeof bound;
  const bool listening = fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 128) == 0 &&
                         ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size) == 0;
  ::freeaddrinfo(found);
  if (!listening) {
    *why = errno_text();
    if (fd >= 0) ::close(fd);
    return -1;
  }
  *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

// Reads exactly `size` bytes; false on end of stream or error.
bool read_exactly(int fd, void* out, size_t size) {
  auto* target = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t got = ::recv(fd, target, size, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    target += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

// Sends the header (its byte count set to the slices') and the slices as one message; false when
// the connection is gone.
bool send_message(int fd, MessageHeader header, const std::vector<grpc::Slice>& slices) {
  header.bytes = 0;
  for (const grpc::Slice& slice : slices) header.bytes += slice.size();
  trace::Span span("transport", "socket write");
  span.arg("bytes", static_cast<int64_t>(header.bytes));
  std::vector<iovec> parts;
  parts.reserve(1 + slices.size());
  parts.push_back({const_cast<MessageHeader*>(&header), sizeof header});
  for (const grpc::Slice& slice : slices) {
    if (slice.size() > 0) parts.push_back({const_cast<uint8_t*>(slice.begin()), slice.size()});
  }
  size_t first = 0;
  while (first < parts.size()) {
    msghdr message{};
    message.msg_iov = parts.data() + first;
    message.msg_iovlen = std::min<size_t>(parts.size() - first, IOV_MAX);
    ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0) return false;
    while (first < parts.size() && static_cast<size_t>(sent) >= parts[first].iov_len) {
      sent -= static_cast<ssize_t>(parts[first].iov_len);
      ++first;
    }
    if (first < parts.size()) {
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + sent;
      parts[first].iov_len -= static_cast<size_t>(sent);
    }
  }
  return true;
}

bool send_bytes(int fd, const MessageHeader& header, const std::string& bytes) {
  return send_message(fd, header, {grpc::Slice(bytes)});
}

// Reads past a message's body of `size` bytes, keeping none of it; false on end of stream or
// error.
bool skip_body(int fd, uint64_t size) {
  char discard[64 << 10];
  while (size > 0) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(size, sizeof discard));
    if (!read_exactly(fd, discard, take)) return false;
    size -= take;
  }
  return true;
}

// The status of a message of `bytes` bytes refused for being over `limit`.
grpc::Status too_large(const char* what, uint64_t bytes, uint64_t limit) {
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      detail::str_cat("the ", what, " is ", bytes, " bytes, more than the ", limit, " bytes its receiver accepts"));
}

// Reads a message's body of `size` bytes as slices; false on end of stream or error.
bool read_body(int fd, uint64_t size, std::vector<grpc::Slice>* slices) {
  while (size > 0) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(size, kSliceBytes));
    grpc::Slice slice(take);
    if (!read_exactly(fd, const_cast<uint8_t*>(slice.begin()), take)) return false;
    slices->push_back(std::move(slice));
    size -= take;
  }
  return true;
}

std::string to_string(const std::vector<grpc::Slice>& slices) {
  std::string text;
  for (const grpc::Slice& slice : slices) text.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return text;
}

grpc::ByteBuffer to_buffer(std::vector<grpc::Slice>& slices) { return grpc::ByteBuffer(slices.data(), slices.size()); }

// Reads exactly `size` bytes before `deadline`; false on end of stream, error or the deadline.
bool read_exactly_before(int fd, void* out, size_t size, Clock::time_point deadline) {
  auto* target = static_cast<char*>(out);
  while (size > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd ready{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&ready, 1, static_cast<int>(left) + 1) != 1) return false;
    const ssize_t got = ::recv(fd, target, size, MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return false;
    target += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

// Reads a whole hello message (its header and its token, at most kMaxHelloBytes) before
// `deadline`; false when it did not arrive in time or is not one.
bool read_hello(int fd, Clock::time_point deadline, MessageHeader* hello, std::string* token) {
  if (!read_exactly_before(fd, hello, sizeof *hello, deadline) || hello->kind != kHello ||
      hello->bytes > kMaxHelloBytes) {
    return false;
  }
  token->resize(hello->bytes);
  return read_exactly_before(fd, token->data(), token->size(), deadline);
}

std::vector<grpc::Slice> slices_of(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (buffer.Valid()) (void)buffer.Dump(&slices);
  return slices;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Server::Connection {
  explicit Connection(int fd) : fd(fd) {}
  ~Connection() { ::close(fd); }
  const int fd;
  std::mutex write_mutex;  // one reply at a time
};

Server::Server(std::string token, Handler handler, const std::string& tcp_host, ServerLimits limits)
    : token_(std::move(token)), handler_(std::move(handler)), limits_(limits) {
  DISTGRAD_CHECK(::pipe2(wake_fds_, O_CLOEXEC) == 0, "rpc: cannot create a pipe: ", errno_text());
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  std::random_device entropy;
  name_ = "distgrad-" + std::to_string(::getpid()) + "-" + std::to_string(entropy());
  socklen_t length = 0;
  const sockaddr_un address = abstract_address(name_, &length);
  std::string failure;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
      ::listen(listen_fd_, 128) != 0) {
    failure = "cannot listen on the Unix socket @" + name_ + ": " + errno_text();
  } else if (!tcp_host.empty() && (tcp_listen_fd_ = listen_tcp(tcp_host, &tcp_port_, &failure)) < 0) {
    failure = "cannot listen on TCP at " + tcp_host + ": " + failure;
  }
  if (!failure.empty()) {
    for (int fd : {listen_fd_, wake_fds_[0], wake_fds_[1]}) {
      if (fd >= 0) ::close(fd);
    }
    DISTGRAD_FAIL("rpc: ", failure);
  }
  acceptor_ = std::thread([this] { accept_connections(); });
}

Server::~Server() { stop(); }

void Server::stop() {
  {
    std::lock_guard<std::mutex> lock(connections_mutex_);
    if (stopping_) return;
    stopping_ = true;
    const char wake = 1;
    (void)!::write(wake_fds_[1], &wake, 1);  // wakes the acceptor's poll
  }
  acceptor_.join();
  {
    std::unique_lock<std::mutex> lock(connections_mutex_);
    for (const std::shared_ptr<Connection>& connection : connections_) ::shutdown(connection->fd, SHUT_RDWR);
    readers_done_.wait(lock, [this] { return connections_.empty(); });
  }
  for (int fd : {listen_fd_, tcp_listen_fd_, wake_fds_[0], wake_fds_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

size_t Server::num_connections() const {
  std::lock_guard<std::mutex> lock(connections_mutex_);
  return connections_.size();
}

bool Server::back_off() {
  pollfd wake{wake_fds_[0], POLLIN, 0};
  return ::poll(&wake, 1, kAcceptBackoffMs) == 0;
}

void Server::accept_connections() {
  pollfd ready[3] = {{wake_fds_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}, {tcp_listen_fd_, POLLIN, 0}};
  for (;;) {
    for (pollfd& entry : ready) entry.revents = 0;
    if (::poll(ready, tcp_listen_fd_ >= 0 ? 3 : 2, -1) < 0 && errno != EINTR) return;
    if (ready[0].revents != 0) return;  // stop()
    const bool unix_ready = ready[1].revents != 0;
    const bool tcp_ready = tcp_listen_fd_ >= 0 && ready[2].revents != 0;
    if (!unix_ready && !tcp_ready) continue;  // interrupted
    const bool from_tcp = !unix_ready;
    const int fd = ::accept4(from_tcp ? tcp_listen_fd_ : listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      const bool exhausted = errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
      if (exhausted && !back_off()) return;  // the connection stays queued: try again later
      continue;                              // interrupted, or a connection that failed before it was accepted
    }
    std::lock_guard<std::mutex> lock(connections_mutex_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    ucred peer{};
    socklen_t size = sizeof peer;
    if (from_tcp) {
      tune_tcp(fd);
    } else if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != ::getuid()) {
      ::close(fd);  // only this user's processes on the Unix socket
      continue;
    }
    if (handshakes_ >= kMaxHandshakes) {
      ::close(fd);  // Note [Connections before the token]
      continue;
    }
    auto connection = std::make_shared<Connection>(fd);
    try {
      std::thread([this, connection] { serve(connection); }).detach();
    } catch (const std::system_error&) {  // no thread to be had: drop the connection
      back_off();
      continue;
    }
    connections_.insert(connection);
    ++handshakes_;
  }
}

bool Server::handshake(Connection& connection) {
  MessageHeader hello;
  std::string token;
  const bool arrived = read_hello(connection.fd, Clock::now() + limits_.handshake_timeout, &hello, &token);
  {
    std::lock_guard<std::mutex> lock(connections_mutex_);
    --handshakes_;
  }
  if (!arrived) return false;
  const bool accepted = token_.empty() || rendezvous::same_token(token, token_);
  std::lock_guard<std::mutex> lock(connection.write_mutex);
  MessageHeader answer{hello.id, kHello,
                       static_cast<uint32_t>(accepted ? grpc::StatusCode::OK : grpc::StatusCode::UNAUTHENTICATED), 0};
  return send_bytes(connection.fd, answer, accepted ? "" : "the call socket refused the job token") && accepted;
}

void Server::serve(const std::shared_ptr<Connection>& connection) {
  if (handshake(*connection)) read_requests(connection);
  ::shutdown(connection->fd, SHUT_RDWR);
  std::lock_guard<std::mutex> lock(connections_mutex_);
  connections_.erase(connection);  // its descriptor closes once no reply in flight holds it
  if (connections_.empty()) readers_done_.notify_all();
}

void Server::read_requests(const std::shared_ptr<Connection>& connection) {
  for (;;) {
    MessageHeader header;
    std::vector<grpc::Slice> body;
    if (!read_exactly(connection->fd, &header, sizeof header) || header.kind != kRequest) {
      return;  // closed, or not speaking the protocol
    }
    const uint64_t id = header.id;
    std::weak_ptr<Connection> reply_to = connection;
    auto respond = [reply_to, id](grpc::Status status, grpc::ByteBuffer reply) {
      std::shared_ptr<Connection> connection = reply_to.lock();
      if (!connection) return;  // the server stopped
      MessageHeader answer{id, kReply, static_cast<uint32_t>(status.error_code()), 0};
      std::lock_guard<std::mutex> lock(connection->write_mutex);
      if (status.ok()) {
        send_message(connection->fd, answer, slices_of(reply));
      } else {
        send_bytes(connection->fd, answer, status.error_message());
      }
    };
    if (limits_.max_request_bytes > 0 && header.bytes > limits_.max_request_bytes) {
      if (!skip_body(connection->fd, header.bytes)) return;
      respond(too_large("request", header.bytes, limits_.max_request_bytes), {});
      continue;
    }
    if (!read_body(connection->fd, header.bytes, &body)) return;
    handler_(to_buffer(body), std::move(respond));
  }
}

// ---------------------------------------------------------------------------------------------

Client::Client(const std::string& address, const std::string& token, std::chrono::milliseconds timeout,
               uint64_t max_reply_bytes)
    : max_reply_bytes_(max_reply_bytes) {
  std::string failure;
  fd_ = connect_to(address, static_cast<int>(timeout.count()), &failure);
  MessageHeader answer;
  std::string message;
  if (fd_ >= 0 && !send_bytes(fd_, {0, kHello, 0, 0}, token)) {
    failure = "cannot send the token: " + errno_text();
  } else if (fd_ >= 0 && !read_hello(fd_, Clock::now() + timeout, &answer, &message)) {
    failure = "no answer to the token";
  } else if (fd_ >= 0 && answer.status != static_cast<uint32_t>(grpc::StatusCode::OK)) {
    failure = message;
  }
  if (!failure.empty()) {
    if (fd_ >= 0) ::close(fd_);
    DISTGRAD_FAIL("rpc: the call socket ", address, ": ", failure);
  }
  reader_ = std::thread([this] { read_replies(); });
}

Client::~Client() {
  close(grpc::Status(grpc::StatusCode::CANCELLED, "the caller stopped"));
  reader_.join();
  ::close(fd_);
}

bool Client::is_open() const {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  return open_;
}

void Client::close(const grpc::Status& why) {
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    if (!open_) return;
    open_ = false;
    closed_because_ = why;
  }
  ::shutdown(fd_, SHUT_RDWR);  // the holder of the read role sees the end of the stream and fails what is left
  changed_.notify_all();       // the reader thread takes the role to find it
}

std::optional<uint64_t> Client::add_pending(std::chrono::milliseconds timeout, Pending pending, grpc::Status* closed) {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  if (!open_) {
    *closed = closed_because_;
    return std::nullopt;
  }
  const uint64_t id = next_id_++;
  const Clock::time_point deadline = timeout.count() > 0 ? Clock::now() + timeout : Clock::time_point::max();
  pending.deadline = deadline;
  if (pending.done) ++with_completion_;
  pending_.emplace(id, std::move(pending));
  if (timeout.count() > 0) deadlines_.emplace(deadline, id);
  return id;
}

void Client::send_request(uint64_t id, const grpc::ByteBuffer& request) {
  bool sent = false;
  {
    std::lock_guard<std::mutex> lock(write_mutex_);
    sent = send_message(fd_, {id, kRequest, 0, 0}, slices_of(request));
  }
  if (!sent) close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the call socket closed: " + errno_text()));
}

void Client::call(const grpc::ByteBuffer& request, std::chrono::milliseconds timeout, Completion done) {
  grpc::Status closed;
  const std::optional<uint64_t> id = add_pending(timeout, Pending{done, {}, nullptr}, &closed);
  if (!id) return done(closed, {});  // outside the lock: `done` may run user continuations
  changed_.notify_all();             // the reader thread reads while calls of call() are pending
  send_request(*id, request);
}

grpc::Status Client::call_sync(const grpc::ByteBuffer& request, std::chrono::milliseconds timeout,
                               grpc::ByteBuffer* reply) {
  Slot slot;
  grpc::Status closed;
  const std::optional<uint64_t> id = add_pending(timeout, Pending{nullptr, {}, &slot}, &closed);
  if (!id) return closed;
  send_request(*id, request);
  std::unique_lock<std::mutex> lock(pending_mutex_);
  while (!slot.done) {
    if (reading_) {
      ++blocking_waiting_;
      changed_.wait(lock);
      --blocking_waiting_;
      continue;
    }
    reading_ = true;  // Note [Reading one's own reply]
    lock.unlock();
    read_one(Clock::time_point::max());
    lock.lock();
    reading_ = false;
    changed_.notify_all();
  }
  *reply = std::move(slot.reply);
  return slot.status;
}

void Client::complete(uint64_t id, const grpc::Status& status, grpc::ByteBuffer reply) {
  Completion done;
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    auto call = pending_.find(id);
    if (call == pending_.end()) return;  // timed out before
    deadlines_.erase({call->second.deadline, id});
    if (Slot* slot = call->second.slot) {
      slot->status = status;
      slot->reply = std::move(reply);
      slot->done = true;
    } else {
      done = std::move(call->second.done);
      --with_completion_;
    }
    pending_.erase(call);
  }
  if (done) {
    done(status, std::move(reply));
  } else {
    changed_.notify_all();
  }
}

void Client::fail_all(const grpc::Status& status) {
  std::map<uint64_t, Pending> failed;
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    open_ = false;
    if (closed_because_.ok()) closed_because_ = status;
    failed.swap(pending_);
    deadlines_.clear();
    with_completion_ = 0;
    for (auto& [id, call] : failed) {
      if (call.slot == nullptr) continue;
      call.slot->status = status;
      call.slot->done = true;
    }
  }
  changed_.notify_all();
  for (auto& [id, call] : failed) {
    if (call.done) call.done(status, {});
  }
}

void Client::read_replies() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(pending_mutex_);
      changed_.wait(lock, [this] { return !reading_ && (with_completion_ > 0 || !open_); });
      reading_ = true;
    }
    // Reads while calls with a completion are in flight, and kLinger after the last one, so that
    // a stream of them does not wake this thread for each (unless a blocking caller waits).
    Clock::time_point linger_until = Clock::now() + kLinger;
    bool open = true;
    for (;;) {
      open = read_one(linger_until);
      if (!open) break;
      std::lock_guard<std::mutex> lock(pending_mutex_);
      if (with_completion_ > 0) {
        linger_until = Clock::now() + kLinger;
      } else if (Clock::now() >= linger_until || blocking_waiting_ > 0 || !open_) {
        break;
      }
    }
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      reading_ = false;
    }
    changed_.notify_all();
    if (!open) return;
  }
}

bool Client::read_one(Clock::time_point wake_by) {
  // Fail the calls whose deadline passed, then wait for a reply up to the next deadline.
  std::vector<uint64_t> expired;
  Clock::time_point next = std::min(wake_by, Clock::now() + kDeadlineCheck);
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    const Clock::time_point now = Clock::now();
    for (auto deadline = deadlines_.begin(); deadline != deadlines_.end() && deadline->first <= now; ++deadline) {
      expired.push_back(deadline->second);
    }
    for (const auto& [deadline, id] : deadlines_) {
      if (deadline > now) {
        next = std::min(next, deadline);
        break;
      }
    }
  }
  for (uint64_t id : expired) {
    complete(id, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"), {});
  }
  pollfd ready{fd_, POLLIN, 0};
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
  const int polled = ::poll(&ready, 1, static_cast<int>(std::max<int64_t>(wait, 0) + 1));
  if (polled < 0 && errno == EINTR) return true;
  if (polled == 0) return true;
  MessageHeader header;
  std::vector<grpc::Slice> body;
  const bool has_header = polled > 0 && read_exactly(fd_, &header, sizeof header) && header.kind == kReply;
  const bool too_large_reply = has_header && max_reply_bytes_ > 0 && header.bytes > max_reply_bytes_;
  if (!has_header || !(too_large_reply ? skip_body(fd_, header.bytes) : read_body(fd_, header.bytes, &body))) {
    grpc::Status why(grpc::StatusCode::UNAVAILABLE, "the call socket to the worker closed");
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      if (!open_ && !closed_because_.ok()) why = closed_because_;
    }
    ::shutdown(fd_, SHUT_RDWR);
    fail_all(why);
    return false;
  }
  if (too_large_reply) {
    complete(header.id, too_large("reply", header.bytes, max_reply_bytes_), {});
  } else if (header.status == static_cast<uint32_t>(grpc::StatusCode::OK)) {
    complete(header.id, grpc::Status::OK, to_buffer(body));
  } else {
    const auto code = header.status <= grpc::StatusCode::UNAUTHENTICATED ? static_cast<grpc::StatusCode>(header.status)
                                                                         : grpc::StatusCode::UNKNOWN;
    complete(header.id, grpc::Status(code, to_string(body)), {});
  }
  return true;
}

}  // namespace distgrad::rpc::call_socket
