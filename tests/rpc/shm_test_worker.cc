// The worker of the shared-memory tests (tests/rpc/shared_memory_test.cc, and
// tests/rpc/shm_hosts_test.sh across network-namespace hosts): `shm_test_worker SCENARIO`, run as
// every rank of a world. Each scenario checks which path tensors took (rpc::transport_stats), that
// they arrive intact, and what is left behind; it exits 0, or prints "[workerN] error: ..." and
// exits non-zero at the first failed check.
//
// The fast paths' variables (DISTGRAD_SAME_HOST, DISTGRAD_SHM, DISTGRAD_SOCKET_CALLS,
// DISTGRAD_GRPC_ONLY) set what the scenarios expect of each call and tensor: every one still arrives
// intact.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/creation.h"
#include "core/ops.h"
#include "core/shared_memory.h"
#include "dist_autograd/init_rpc.h"
#include "rpc/call_socket.h"
#include "rpc/rpc.h"
#include "tests/rpc/raw_call_socket.h"
#include "tests/rpc/scenario.h"

namespace distgrad::rpc {
namespace {

using namespace std::chrono_literals;
using testing::connect_raw;
using testing::Failure;
using testing::require;
using testing::same_host_on;
using testing::say;
using testing::shared_memory_on;
using testing::socket_calls_on;

// The tensor a call with `seed` sends: n float32 values that depend on the seed and the index.
Tensor pattern(int64_t n, int64_t seed) {
  return untracked::add(arange(0.0, static_cast<double>(n), 1.0), static_cast<double>(seed));
}

void require_pattern(const Tensor& tensor, int64_t n, int64_t seed, const std::string& what) {
  require(tensor.numel() == n, what, ": ", tensor.numel(), " elements, expected ", n);
  const float* data = tensor.data<float>();
  for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 97)) {
    require(data[i] == static_cast<float>(i + seed), what, ": element ", i, " is ", data[i], ", expected ",
            static_cast<float>(i + seed));
  }
  require(data[n - 1] == static_cast<float>(n - 1 + seed), what, ": the last element is ", data[n - 1]);
}

// Registered functions.
Tensor echo_tensor(Tensor x) { return x; }
DISTGRAD_REMOTE(echo_tensor);

int64_t add_one(int64_t x) { return x + 1; }
DISTGRAD_REMOTE(add_one);
int64_t plus_one_of(int64_t x) { return rpc_sync(1, &add_one, x); }

// Returns x + 1 (a fresh tensor, so the reply needs a segment of its own).
Tensor plus_one(Tensor x) { return untracked::add(x, 1.0); }
DISTGRAD_REMOTE(plus_one);

// A fresh tensor of n values for `seed`, made on the callee.
Tensor make_pattern(int64_t n, int64_t seed) { return pattern(n, seed); }
DISTGRAD_REMOTE(make_pattern);

// Keeps the received tensor (a view of the caller's segment) and dies holding it.
Tensor held;
int64_t hold_and_die(Tensor x) {
  held = x;
  std::fputs("hold_and_die: raising SIGKILL while holding the caller's segment\n", stdout);
  std::fflush(stdout);
  ::raise(SIGKILL);
  return 0;
}
DISTGRAD_REMOTE(hold_and_die);

// How many tensors this worker has sent through shared memory.
int64_t shared_tensors_sent() { return static_cast<int64_t>(transport_stats().shared_memory_tensors); }
DISTGRAD_REMOTE(shared_tensors_sent);

// For the shared_tensors scenario: the callee adds one to its argument in place.
bool add_one_in_place(Tensor x) {
  untracked::add_(x, 1.0);
  return true;
}
DISTGRAD_REMOTE(add_one_in_place);

// A tensor of n values for `seed` that the callee makes in shared memory and lets go of once sent.
Tensor make_shared_pattern(int64_t n, int64_t seed) { return pattern(n, seed).share_memory_(); }
DISTGRAD_REMOTE(make_shared_pattern);

double sum_of(Tensor x) { return untracked::sum(x).item<double>(); }
DISTGRAD_REMOTE(sum_of);

// Passes its argument on to `rank` (a third process maps the memory through this one).
double sum_on(int64_t rank, Tensor x) {
  require(!shared_memory_on() || x.is_shared(), "worker1 received a copy of a tensor in shared memory");
  return rpc_sync(static_cast<int>(rank), &sum_of, x);
}
DISTGRAD_REMOTE(sum_on);

