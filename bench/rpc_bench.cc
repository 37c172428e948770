// RPC costs, measured by a world of processes on one machine: round-trip latency of an echo,
// calls per second with a window of calls in flight, the start-up of a whole world, whole
// distributed autograd contexts, and remote references.
//
// Every rank runs this program with the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT); rank 0 measures and prints one JSON line per workload on stdout:
//   latency     2 workers: rank 0 echoes float32 tensors of 1 element, 1 KB, 1 MB and 64 MB
//               (--sizes) off worker1, through rpc_sync and rpc_async().get(); median, p10
//               and p90 seconds. latency/memcpy/SIZE is the memcpy floor of that round trip:
//               its bytes copied twice between touched buffers in one process; for 1float and
//               1KB, latency/unix_ping_pong/SIZE and latency/tcp_ping_pong/SIZE are the socket
//               floors: the same bytes back and forth between rank 0 and worker1 over a raw Unix
//               socket and over loopback TCP (bench/socket_ping_pong.h), and latency/self/SIZE
//               rank 0's blocking echo off itself. 1MB-shared and
//               64MB-shared echo a tensor in shared memory (Tensor::share_memory_), which
//               travels by reference both ways (docs/rpc.md, "Tensors in shared memory").
//   throughput  2 workers: tiny echoes with --window calls in flight for --duration_s seconds.
//   startup     N workers: from the world's start to passing a barrier after init_rpc (the
//               largest over ranks, gathered through the Store), then a graceful shutdown,
//               timed on rank 0.
//   autograd    3 workers: rank 0 times whole distributed autograd contexts (create, forward
//               through RPC, backward, get_gradients, release); median, p10 and p90 seconds per
//               context; "bytes" is the size of one operand tensor.
//                 dist_autograd/context/3x3, .../1000x1000: t3 = rpc_sync(worker1, add, t1, t2),
//                   loss = sum(t3 * t4), backward(ctx, {loss}), get_gradients(ctx); t1, t2, t4
//                   are leaves that require grad.
//                 dist_autograd/floor/1000x1000: the bytes on the wire of that context as plain
//                   echoes off worker1, one of 8 MB (two operands out and back) then one of 4 MB
//                   (one tensor out and back), both timed as one sample: the forward moves
//                   8 MB out and 4 MB back, the backward 4 MB out and 8 MB back.
//                 dist_autograd/chain3: worker0 -> worker1 (sin) -> worker2 (square) -> worker0
//                   (times 2), each hop a registered function calling the next on a 3x3 tensor,
//                   then sum, backward and get_gradients on worker0.
//   rref        2 workers (bench/run_rpc_bench.py gives parameter_server_step 3, worker2 idle):
//               remote references (rpc/rref.h); --rref_workloads picks.
//                 rref/remote_to_here: rank 0 calls remote(worker1, echo, t) with t a 1-element
//                   float32 tensor, then to_here() on the RRef, which is dropped; median, p10 and
//                   p90 seconds per remote and to_here.
//                 rref/create_rate: rank 0 creates 1000 RRefs with remote(worker1, echo, t), in
//                   batches of 100 held in a vector that is cleared at once after each batch,
//                   then polls worker1's get_rref_debug_info() every millisecond until it owns
//                   no value, so the deletions are counted; 10 such trials after 2 of warm-up;
//                   "rrefs_per_second" is 1000 over the median trial, seconds_per_iter (p10, p90)
//                   the trials' seconds per RRef.
//                 rref/parameter_server_step: a 256x256 float32 weight that requires grad, in a
//                   ParameterServer object on worker1 (remote_object); per step rank 0 opens a
//                   context, y = rref.rpc_sync(&ParameterServer::forward, x) (x W on worker1, x
//                   32x256), loss = sum(y * y), backward(ctx, {loss}), then
//                   rref.rpc_sync(&ParameterServer::apply, ctx.id(), lr): SGD on the owner from
//                   the context's gradient, in place under NoGradGuard; median, p10 and p90
//                   seconds per step; "bytes" is the size of x.
//
//   RANK=0 WORLD_SIZE=2 MASTER_PORT=29511 build/bench/rpc_bench latency &
//   RANK=1 WORLD_SIZE=2 MASTER_PORT=29511 build/bench/rpc_bench latency
// bench/run_rpc_bench.py starts the worlds and compares with torch.distributed.rpc
// (bench/peer/rpc_torch.py prints the same workload names).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "bench/socket_ping_pong.h"
#include "core/creation.h"
#include "core/random.h"
#include "core/reduction.h"
#include "dist_autograd/dist_autograd.h"
#include "dist_autograd/init_rpc.h"
#include "rpc/rpc.h"
#include "rpc/rref.h"