// The descriptors of shared tensors' memory this process holds, once every SharedMemory that
// waited for its messages to be received had its chance to close (destroying one closes those).
int64_t shared_tensor_descriptors() {
  empty({1}).share_memory_();
  int64_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    if (std::filesystem::read_symlink(entry.path(), error).string() == "/memfd:distgrad-tensor (deleted)") ++count;
  }
  return count;
}
DISTGRAD_REMOTE(shared_tensor_descriptors);

// Lets a worker that waits in serve_until_released() stop.
std::atomic<bool> released{false};
bool release() {
  released = true;
  return true;
}
DISTGRAD_REMOTE(release);

// Serves calls until rank 0 calls release(), then stops without waiting for the others (one of
// them is dead).
void serve_until_released() {
  const auto start = std::chrono::steady_clock::now();
  while (!released) {
    require(std::chrono::steady_clock::now() - start < 60s, "rank 0 did not release this worker within 60 s");
    std::this_thread::sleep_for(10ms);
  }
  shutdown(false);
}

// Resident memory of this process in bytes (VmRSS: anonymous, file and shared pages).
int64_t resident_bytes() { return testing::memory_status_bytes("VmRSS"); }

std::set<std::string> dev_shm_entries() {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) names.insert(entry.path().string());
  return names;
}

// Rank 0 echoes tensors of every size class off worker1 and checks each; the first call opens the
// path, every later large one takes it; 1000 large calls leave memory, segments and /dev/shm flat.
int echo() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        const std::set<std::string> shm_before = dev_shm_entries();
        require_pattern(rpc_sync(1, &echo_tensor, pattern(16, 1)), 16, 1, "a tiny echo");
        const TransportStats opened = transport_stats();
        for (int64_t n : {int64_t{1} << 14, int64_t{1} << 18, int64_t{1} << 22}) {
          for (int64_t seed = 0; seed < 3; ++seed) {
            require_pattern(rpc_sync(1, &echo_tensor, pattern(n, seed)), n, seed, "an echo");
            require_pattern(rpc_async(1, &plus_one, pattern(n, seed)).get(), n, seed + 1, "plus_one");
          }
        }
        // A non-contiguous tensor arrives as its contiguous values.
        const Tensor wide = untracked::reshape(pattern(1 << 16, 0), {256, 256});
        const Tensor back = rpc_sync(1, &echo_tensor, untracked::transpose(wide, 0, 1));
        require(untracked::allclose(back, untracked::transpose(wide, 0, 1)), "a transposed tensor came back different");
        const TransportStats sent = transport_stats();
        const int64_t replied = rpc_sync(1, &shared_tensors_sent);
        say("sent: ", sent.shared_memory_tensors, " tensors through shared memory, ", sent.network_tensors,
            " over the network; worker1 replied ", replied, " through shared memory");
        if (shared_memory_on()) {
          require(sent.shared_memory_tensors - opened.shared_memory_tensors == 19,
                  "expected the 19 large requests after the first call in shared memory, found ",
                  sent.shared_memory_tensors - opened.shared_memory_tensors);
          require(replied == 19, "expected 19 replies in shared memory, found ", replied);
        } else {
          require(sent.shared_memory_tensors == 0 && replied == 0,
                  "DISTGRAD_SHM=0, yet tensors went through shared memory");
        }
        // The 20 calls so far: all on the Unix socket to a worker on this host; on TCP (another host)
        // only the first, whose frame is small; none with socket calls off.
        say("calls: ", sent.socket_calls, " on a socket, ", sent.grpc_calls, " over gRPC");
        const uint64_t on_socket = !socket_calls_on() ? 0 : same_host_on() ? 20 : 1;
        require(sent.socket_calls == on_socket && sent.grpc_calls == 20 - on_socket, "expected ", on_socket,
                " calls on a socket, found ", sent.socket_calls, " (and ", sent.grpc_calls, " over gRPC)");
        // 1000 calls of 4 MB: memory, segments and /dev/shm stay flat.
        const int64_t n = int64_t{1} << 20;
        int64_t resident_after_warmup = 0;
        size_t segments_after_warmup = 0;
        for (int64_t call = 0; call < 1000; ++call) {
          require_pattern(rpc_sync(1, &plus_one, pattern(n, call)), n, call + 1, "a large call");
          if (call == 99) {
            resident_after_warmup = resident_bytes();
            segments_after_warmup = transport_stats().shared_memory_segments;
          }
        }
        const int64_t growth = resident_bytes() - resident_after_warmup;
        const TransportStats after = transport_stats();
        say("1000 calls of 4 MB: resident memory grew by ", growth / 1024, " KiB after the 100th; ",
            after.shared_memory_segments, " segments of ", after.shared_memory_segment_bytes >> 20, " MiB");
        // A leak of one tensor per call would be 3.6 GB. Through shared memory nothing is allocated
        // per call (measured: about 0.1 MiB); over gRPC and TCP the received messages land in the
        // glibc arenas of whichever thread read them, which settle more slowly (measured: 6-12 MiB
        // alone, 34 MiB once in a loaded ctest -j2).
        const int64_t allowed = (shared_memory_on() ? int64_t{32} : int64_t{64}) << 20;
        require(growth < allowed, "resident memory grew by ", growth >> 20, " MiB from the 100th to the 1000th call (",
                allowed >> 20, " MiB allowed)");
        require(after.shared_memory_segments == segments_after_warmup, "the segments went from ", segments_after_warmup,
                " to ", after.shared_memory_segments);
        require(!shared_memory_on() || after.shared_memory_segments <= 8, after.shared_memory_segments,
                " segments for calls made one at a time");
        require(dev_shm_entries() == shm_before, "/dev/shm changed");
      }));
}

// Rank 0 keeps a tensor worker1 sent through shared memory, then worker1 dies holding one of rank
// 0's segments: the call fails, the kept tensor stays intact, and calls to worker2 go on.
int peer_killed() {
  init_rpc();
  if (get_rank() != 0) {
    serve_until_released();  // worker1 dies before
    return 0;
  }
  const int64_t n = int64_t{1} << 20;
  rpc_sync(1, &echo_tensor, pattern(16, 0));  // opens the path both ways
  const Tensor kept = rpc_sync(1, &make_pattern, n, int64_t{7});
  require(rpc_sync(1, &shared_tensors_sent) == (shared_memory_on() ? 1 : 0),
          "worker1's reply did not take the expected path");
  try {
    rpc_sync_with_timeout(1, 20s, &hold_and_die, pattern(n, 3));
    throw Failure("hold_and_die returned");
  } catch (const RemoteError& error) {
    say("the call of the peer that died holding a segment failed: ", status_code_name(error.code()));
  }
  require_pattern(kept, n, 7, "the tensor worker1 sent before it died");
  for (int64_t call = 0; call < 20; ++call) {
    require_pattern(rpc_sync(2, &plus_one, pattern(n, call)), n, call + 1, "a call to worker2");
  }
  say("worker2 still answers, and the tensor from the dead worker is intact");
  try {
    rpc_sync(2, &release);
  } catch (const RemoteError& error) {
    // worker2 stops as soon as the flag is set, without waiting for the others (worker1 is dead):
    // it may be gone before its reply is.
    if (error.code() != StatusCode::kUnavailable) throw;
  }
  shutdown(false);
  return 0;
}