ABSL_FLAG(double, duration_s, 3.0, "throughput: seconds of measured calls (after a tenth as long of warm-up)");
ABSL_FLAG(int, window, 32, "throughput: calls in flight");
ABSL_FLAG(double, repetitions_scale, 1.0, "latency, autograd: multiplies every workload's repetition count");
ABSL_FLAG(std::vector<std::string>, sizes,
          std::vector<std::string>({"1float", "1KB", "1MB", "64MB", "1MB-shared", "64MB-shared"}),
          "latency: the tensor sizes to measure");
ABSL_FLAG(std::vector<std::string>, workloads,
          std::vector<std::string>({"context/3x3", "context/1000x1000", "floor/1000x1000", "chain3"}),
          "autograd: the workloads to measure (the names after dist_autograd/)");
ABSL_FLAG(std::vector<std::string>, rref_workloads,
          std::vector<std::string>({"remote_to_here", "create_rate", "parameter_server_step"}),
          "rref: the workloads to measure (the names after rref/)");

namespace dg = distgrad;
namespace rpc = distgrad::rpc;

namespace {

using Clock = std::chrono::steady_clock;

dg::Tensor echo(dg::Tensor tensor) { return tensor; }
DISTGRAD_REMOTE(echo);

// Worker1: a raw echo of `bytes`-byte messages on a fresh Unix (kind 0) or TCP (1) socket.
std::string start_socket_echo(int64_t kind, int64_t bytes) {
  return bench::start_echo(kind == 0 ? bench::SocketKind::kUnix : bench::SocketKind::kTcp, static_cast<size_t>(bytes));
}
DISTGRAD_REMOTE(start_socket_echo);

double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// The q-quantile of sorted samples, interpolating linearly between neighbours (numpy's default).
double quantile(const std::vector<double>& sorted, double q) {
  const double position = q * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (position - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

// One JSON line: the median, p10 and p90 of the samples, then `extra` (more fields, ", \"key\": value").
void print_latency(const std::string& name, std::vector<double> samples, int64_t bytes, const std::string& extra = "") {
  std::sort(samples.begin(), samples.end());
  std::printf(
      "{\"name\": \"%s\", \"seconds_per_iter\": %.9g, \"p10\": %.9g, \"p90\": %.9g, \"repetitions\": %zu, "
      "\"bytes\": %lld%s}\n",
      name.c_str(), quantile(samples, 0.5), quantile(samples, 0.1), quantile(samples, 0.9), samples.size(),
      static_cast<long long>(bytes), extra.c_str());
  std::fflush(stdout);
}

struct LatencyWorkload {
  const char* label;
  int64_t elements;
  int repetitions;
  bool shared = false;  // the tensor is in shared memory
};

// Rank 0: round trips of echo to worker1, blocking and through a future.
void run_latency() {
  constexpr LatencyWorkload kWorkloads[] = {{"1float", 1, 1000},
                                            {"1KB", 256, 200},
                                            {"1MB", 256 << 10, 50},
                                            {"64MB", 16 << 20, 10},
                                            {"1MB-shared", 256 << 10, 50, true},
                                            {"64MB-shared", 16 << 20, 10, true}};
  const double scale = absl::GetFlag(FLAGS_repetitions_scale);
  const std::vector<std::string> sizes = absl::GetFlag(FLAGS_sizes);
  for (const std::string& size : sizes) {
    DISTGRAD_CHECK(std::any_of(std::begin(kWorkloads), std::end(kWorkloads),
                               [&](const LatencyWorkload& workload) { return size == workload.label; }),
                   "rpc_bench: --sizes expects 1float, 1KB, 1MB, 64MB, 1MB-shared or 64MB-shared, found '", size, "'");
  }
  for (const LatencyWorkload& workload : kWorkloads) {
    if (std::find(sizes.begin(), sizes.end(), workload.label) == sizes.end()) continue;
    const dg::Tensor tensor = dg::ones({workload.elements});
    if (workload.shared) tensor.share_memory_();
    const int repetitions = std::max(3, static_cast<int>(workload.repetitions * scale));
    const int warm_up = std::max(2, repetitions / 10);
    // Echoes off worker1 blocking and through a future, and (tiny ones) off rank 0 itself.
    for (const char* kind : {"sync", "async", "self"}) {
      const std::string label = kind;
      if (label == "self" && workload.elements > 256) continue;
      auto round_trip = [&] {
        const dg::Tensor reply = label == "sync"    ? rpc::rpc_sync(1, echo, tensor)
                                 : label == "async" ? rpc::rpc_async(1, echo, tensor).get()
                                                    : rpc::rpc_sync(0, echo, tensor);
        DISTGRAD_CHECK(reply.numel() == workload.elements, "rpc_bench: the echo of ", workload.elements,
                       " elements came back with ", reply.numel());
      };
      for (int i = 0; i < warm_up; ++i) round_trip();
      std::vector<double> samples;
      samples.reserve(repetitions);
      for (int i = 0; i < repetitions; ++i) {
        const auto start = Clock::now();
        round_trip();
        samples.push_back(seconds_between(start, Clock::now()));
      }
      print_latency("latency/" + label + "/" + workload.label, std::move(samples), workload.elements * 4);
    }
    if (workload.shared) continue;  // its floors are those of the same size in private memory
    // The memcpy floor of a round trip: the bytes copied there and back between touched buffers.
    const size_t nbytes = static_cast<size_t>(workload.elements) * 4;
    std::vector<char> there(nbytes, 1), back(nbytes, 2);
    std::vector<double> samples;
    for (int i = 0; i < warm_up + repetitions; ++i) {
      const auto start = Clock::now();
      std::memcpy(there.data(), tensor.data_ptr(), nbytes);
      std::memcpy(back.data(), there.data(), nbytes);
      if (i >= warm_up) samples.push_back(seconds_between(start, Clock::now()));
    }
    print_latency(std::string("latency/memcpy/") + workload.label, std::move(samples), workload.elements * 4);
    if (workload.elements * 4 > 4096) continue;
    for (const auto& [kind, label] :
         {std::pair{bench::SocketKind::kUnix, "unix_ping_pong"}, std::pair{bench::SocketKind::kTcp, "tcp_ping_pong"}}) {
      const std::string address =
          rpc::rpc_sync(1, start_socket_echo, int64_t{kind == bench::SocketKind::kUnix ? 0 : 1}, workload.elements * 4);
      print_latency(std::string("latency/") + label + "/" + workload.label,
                    bench::time_ping_pong(kind, address, nbytes, warm_up, repetitions), workload.elements * 4);
    }
  }
}

// Rank 0: tiny echoes to worker1 with a window of calls in flight.
void run_throughput() {
  const dg::Tensor tensor = dg::ones({1});
  const int window = absl::GetFlag(FLAGS_window);
  const double duration = absl::GetFlag(FLAGS_duration_s);
  std::deque<rpc::Future<dg::Tensor>> in_flight;
  auto run_for = [&](double seconds) {
    int64_t completed = 0;
    const auto start = Clock::now();
    while (seconds_between(start, Clock::now()) < seconds) {
      while (static_cast<int>(in_flight.size()) < window) in_flight.push_back(rpc::rpc_async(1, echo, tensor));
      in_flight.front().get();
      in_flight.pop_front();
      ++completed;
    }
    return std::pair{completed, seconds_between(start, Clock::now())};
  };
  run_for(duration / 10);
  const auto [completed, elapsed] = run_for(duration);
  while (!in_flight.empty()) {
    in_flight.front().get();
    in_flight.pop_front();
  }
  const double calls_per_second = static_cast<double>(completed) / elapsed;
  std::printf("{\"name\": \"throughput/window%d\", \"seconds_per_iter\": %.9g, \"calls_per_second\": %.9g}\n", window,
              1.0 / calls_per_second, calls_per_second);
  std::fflush(stdout);
}

// --- distributed autograd

dg::Tensor add_tensors(dg::Tensor a, dg::Tensor b) { return a + b; }
DISTGRAD_REMOTE(add_tensors);

// The three hops of dist_autograd/chain3, each on its worker, each calling the next.
dg::Tensor chain_on_worker0(dg::Tensor x) { return x * 2.0; }
DISTGRAD_REMOTE(chain_on_worker0);
dg::Tensor chain_on_worker2(dg::Tensor x) { return rpc::rpc_sync(0, chain_on_worker0, x * x); }
DISTGRAD_REMOTE(chain_on_worker2);
dg::Tensor chain_on_worker1(dg::Tensor x) { return rpc::rpc_sync(2, chain_on_worker2, dg::sin(x)); }
DISTGRAD_REMOTE(chain_on_worker1);

// Runs `iteration` warm-up times, then times it `repetitions` times (both scaled by
// --repetitions_scale) and returns the seconds of each timed one.
template <typename F>
std::vector<double> time_samples(int repetitions, F iteration) {
  const double scale = absl::GetFlag(FLAGS_repetitions_scale);
  repetitions = std::max(3, static_cast<int>(repetitions * scale));
  const int warm_up = std::max(2, repetitions / 10);
  for (int i = 0; i < warm_up; ++i) iteration();
  std::vector<double> samples;
  samples.reserve(repetitions);
  for (int i = 0; i < repetitions; ++i) {
    const auto start = Clock::now();
    iteration();
    samples.push_back(seconds_between(start, Clock::now()));
  }
  return samples;
}

// time_samples, printed.
template <typename F>
void time_iterations(const std::string& name, int repetitions, int64_t bytes, F iteration) {
  print_latency(name, time_samples(repetitions, iteration), bytes);
}

// Fails unless `found` matches `expected` (the gradients of the first context of a workload).
void check_gradient(const char* what, const dg::Tensor& found, const dg::Tensor& expected) {
  DISTGRAD_CHECK(dg::untracked::allclose(found, expected, 1e-5, 1e-6), "rpc_bench: the gradient of ", what,
                 " is wrong: expected ", expected.describe(), ", found ", found.describe());
}

// Rank 0: one distributed autograd context per iteration around an add on worker1.
void run_context(int64_t side, int repetitions) {
  const dg::Tensor t1 = dg::rand({side, side}, dg::requires_grad());
  const dg::Tensor t2 = dg::rand({side, side}, dg::requires_grad());
  const dg::Tensor t4 = dg::rand({side, side}, dg::requires_grad());
  // The leaves are reused: from the second context on, backward adds into their .grad() in place.
  bool checked = false;
  auto iteration = [&] {
    dg::autograd::Context context;
    const dg::Tensor t3 = rpc::rpc_sync(1, add_tensors, t1, t2);
    const dg::Tensor loss = dg::sum(t3 * t4);
    dg::autograd::backward(context, {loss});
    const dg::autograd::GradientMap grads = dg::autograd::get_gradients(context);
    DISTGRAD_CHECK(grads.size() == 3, "rpc_bench: expected 3 gradients in the context, found ", grads.size());
    if (!checked) {
      check_gradient("t1", grads.at(t1), t4.detach());
      check_gradient("t2", grads.at(t2), t4.detach());
      check_gradient("t4", grads.at(t4), t1.detach() + t2.detach());
      checked = true;
    }
  };
  const std::string size = std::to_string(side) + "x" + std::to_string(side);
  time_iterations("dist_autograd/context/" + size, repetitions, side * side * 4, iteration);
}

// Rank 0: the bytes on the wire of a 1000x1000 context as plain echoes (the file's comment).
void run_floor(int64_t side, int repetitions) {
  const dg::Tensor pair = dg::ones({2 * side * side});
  const dg::Tensor single = dg::ones({side * side});
  auto iteration = [&] {
    const dg::Tensor first = rpc::rpc_sync(1, echo, pair);
    const dg::Tensor second = rpc::rpc_sync(1, echo, single);
    DISTGRAD_CHECK(first.numel() == pair.numel() && second.numel() == single.numel(),
                   "rpc_bench: an echo came back with the wrong number of elements");
  };
  const std::string size = std::to_string(side) + "x" + std::to_string(side);
  time_iterations("dist_autograd/floor/" + size, repetitions, side * side * 4, iteration);
}

// Rank 0: one context per iteration around worker0 -> worker1 -> worker2 -> worker0.
void run_chain(int repetitions) {
  const dg::Tensor x = dg::rand({3, 3}, dg::requires_grad());
  bool checked = false;
  auto iteration = [&] {
    dg::autograd::Context context;
    const dg::Tensor y = rpc::rpc_sync(1, chain_on_worker1, x);
    const dg::Tensor loss = dg::sum(y);
    dg::autograd::backward(context, {loss});
    const dg::autograd::GradientMap grads = dg::autograd::get_gradients(context);
    DISTGRAD_CHECK(grads.size() == 1, "rpc_bench: expected 1 gradient in the context, found ", grads.size());
    if (!checked) {  // d/dx sum(2 sin(x)^2) = 4 sin(x) cos(x)
      const dg::Tensor value = x.detach();
      check_gradient("x", grads.at(x), dg::sin(value) * dg::cos(value) * 4.0);
      checked = true;
    }
  };
  time_iterations("dist_autograd/chain3", repetitions, 3 * 3 * 4, iteration);
}

void run_autograd() {
  const std::vector<std::string> workloads = absl::GetFlag(FLAGS_workloads);
  const std::vector<std::pair<std::string, std::function<void()>>> known = {
      {"context/3x3", [] { run_context(3, 1000); }},
      {"context/1000x1000", [] { run_context(1000, 50); }},
      {"floor/1000x1000", [] { run_floor(1000, 50); }},
      {"chain3", [] { run_chain(500); }}};
  for (const std::string& workload : workloads) {
    DISTGRAD_CHECK(std::any_of(known.begin(), known.end(), [&](const auto& entry) { return entry.first == workload; }),
                   "rpc_bench: --workloads expects context/3x3, context/1000x1000, floor/1000x1000 or chain3, found '",
                   workload, "'");
  }
  for (const auto& [name, run] : known) {
    if (std::find(workloads.begin(), workloads.end(), name) != workloads.end()) run();
  }
}

// --- remote references

// The values this worker owns (rref/create_rate waits until worker1's are gone).
int64_t owned_values() { return static_cast<int64_t>(rpc::get_rref_debug_info().num_owned_values); }
DISTGRAD_REMOTE(owned_values);

// A weight on its owner: forward is x W, apply one SGD step from a context's gradient.
class ParameterServer {
 public:
  explicit ParameterServer(int64_t side) : weight_(dg::rand({side, side}, dg::requires_grad())) {}
  dg::Tensor forward(dg::Tensor x) { return dg::matmul(x, weight_); }
  void apply(int64_t context_id, double lr) {
    const dg::autograd::GradientMap gradients = dg::autograd::get_gradients(context_id);
    dg::autograd::NoGradGuard no_grad;
    dg::sub_(weight_, gradients.at(weight_) * lr);
  }

 private:
  dg::Tensor weight_;
};
DISTGRAD_REMOTE_CLASS(ParameterServer, int64_t);
DISTGRAD_REMOTE_METHOD(ParameterServer, forward);
DISTGRAD_REMOTE_METHOD(ParameterServer, apply);

// Rank 0: remote(worker1, echo, t) and to_here() per iteration.
void run_remote_to_here(int repetitions) {
  const dg::Tensor tensor = dg::ones({1});
  time_iterations("rref/remote_to_here", repetitions, 4, [&] {
    const dg::Tensor value = rpc::remote(1, &echo, tensor).to_here();
    DISTGRAD_CHECK(value.numel() == 1, "rpc_bench: to_here of a 1-element echo gave ", value.numel(), " elements");
  });
}

// Rank 0: RRefs created on worker1 in batches of 100, each batch dropped at once, until worker1
// owns none of them (the file's comment).
void run_create_rate(int trials) {
  using namespace std::chrono_literals;
  constexpr int kBatch = 100, kPerTrial = 1000;
  const dg::Tensor tensor = dg::ones({1});
  std::vector<rpc::RRef<dg::Tensor>> batch;
  batch.reserve(kBatch);
  std::vector<double> samples = time_samples(trials, [&] {
    for (int created = 0; created < kPerTrial; created += kBatch) {
      for (int i = 0; i < kBatch; ++i) batch.push_back(rpc::remote(1, &echo, tensor));
      batch.clear();
    }
    const auto start = Clock::now();
    for (int64_t left = rpc::rpc_sync(1, owned_values); left != 0; left = rpc::rpc_sync(1, owned_values)) {
      DISTGRAD_CHECK(seconds_between(start, Clock::now()) < 60, "rpc_bench: worker1 still owns ", left,
                     " values 60 s after the RRefs were dropped");
      std::this_thread::sleep_for(1ms);
    }
  });
  for (double& sample : samples) sample /= kPerTrial;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  char rate[64];
  std::snprintf(rate, sizeof rate, ", \"rrefs_per_second\": %.9g", 1.0 / quantile(sorted, 0.5));
  print_latency("rref/create_rate", std::move(samples), 4, rate);
}

// Rank 0: one parameter server step per iteration (the file's comment).
void run_parameter_server_step(int repetitions) {
  constexpr int64_t kSide = 256, kBatch = 32;
  constexpr double kLearningRate = 1e-4;
  const rpc::RRef<ParameterServer> server = rpc::remote_object<ParameterServer>(1, kSide);
  const dg::Tensor x = dg::randn({kBatch, kSide});
  time_iterations("rref/parameter_server_step", repetitions, kBatch * kSide * 4, [&] {
    dg::autograd::Context context;
    const dg::Tensor y = server.rpc_sync(&ParameterServer::forward, x);
    const dg::Tensor loss = dg::sum(y * y);
    dg::autograd::backward(context, {loss});
    server.rpc_sync(&ParameterServer::apply, context.id(), kLearningRate);
  });
}

void run_rref() {
  const std::vector<std::string> workloads = absl::GetFlag(FLAGS_rref_workloads);
  const std::vector<std::pair<std::string, std::function<void()>>> known = {
      {"remote_to_here", [] { run_remote_to_here(1000); }},
      {"create_rate", [] { run_create_rate(10); }},
      {"parameter_server_step", [] { run_parameter_server_step(200); }}};
  for (const std::string& workload : workloads) {
    DISTGRAD_CHECK(std::any_of(known.begin(), known.end(), [&](const auto& entry) { return entry.first == workload; }),
                   "rpc_bench: --rref_workloads expects remote_to_here, create_rate or parameter_server_step, found '",
                   workload, "'");
  }
  for (const auto& [name, run] : known) {
    if (std::find(workloads.begin(), workloads.end(), name) != workloads.end()) run();
  }
}

// Seconds since this process started (/proc/self/stat's start time, in clock ticks since boot).
double seconds_since_process_start() {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // the fields after "(comm) "
  std::string field;
  for (int index = 3; index <= 22 && fields >> field; ++index) {
  }
  timespec now{};
  clock_gettime(CLOCK_BOOTTIME, &now);
  const double started = std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9 - started;
}

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Every rank: init_rpc and a barrier; rank 0 gathers each rank's times through the Store and
// prints the largest of each. The world time counts from DISTGRAD_BENCH_SPAWN_TIME (the
// launcher's clock when it started the first process; this process's start without it), the
// process time from this process's own start, the init time from the call of init_rpc.
int run_startup() {
  const char* spawned = std::getenv("DISTGRAD_BENCH_SPAWN_TIME");
  const auto before_init = Clock::now();
  rpc::init_rpc();
  rpc::barrier();
  const double process_seconds = seconds_since_process_start();
  const double world_seconds = spawned != nullptr ? unix_time() - std::stod(spawned) : process_seconds;
  const auto passed = Clock::now();
  const double init_seconds = seconds_between(before_init, passed);
  dg::rendezvous::StoreClient& store = rpc::agent().store();
  const int rank = rpc::get_rank();
  std::ostringstream times;
  times.precision(9);
  times << process_seconds << ' ' << world_seconds << ' ' << init_seconds;
  store.set("bench/startup/" + std::to_string(rank), times.str());
  if (rank == 0) {
    double max_process = 0, max_world = 0, max_init = 0;
    for (int other = 0; other < rpc::get_world_size(); ++other) {
      std::istringstream in(store.get("bench/startup/" + std::to_string(other)));
      double process = 0, world = 0, init = 0;
      in >> process >> world >> init;
      max_process = std::max(max_process, process);
      max_world = std::max(max_world, world);
      max_init = std::max(max_init, init);
    }
    std::printf(
        "{\"name\": \"startup/%dworkers\", \"seconds_per_iter\": %.9g, \"max_process_seconds\": %.9g, "
        "\"max_init_seconds\": %.9g, \"workers\": %d}\n",
        rpc::get_world_size(), max_world, max_process, max_init, rpc::get_world_size());
    std::fflush(stdout);
  }
  rpc::shutdown(true);
  if (rank == 0) {
    std::printf("{\"name\": \"shutdown/%dworkers\", \"seconds_per_iter\": %.9g}\n", rpc::get_world_size(),
                seconds_between(passed, Clock::now()));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "rpc_bench latency|throughput|startup|autograd|rref (one process per rank; see the file's comment)");
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::string mode = positional.size() == 2 ? positional[1] : "";
  if (mode != "latency" && mode != "throughput" && mode != "startup" && mode != "autograd" && mode != "rref") {
    std::fprintf(stderr, "usage: rpc_bench latency|throughput|startup|autograd|rref [--flags]\n");
    return 2;
  }
  if (mode == "startup") {
    try {
      return run_startup();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "[rank %d] error: %s\n", rpc::get_rank(), error.what());
      rpc::shutdown(false);
      return 1;
    }
  }
  const int needed = mode == "autograd" ? 3 : 2;
  if (rpc::get_world_size() < needed) {
    std::fprintf(stderr, "rpc_bench %s: expected WORLD_SIZE >= %d (rank 0 calls worker1%s), found %d\n", mode.c_str(),
                 needed, needed == 3 ? " and the chain goes through worker2" : "", rpc::get_world_size());
    return 2;
  }
  return rpc::auto_init_rpc(nullptr, rpc::rank_zero_only([&] {
                              if (mode == "latency") {
                                run_latency();
                              } else if (mode == "throughput") {
                                run_throughput();
                              } else if (mode == "autograd") {
                                run_autograd();
                              } else {
                                run_rref();
                              }
                            }));
}