// The calls of the shared_tensors scenario; see there.
void send_shared_tensors(bool by_reference) {
  const int64_t n = int64_t{1} << 20;
  const TransportStats before = transport_stats();
  const int64_t worker1_copied_before = rpc_sync(1, &shared_tensors_sent);

  const Tensor sent = pattern(n, 5).share_memory_();
  require(sent.is_shared(), "share_memory_ left the tensor out of shared memory");
  const Tensor back = rpc_sync(1, &echo_tensor, sent);
  require_pattern(back, n, 5, "the echo of a shared tensor");
  require((back.data_ptr() == sent.data_ptr()) == by_reference,
          by_reference ? "the echo of a shared tensor is a copy" : "the echo is the sent memory off shared memory");
  require(sent.storage().shared_memory()->messages_in_flight() == 0,
          "messages still in flight after the echo: ", sent.storage().shared_memory()->messages_in_flight());

  require(rpc_sync(1, &add_one_in_place, sent), "add_one_in_place");
  require_pattern(sent, n, by_reference ? 6 : 5, "the caller's tensor after the callee added one in place");

  // A view at an offset travels as that view; a non-contiguous one is copied.
  const Tensor tail = untracked::slice(sent, 0, 1000, n);
  require(rpc_sync(1, &sum_of, tail) == untracked::sum(tail).item<double>(), "the sum of a view at an offset");
  const Tensor wide = untracked::transpose(untracked::reshape(sent, {1024, 1024}), 0, 1);
  require(untracked::allclose(rpc_sync(1, &echo_tensor, wide), wide), "a transposed shared tensor came back different");

  // Passed on by worker1 to worker2, who maps it through worker1.
  require(rpc_sync(1, &sum_on, int64_t{2}, sent) == untracked::sum(sent).item<double>(), "worker2's sum");

  // A result made in shared memory by the callee, which lets go of it once sent.
  for (int64_t seed = 0; seed < 20; ++seed) {
    const Tensor made = rpc_async(1, &make_shared_pattern, n, seed).get();
    require_pattern(made, n, seed, "a result made in shared memory");
    require(made.is_shared() == by_reference, "a result made in shared memory arrived ",
            made.is_shared() ? "in" : "out of", " shared memory");
  }
  // Arguments dropped as soon as the call is made.
  std::vector<Future<double>> sums;
  for (int64_t seed = 0; seed < 20; ++seed) sums.push_back(rpc_async(1, &sum_of, pattern(n, seed).share_memory_()));
  for (int64_t seed = 0; seed < 20; ++seed) {
    const double expected = untracked::sum(pattern(n, seed)).item<double>();
    require(sums[seed].get() == expected, "the sum of a dropped argument is ", sums[seed].get(), ", expected ",
            expected);
  }

  const TransportStats after = transport_stats();
  const int64_t worker1_copied = rpc_sync(1, &shared_tensors_sent) - worker1_copied_before;
  say("sent by reference: ", after.referenced_tensors - before.referenced_tensors,
      " tensors, copied into segments: ", after.shared_memory_tensors - before.shared_memory_tensors,
      "; worker1 copied ", worker1_copied);
  // By reference: echo, add_one_in_place, the view, sum_on and the 20 sums; the transposed view
  // is copied, and so is its echo's reply.
  require(after.referenced_tensors - before.referenced_tensors == (by_reference ? 24u : 0u),
          "expected 24 tensors sent by reference, found ", after.referenced_tensors - before.referenced_tensors);
  require(after.shared_memory_tensors - before.shared_memory_tensors == (by_reference ? 1u : 0u) &&
              worker1_copied == (by_reference ? 1 : 0),
          "only the transposed view and its echo should have been copied");
}

// Rank 0 sends tensors in shared memory (Tensor::share_memory_) to worker1, which passes one on to
// worker2: on this host they travel by reference and are not copied (the echo comes back as the very
// memory sent, an in-place change by the callee shows in the caller's tensor, a result the callee
// made in shared memory arrives in it); on every other path they are copied as any tensor. Nothing
// stays pinned or open once the tensors are dropped.
int shared_tensors() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        const bool by_reference = shared_memory_on();
        rpc_sync(1, &echo_tensor, pattern(16, 0));  // opens the path both ways
        rpc_sync(2, &echo_tensor, pattern(16, 0));
        send_shared_tensors(by_reference);
        for (int rank = 0; rank < 3; ++rank) {
          const int64_t open = rank == 0 ? shared_tensor_descriptors() : rpc_sync(rank, &shared_tensor_descriptors);
          require(open == 0, get_worker_name(rank), " still holds ", open, " descriptors of shared tensors");
        }
        say("shared tensors: ", by_reference ? "by reference" : "copied", "; no descriptor left open");
      }));
}

// Every rank but 0 on the host of rank 0 (the same host identity) gets tensors through shared
// memory and calls on the Unix socket; every other rank gets tensors in the messages, small calls
// on TCP and large ones over gRPC. Run across network-namespace hosts by
// tests/rpc/shm_hosts_test.sh: ranks 0 and 1 on one host, 2 and 3 on another.
int hosts() {
  return auto_init_rpc(nullptr, rank_zero_only([] {
                         const int64_t n = int64_t{1} << 18;
                         for (int rank = 1; rank < get_world_size(); ++rank) {
                           const TransportStats before = transport_stats();
                           for (int64_t call = 0; call < 3; ++call) {
                             require_pattern(rpc_sync(rank, &plus_one, pattern(n, call)), n, call + 1, "a call");
                           }
                           const TransportStats after = transport_stats();
                           const uint64_t shared = after.shared_memory_tensors - before.shared_memory_tensors;
                           const int64_t replied = rpc_sync(rank, &shared_tensors_sent);
                           const uint64_t on_socket = transport_stats().socket_calls - before.socket_calls;
                           const bool same_host = rank < get_local_world_size();
                           say(get_worker_name(rank), (same_host ? " (this host)" : " (another host)"), ": ", shared,
                               " requests and ", replied, " replies through shared memory, ", on_socket,
                               " of 4 calls on a socket");
                           // The first request opens the path; the later two take it, and every reply. Every
                           // call takes the Unix socket on this host; between hosts only the small one (the
                           // last) takes TCP, the 1 MB ones gRPC.
                           require(shared == (same_host ? 2u : 0u) && replied == (same_host ? 3 : 0) &&
                                       on_socket == (same_host ? 4u : 1u),
                                   get_worker_name(rank), " took the wrong path");
                         }
                         say("same-host peers used shared memory and the Unix socket, the others TCP and gRPC");
                       }));
}

// The name of `rank`'s Unix socket, from its rendezvous entry (Note [Rendezvous entry] in
// rpc/agent.cc).
std::string unix_socket_name(int rank) {
  const std::string entry = agent().store().get(testing::rendezvous_entry_key(rank));
  const size_t line = entry.find("\nsocket ");
  require(line != std::string::npos, "worker", rank, "'s entry names no Unix socket: ", entry);
  return entry.substr(line + 8, entry.find('\n', line + 1) - line - 8);
}

// Whether the server closes `fd` within 5 s (reads until the end of the stream).
bool closed_by_server(int fd) {
  pollfd ready{fd, POLLIN, 0};
  char byte;
  while (::poll(&ready, 1, 5000) == 1) {
    if (::recv(fd, &byte, 1, 0) <= 0) return true;
  }
  return false;
}

// With a job token: a client with another token is refused, and connections that send garbage or
// lie about a message's size are closed, while the worker keeps answering real calls.
int local_socket_security() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        const std::string name = unix_socket_name(1);
        testing::expect_error("a wrong token", [&] { call_socket::Client("unix:" + name, "not the token", 5s); });
        call_socket::Client("unix:" + name, std::getenv("DISTGRAD_TOKEN"), 5s);  // the right one is taken

        std::mt19937 random(7);
        std::string garbage(4096, '\0');
        for (char& byte : garbage) byte = static_cast<char>(random());
        const int fd = connect_raw(name);
        require(fd >= 0, "cannot connect to worker1's local socket");
        require(::send(fd, garbage.data(), garbage.size(), MSG_NOSIGNAL) > 0, "cannot send");
        require(closed_by_server(fd), "worker1 kept a connection that sent garbage");
        ::close(fd);

        const int silent = connect_raw(name);  // connects and says nothing
        require(silent >= 0, "cannot connect to worker1's local socket");
        require(plus_one_of(1) == 2, "worker1 stopped answering");
        ::close(silent);
        require(plus_one_of(1) == 2, "worker1 stopped answering after the garbage");
        say("the local socket refused a wrong token and garbage, and kept serving");
      }));
}

// init_rpc with the fast paths' variables set wrong (by the test) must refuse, naming the variable.
int bad_settings() {
  testing::expect_error("init_rpc", [] { init_rpc(); });  // prints the message
  return 0;
}

const std::map<std::string, std::function<int()>>& scenarios() {
  static const auto* table = new std::map<std::string, std::function<int()>>{
      {"echo", echo},
      {"peer_killed", peer_killed},
      {"hosts", hosts},
      {"local_socket_security", local_socket_security},
      {"bad_settings", bad_settings},
      {"shared_tensors", shared_tensors},
  };
  return *table;
}

}  // namespace
}  // namespace distgrad::rpc

int main(int argc, char** argv) {
  return distgrad::rpc::testing::scenario_main(argc, argv, distgrad::rpc::scenarios());
}
