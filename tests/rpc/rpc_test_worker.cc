// The worker of the multi-process agent tests: `rpc_test_worker SCENARIO`, run as every rank of
// a world by tests/rpc/agent_test.cc (through tests/rpc/multiprocess.h, which sets RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...). It holds the registered functions the scenarios
// call and the scenarios themselves; each checks what it receives and exits 0, or prints
// "[workerN] error: ..." and exits non-zero at the first failed check.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/cuda.h"
#include "core/ops.h"
#include "dist_autograd/init_rpc.h"
#include "rpc/frame.h"
#include "rpc/rpc.h"
#include "tests/rpc/scenario.h"

namespace worker_types {

struct Stats {
  int64_t count = 0;
  std::vector<double> weights;
  distgrad::Tensor running;
};
DISTGRAD_CODEC(Stats, count, weights, running);

// A struct with tensors at every level: fields, a nested struct, containers.
struct Batch {
  distgrad::Tensor x, y;
  std::string name;
  Stats stats;
  std::vector<distgrad::Tensor> extra;
  std::map<std::string, distgrad::Tensor> named;
  std::optional<distgrad::Tensor> mask;
  distgrad::nn::ParamDict params;
};
DISTGRAD_CODEC(Batch, x, y, name, stats, extra, named, mask, params);

}  // namespace worker_types

namespace distgrad::rpc {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using worker_types::Batch;
using worker_types::Stats;

// The Worker service's method and the metadata key of the job token (docs/rpc.md, "Wire format").
constexpr char kCallMethod[] = "/distgrad.rpc.wire.Worker/Call";
constexpr char kTokenKey[] = "distgrad-token";

using testing::expect_error;
using testing::Failure;
using testing::require;
using testing::require_contains;
using testing::say;
using testing::seconds_since;
using testing::str;

// Runs `call`, which must throw a RemoteError with `code`; returns it.
template <typename F>
RemoteError expect_remote_error(const std::string& what, StatusCode code, F&& call) {
  try {
    call();
  } catch (const RemoteError& error) {
    const std::string message = error.what();
    say(what, ": ", message.size() > 300 ? message.substr(0, 300) + "..." : message);
    require(error.code() == code, what, ": expected ", status_code_name(code), ", found ",
            status_code_name(error.code()), " (", error.what(), ")");
    return error;
  }
  throw Failure(what + ": expected a RemoteError, the call succeeded");
}

RpcOptions test_options() {
  RpcOptions options;
  options.init_timeout = 60s;
  return options;
}

// ---------------------------------------------------------------------------------------------
// Equality of everything the codecs carry (bitwise for floats and tensors).

bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes() || !(a.device() == b.device())) return false;
  const Tensor ca = untracked::contiguous(untracked::to(a, Device::cpu())),
               cb = untracked::contiguous(untracked::to(b, Device::cpu()));
  const size_t nbytes = a.nbytes();
  return nbytes == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), nbytes) == 0;
}

template <typename T>
bool same(const T& a, const T& b);
bool same(const float& a, const float& b);
bool same(const double& a, const double& b);
bool same(const Tensor& a, const Tensor& b);
bool same(const nn::ParamDict& a, const nn::ParamDict& b);
bool same(const Stats& a, const Stats& b);
bool same(const Batch& a, const Batch& b);
bool same(const std::vector<bool>& a, const std::vector<bool>& b);
template <typename T>
bool same(const std::vector<T>& a, const std::vector<T>& b);
template <typename T>
bool same(const std::map<std::string, T>& a, const std::map<std::string, T>& b);
template <typename A, typename B>
bool same(const std::pair<A, B>& a, const std::pair<A, B>& b);
template <typename... Ts>
bool same(const std::tuple<Ts...>& a, const std::tuple<Ts...>& b);
template <typename T>
bool same(const std::optional<T>& a, const std::optional<T>& b);

template <typename T>
bool same(const T& a, const T& b) {
  return a == b;
}
template <typename F>
bool same_float(F a, F b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}
bool same(const float& a, const float& b) { return same_float(a, b); }
bool same(const double& a, const double& b) { return same_float(a, b); }
bool same(const Tensor& a, const Tensor& b) { return same_tensor(a, b); }
bool same(const nn::ParamDict& a, const nn::ParamDict& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a.entries()[i].first != b.entries()[i].first || !same(a.entries()[i].second, b.entries()[i].second)) {
      return false;
    }
  }
  return true;
}
bool same(const Stats& a, const Stats& b) {
  return a.count == b.count && same(a.weights, b.weights) && same(a.running, b.running);
}
bool same(const Batch& a, const Batch& b) {
  return same(a.x, b.x) && same(a.y, b.y) && a.name == b.name && same(a.stats, b.stats) && same(a.extra, b.extra) &&
         same(a.named, b.named) && same(a.mask, b.mask) && same(a.params, b.params);
}
template <typename T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same(a[i], b[i])) return false;
  }
  return true;
}
template <typename T>
bool same(const std::map<std::string, T>& a, const std::map<std::string, T>& b) {
  if (a.size() != b.size()) return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
    if (i->first != j->first || !same(i->second, j->second)) return false;
  }
  return true;
}
template <typename A, typename B>
bool same(const std::pair<A, B>& a, const std::pair<A, B>& b) {
  return same(a.first, b.first) && same(a.second, b.second);
}
template <typename Tuple, size_t... kIndex>
bool same_elements(const Tuple& a, const Tuple& b, std::index_sequence<kIndex...>) {
  return (same(std::get<kIndex>(a), std::get<kIndex>(b)) && ...);
}
template <typename... Ts>
bool same(const std::tuple<Ts...>& a, const std::tuple<Ts...>& b) {
  return same_elements(a, b, std::index_sequence_for<Ts...>{});
}
template <typename T>
bool same(const std::optional<T>& a, const std::optional<T>& b) {
  return a.has_value() == b.has_value() && (!a || same(*a, *b));
}
// vector<bool> hands out proxies: compare it whole.
bool same(const std::vector<bool>& a, const std::vector<bool>& b) { return a == b; }

// ---------------------------------------------------------------------------------------------
// Registered functions.

template <typename T>
T echo(T value) {
  return value;
}

using Int64List = std::vector<int64_t>;
using BoolList = std::vector<bool>;
using StringList = std::vector<std::string>;
using DoubleMatrix = std::vector<std::vector<double>>;
using TensorList = std::vector<Tensor>;
using IntMap = std::map<std::string, int64_t>;
using TensorMap = std::map<std::string, Tensor>;
using StringListMap = std::map<std::string, std::vector<std::string>>;
using IntStringPair = std::pair<int32_t, std::string>;
using TensorDoublePair = std::pair<Tensor, double>;
using Record = std::tuple<bool, int64_t, double, std::string, Tensor>;
using Empty = std::tuple<>;
using MaybeInt = std::optional<int64_t>;
using MaybeTensor = std::optional<Tensor>;
using MaybeMaybeString = std::optional<std::optional<std::string>>;

DISTGRAD_REMOTE_NAMED(&echo<bool>, "echo_bool");
DISTGRAD_REMOTE_NAMED(&echo<int8_t>, "echo_int8");
DISTGRAD_REMOTE_NAMED(&echo<uint8_t>, "echo_uint8");
DISTGRAD_REMOTE_NAMED(&echo<int16_t>, "echo_int16");
DISTGRAD_REMOTE_NAMED(&echo<uint16_t>, "echo_uint16");
DISTGRAD_REMOTE_NAMED(&echo<int32_t>, "echo_int32");
DISTGRAD_REMOTE_NAMED(&echo<uint32_t>, "echo_uint32");
DISTGRAD_REMOTE_NAMED(&echo<int64_t>, "echo_int64");
DISTGRAD_REMOTE_NAMED(&echo<uint64_t>, "echo_uint64");
DISTGRAD_REMOTE_NAMED(&echo<float>, "echo_float");
DISTGRAD_REMOTE_NAMED(&echo<double>, "echo_double");
DISTGRAD_REMOTE_NAMED(&echo<std::string>, "echo_string");
DISTGRAD_REMOTE_NAMED(&echo<Tensor>, "echo_tensor");
DISTGRAD_REMOTE_NAMED(&echo<Int64List>, "echo_int64_list");
DISTGRAD_REMOTE_NAMED(&echo<BoolList>, "echo_bool_list");
DISTGRAD_REMOTE_NAMED(&echo<StringList>, "echo_string_list");
DISTGRAD_REMOTE_NAMED(&echo<DoubleMatrix>, "echo_double_matrix");
DISTGRAD_REMOTE_NAMED(&echo<TensorList>, "echo_tensor_list");
DISTGRAD_REMOTE_NAMED(&echo<IntMap>, "echo_int_map");
DISTGRAD_REMOTE_NAMED(&echo<TensorMap>, "echo_tensor_map");
DISTGRAD_REMOTE_NAMED(&echo<StringListMap>, "echo_string_list_map");
DISTGRAD_REMOTE_NAMED(&echo<IntStringPair>, "echo_int_string_pair");
DISTGRAD_REMOTE_NAMED(&echo<TensorDoublePair>, "echo_tensor_double_pair");
DISTGRAD_REMOTE_NAMED(&echo<Record>, "echo_record");
DISTGRAD_REMOTE_NAMED(&echo<Empty>, "echo_empty_tuple");
DISTGRAD_REMOTE_NAMED(&echo<MaybeInt>, "echo_maybe_int");
DISTGRAD_REMOTE_NAMED(&echo<MaybeTensor>, "echo_maybe_tensor");
DISTGRAD_REMOTE_NAMED(&echo<MaybeMaybeString>, "echo_maybe_maybe_string");
DISTGRAD_REMOTE_NAMED(&echo<nn::ParamDict>, "echo_param_dict");
DISTGRAD_REMOTE_NAMED(&echo<Batch>, "echo_batch");

// Several parameters of different types, some by const reference.
std::tuple<bool, int8_t, uint64_t, float, std::string, Tensor, std::vector<int32_t>, std::optional<double>> mixed(
    bool a, int8_t b, const uint64_t& c, float d, const std::string& e, const Tensor& f, std::vector<int32_t> g,
    std::optional<double> h) {
  return {a, b, c, d, e, f, std::move(g), h};
}
DISTGRAD_REMOTE(mixed);

std::atomic<int> touched{0};
void touch() { ++touched; }
DISTGRAD_REMOTE(touch);
int64_t touch_count() { return touched.load(); }
DISTGRAD_REMOTE(touch_count);

int64_t add_ints(int64_t a, int64_t b) { return a + b; }
DISTGRAD_REMOTE(add_ints);
int8_t add_small(int8_t a, int8_t b) { return static_cast<int8_t>(a + b); }
DISTGRAD_REMOTE(add_small);
int64_t count_elements(std::vector<int64_t> values) { return static_cast<int64_t>(values.size()); }
DISTGRAD_REMOTE(count_elements);
int64_t forty_two() { return 42; }
DISTGRAD_REMOTE(forty_two);
int64_t times_two(int64_t x) { return 2 * x; }
DISTGRAD_REMOTE(times_two);

std::string whoami() { return get_worker_name(); }
DISTGRAD_REMOTE(whoami);
std::atomic<bool> worker_init_done{false};
bool worker_init_ran() { return worker_init_done.load(); }
DISTGRAD_REMOTE(worker_init_ran);

int64_t sleep_then_return(int64_t milliseconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
  return milliseconds;
}
DISTGRAD_REMOTE(sleep_then_return);
int64_t sleep_then_echo(int64_t milliseconds, int64_t value) {
  std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
  return value;
}
DISTGRAD_REMOTE(sleep_then_echo);

void raise_error(std::string message) { throw std::runtime_error(message); }
DISTGRAD_REMOTE(raise_error);
int64_t check_positive(int64_t x) {
  DISTGRAD_CHECK(x > 0, "check_positive: expected a positive number, found ", x);
  return x;
}
DISTGRAD_REMOTE(check_positive);
void throw_non_standard() { throw 42; }
DISTGRAD_REMOTE(throw_non_standard);

// Kills this process in the middle of serving a call.
int64_t die() {
  std::fputs("die: raising SIGKILL\n", stdout);
  std::fflush(stdout);
  ::raise(SIGKILL);
  return 0;
}
DISTGRAD_REMOTE(die);

// Follows the ring of workers `hops` more times, appending each worker's name to `path`.
std::string hop(int64_t hops, std::string path) {
  path += "->" + get_worker_name();
  if (hops == 0) return path;
  return rpc_sync((get_rank() + 1) % get_world_size(), &hop, hops - 1, path);
}
DISTGRAD_REMOTE(hop);
// The same with rpc_async(...).get(), failing at the end of the ring when `fail_at_end`.
std::string hop_async(int64_t hops, std::string path, bool fail_at_end) {
  path += "->" + get_worker_name();
  if (hops == 0) {
    if (fail_at_end) throw std::runtime_error("the end of the ring at " + path);
    return path;
  }
  return rpc_async((get_rank() + 1) % get_world_size(), &hop_async, hops - 1, path, fail_at_end).get();
}
DISTGRAD_REMOTE(hop_async);

std::string device_of(Tensor x) { return x.device().str(); }
DISTGRAD_REMOTE(device_of);

// ---------------------------------------------------------------------------------------------
// Interceptors: ids a recording interceptor puts on requests and replies, and what the other side
// received.

struct Ids {
  uint64_t context_id = 0;
  uint64_t message_id = 0;
};

struct Seen {
  int peer = -1;
  int64_t tensors = 0;
  Ids ids;
};
std::mutex seen_mutex;  // guards requests_sent, requests_seen and replies_seen
std::vector<Seen> requests_sent, requests_seen, replies_seen;
std::atomic<uint64_t> next_message_id{1};
thread_local uint64_t context_in_scope = 0;  // set by on_request's scope while a function runs

// The ids a rank puts on its requests (context 1000 + rank) and replies (2000 + rank).
uint64_t request_context(int rank) { return 1000 + static_cast<uint64_t>(rank); }
uint64_t reply_context(int rank) { return 2000 + static_cast<uint64_t>(rank); }

// Ids as the interceptor's bytes ("CONTEXT/MESSAGE"), and back (0/0 for no bytes).
std::string ids_bytes(const Ids& ids) { return std::to_string(ids.context_id) + "/" + std::to_string(ids.message_id); }
Ids ids_of(std::string_view bytes) {
  if (bytes.empty()) return {};
  const size_t slash = bytes.find('/');
  require(slash != std::string_view::npos, "malformed interceptor bytes '", std::string(bytes), "'");
  return {std::stoull(std::string(bytes.substr(0, slash))), std::stoull(std::string(bytes.substr(slash + 1)))};
}

class RecordingInterceptor final : public CallInterceptor {
 public:
  std::string_view name() const override { return "recording"; }

  std::string before_request(const CallSite& call, const std::vector<Tensor>& tensors) override {
    const Ids ids{request_context(get_rank()), next_message_id++};
    std::lock_guard<std::mutex> lock(seen_mutex);
    requests_sent.push_back({call.peer, static_cast<int64_t>(tensors.size()), ids});
    return ids_bytes(ids);
  }

  std::shared_ptr<void> on_request(const CallSite& call, std::vector<Tensor>& tensors,
                                   std::string_view bytes) override {
    const Ids ids = ids_of(bytes);
    {
      std::lock_guard<std::mutex> lock(seen_mutex);
      requests_seen.push_back({call.peer, static_cast<int64_t>(tensors.size()), ids});
    }
    context_in_scope = ids.context_id;
    return std::shared_ptr<void>(nullptr, [](void*) { context_in_scope = 0; });
  }

  std::string before_reply(const CallSite&, const std::vector<Tensor>&) override {
    return ids_bytes({reply_context(get_rank()), next_message_id++});
  }

  void on_reply(const CallSite& call, std::vector<Tensor>& tensors, std::string_view bytes) override {
    std::lock_guard<std::mutex> lock(seen_mutex);
    replies_seen.push_back({call.peer, static_cast<int64_t>(tensors.size()), ids_of(bytes)});
  }
};

using SeenRecord = std::tuple<int64_t, int64_t, uint64_t, uint64_t>;  // peer, tensors, context, message
SeenRecord record_of(const Seen& seen) { return {seen.peer, seen.tensors, seen.ids.context_id, seen.ids.message_id}; }

// Returns the sum of `inputs` twice, and the context id its on_request scope set.
std::tuple<Tensor, Tensor, uint64_t> hooked(std::vector<Tensor> inputs) {
  Tensor sum = zeros({2});
  for (const Tensor& input : inputs) sum = untracked::add(sum, input);
  return {sum, sum, context_in_scope};
}
DISTGRAD_REMOTE(hooked);

std::vector<SeenRecord> requests_received() {
  std::lock_guard<std::mutex> lock(seen_mutex);
  std::vector<SeenRecord> records;
  for (const Seen& seen : requests_seen) records.push_back(record_of(seen));
  return records;
}
DISTGRAD_REMOTE(requests_received);

// Calls worker0's `hooked` with one tensor from here; returns the reply this side saw.
SeenRecord call_back_hooked() {
  const auto result = rpc_sync(0, &hooked, std::vector<Tensor>{ones({2})});
  require(std::get<2>(result) == request_context(get_rank()), "worker0 ran hooked outside the request's scope");
  std::lock_guard<std::mutex> lock(seen_mutex);
  require(!replies_seen.empty(), "no reply seen");
  return record_of(replies_seen.back());
}
DISTGRAD_REMOTE(call_back_hooked);

// ---------------------------------------------------------------------------------------------
// Raw frames and raw gRPC calls (what a client that does not use the agent can send).

std::string bytes_of(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  require(buffer.Dump(&slices).ok(), "cannot read a ByteBuffer");
  std::string bytes;
  for (const grpc::Slice& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return bytes;
}

// A frame: the header length, `header`, `payload`, then `tensor_bytes` verbatim.
std::string frame_bytes(const google::protobuf::MessageLite& header, const std::string& payload,
                        const std::string& tensor_bytes = "") {
  const std::string head = header.SerializeAsString();
  const auto size = static_cast<uint32_t>(head.size());
  return std::string(reinterpret_cast<const char*>(&size), sizeof size) + head + payload + tensor_bytes;
}

wire::CallHeader call_header(const std::string& function, uint32_t num_arguments, const std::string& payload) {
  wire::CallHeader header;
  header.set_function(function);
  header.set_num_arguments(num_arguments);
  header.set_payload_bytes(payload.size());
  header.set_caller_rank(get_rank());
  return header;
}

// A well-formed call of add_ints(a, b).
std::string add_ints_frame(int64_t a, int64_t b) {
  Encoder out;
  Codec<int64_t>::encode(out, a);
  Codec<int64_t>::encode(out, b);
  return frame_bytes(call_header("add_ints", 2, out.bytes()), out.bytes());
}

// A well-formed call of echo_tensor(tensor), built by the agent's own frame encoder.
std::string echo_tensor_frame(const Tensor& tensor) {
  Encoder out;
  Codec<Tensor>::encode(out, tensor);
  wire::CallHeader header = call_header("echo_tensor", 1, out.bytes());
  const std::vector<WireTensor> tensors = {{tensor, Device::cpu()}};
  describe_tensor(tensors[0], header.add_tensors());
  return bytes_of(encode_frame(header, out.bytes(), tensors));
}

// A raw call of the Worker service's `method` on `stub` with `bytes` as the message.
grpc::Status raw_call(grpc::GenericStub& stub, const std::string& bytes, const std::optional<std::string>& token,
                      grpc::ByteBuffer* response, const std::string& method = kCallMethod) {
  grpc::ClientContext context;
  if (token) context.AddMetadata(kTokenKey, *token);
  context.set_deadline(std::chrono::system_clock::now() + 30s);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  return done.get_future().get();
}

// A stub for the Worker service of `rank`, at the address it published (the entry's first line;
// a second one holds its shared-memory card).
std::unique_ptr<grpc::GenericStub> raw_stub(int rank) {
  const std::string entry = agent().store().get(testing::rendezvous_entry_key(rank));
  const std::string address = entry.substr(0, entry.find('\n'));
  say("worker", rank, " serves at ", address);
  return std::make_unique<grpc::GenericStub>(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

void require_status(const grpc::Status& status, grpc::StatusCode code, const std::string& what) {
  require(status.error_code() == code, what, ": expected status ", status_code_name(static_cast<StatusCode>(code)),
          ", found ", status_code_name(static_cast<StatusCode>(status.error_code())), " (", status.error_message(),
          ")");
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

// Rank filters run their function on the selected ranks only (they need only the world info).
void check_rank_filters() {
  const int rank = get_rank(), world = get_world_size();
  int runs = 0;
  on_rank(1, [&] { ++runs; })();
  require(runs == (rank == 1 ? 1 : 0), "on_rank(1) ran ", runs, " times on rank ", rank);
  runs = 0;
  not_on_rank(0, [&] { ++runs; })();
  rank_non_zero_only([&] { ++runs; })();
  require(runs == (rank != 0 ? 2 : 0), "not_on_rank(0)/rank_non_zero_only ran ", runs, " times on rank ", rank);
  runs = 0;
  rank_zero_only([&] { ++runs; })();
  on_ranks({0, world - 1}, [&] { ++runs; })();
  not_on_ranks({0, world - 1}, [&] { ++runs; })();
  require(runs == (rank == 0 ? 2 : 1), "rank_zero_only/on_ranks/not_on_ranks ran ", runs, " times on rank ", rank);
  const std::optional<int> mine =
      on_rank(rank, [](int x, const std::string& s) { return x * 2 + static_cast<int>(s.size()); })(20, "ab");
  require(mine == 42, "on_rank(own rank) returned the wrong value");
  const std::optional<int> other = on_rank((rank + 1) % world, [](int x) { return x; })(7);
  require(world == 1 ? other == 7 : !other.has_value(), "on_rank(another rank) returned a value");
}

int rendezvous() {
  const int rank = get_rank(), world = get_world_size();
  require(get_local_rank() == rank && get_local_world_size() == world, "local rank/world ", get_local_rank(), "/",
          get_local_world_size(), " on rank ", rank, " of ", world);
  const int digits = static_cast<int>(std::to_string(world).size());  // TorchOpt pads to the world size's digits
  const std::string last = std::to_string(world - 1);
  require(get_worker_name(world - 1) == "worker" + std::string(digits - last.size(), '0') + last, "unexpected name ",
          get_worker_name(world - 1));
  require(world == 1 || get_worker_id("worker1") == 1, "the unpadded name worker1 is not rank 1");
  check_rank_filters();
  return auto_init_rpc(
      [] {
        require(is_initialized(), "worker_init_fn ran before init_rpc");
        worker_init_done = true;
        barrier();
        barrier(30s);
        say("worker_init_fn ran");
      },
      rank_zero_only([world] {
        say("main ran");
        std::vector<Future<std::string>> names;
        for (int r = 0; r < world; ++r) {
          require(rpc_sync(r, &worker_init_ran), "worker_init_fn did not run on ", get_worker_name(r));
          require(rpc_sync(get_worker_name(r), &whoami) == get_worker_name(r), "rank ", r, " has another name");
          require(get_worker_id(get_worker_name(r)) == r, "get_worker_id(", get_worker_name(r), ") != ", r);
          names.push_back(rpc_async(r, &whoami));
        }
        const std::vector<std::string> values = wait_all(names);
        for (int r = 0; r < world; ++r) require(values[r] == get_worker_name(r), "async whoami of rank ", r);
        say("every worker answered: ", values.front(), " .. ", values.back());
      }),
      test_options());
}

// Echoes `value` through `to` and requires the same value back.
int values_checked = 0;
template <typename T>
void check_echo(const WorkerRef& to, const T& value, const std::string& what) {
  const T back = rpc_sync(to, &echo<T>, value);
  require(same(value, back), what, " came back different from worker ", to.rank());
  ++values_checked;
}

template <typename T>
void check_integer_limits(const WorkerRef& to, const std::string& name) {
  check_echo<T>(to, std::numeric_limits<T>::min(), name + " min");
  check_echo<T>(to, std::numeric_limits<T>::max(), name + " max");
  check_echo<T>(to, T{0}, name + " 0");
  check_echo<T>(to, static_cast<T>(std::numeric_limits<T>::max() / 3), name + " max/3");
}

template <typename T>
void check_float_values(const WorkerRef& to, const std::string& name) {
  using L = std::numeric_limits<T>;
  for (T value : {T{0}, -T{0}, T{1} / T{3}, L::max(), L::lowest(), L::min(), L::denorm_min(), L::epsilon(),
                  L::infinity(), -L::infinity(), L::quiet_NaN()}) {
    check_echo<T>(to, value, name + " " + std::to_string(value));
  }
}

Batch make_batch() {
  Batch batch;
  batch.x = randn({4, 3});
  batch.y = untracked::t(randn({2, 4}, {.dtype = kFloat64}));
  batch.name = std::string("batch\0one", 9);
  batch.stats = {7, {0.5, -1.25}, arange(5)};
  batch.extra = {ones({2}), Tensor(), empty({0, 2})};
  batch.named = {{"a", scalar_tensor(2.5)}, {"b", untracked::gt(randn({3}), 0.0)}};
  batch.mask = untracked::lt(randn({2, 2}), 0.0);
  batch.params = nn::ParamDict({{"w", randn({2, 2})}, {"b", zeros({2})}});
  return batch;
}

void check_every_codec(const WorkerRef& to) {
  check_echo<bool>(to, true, "true");
  check_echo<bool>(to, false, "false");
  check_integer_limits<int8_t>(to, "int8");
  check_integer_limits<uint8_t>(to, "uint8");
  check_integer_limits<int16_t>(to, "int16");
  check_integer_limits<uint16_t>(to, "uint16");
  check_integer_limits<int32_t>(to, "int32");
  check_integer_limits<uint32_t>(to, "uint32");
  check_integer_limits<int64_t>(to, "int64");
  check_integer_limits<uint64_t>(to, "uint64");
  check_float_values<float>(to, "float");
  check_float_values<double>(to, "double");

  check_echo<std::string>(to, "", "empty string");
  check_echo<std::string>(to, std::string("nul\0in\0the middle\0", 19), "string with NULs");
  std::string every_byte;
  for (int i = 0; i < 4096; ++i) every_byte.push_back(static_cast<char>(i % 256));
  check_echo<std::string>(to, every_byte, "every byte value");

  const Tensor matrix = randn({6, 10});
  const Tensor transposed = untracked::t(randn({3, 5}));
  const Tensor strided = untracked::slice(matrix, 1, 1, 9, 3);
  require(!transposed.is_contiguous() && !strided.is_contiguous(), "the non-contiguous inputs are contiguous");
  const std::vector<std::pair<Tensor, std::string>> tensors = {
      {randn({3, 4}), "float32"},
      {randn({2, 3, 4}, {.dtype = kFloat64}), "float64"},
      {from_vector<int64_t>({std::numeric_limits<int64_t>::min(), -1, 0, 1, std::numeric_limits<int64_t>::max()}),
       "int64 limits"},
      {untracked::gt(randn({5, 7}), 0.0), "bool"},
      {empty({0}), "empty"},
      {empty({3, 0, 2}, {.dtype = kFloat64}), "empty 3-d"},
      {scalar_tensor(3.25), "0-d float32"},
      {scalar_tensor(-7, {.dtype = kInt64}), "0-d int64"},
      {transposed, "transposed"},
      {strided, "sliced with a step"},
      {untracked::slice(matrix, 0, 2, 5), "sliced at an offset"},
      {untracked::select(matrix, 1, 3), "a column"},
      {untracked::expand(randn({1, 3}), {4, 3}), "expanded (stride 0)"},
      {untracked::t(untracked::gt(randn({3, 2}), 0.0)), "transposed bool"},
      {Tensor(), "undefined"},
  };
  for (const auto& [tensor, name] : tensors) {
    check_echo<Tensor>(to, tensor, "tensor " + name);
    if (tensor.defined() && tensor.numel() > 1) {
      require(rpc_sync(to, &echo<Tensor>, tensor).is_contiguous(), "tensor ", name, " came back non-contiguous");
    }
  }
  // 64 MB: checked once, with a cheap comparison of every byte.
  const Tensor large = rand({16 * 1024 * 1024});
  const Clock::time_point start = Clock::now();
  check_echo<Tensor>(to, large, "64 MB tensor");
  say("64 MB round trip through worker ", to.rank(), ": ", seconds_since(start), " s");

  check_echo<Int64List>(to, {}, "empty vector");
  check_echo<Int64List>(to, {1, -2, std::numeric_limits<int64_t>::max()}, "vector<int64>");
  check_echo<BoolList>(to, {true, false, false, true}, "vector<bool>");
  check_echo<StringList>(to, {"a", "", std::string("\0", 1)}, "vector<string>");
  check_echo<DoubleMatrix>(to, {{1.5, 2.5}, {}, {-0.0}}, "vector<vector<double>>");
  check_echo<TensorList>(to, {randn({2}), Tensor(), transposed, arange(3)}, "vector<Tensor>");
  check_echo<IntMap>(to, {}, "empty map");
  check_echo<IntMap>(to, {{"one", 1}, {"", 0}, {std::string("n\0ul", 4), -1}}, "map<string, int64>");
  check_echo<TensorMap>(to, {{"x", randn({2, 2})}, {"y", strided}}, "map<string, Tensor>");
  check_echo<StringListMap>(to, {{"k", {"v1", "v2"}}, {"e", {}}}, "map<string, vector<string>>");
  check_echo<IntStringPair>(to, {-5, "five"}, "pair<int32, string>");
  check_echo<TensorDoublePair>(to, {transposed, 0.25}, "pair<Tensor, double>");
  check_echo<Record>(to, {true, -3, 2.5, "record", randn({2, 3})}, "tuple");
  check_echo<Empty>(to, {}, "empty tuple");
  check_echo<MaybeInt>(to, std::nullopt, "empty optional");
  check_echo<MaybeInt>(to, 5, "optional<int64>");
  check_echo<MaybeTensor>(to, std::nullopt, "empty optional<Tensor>");
  check_echo<MaybeTensor>(to, transposed, "optional<Tensor>");
  check_echo<MaybeMaybeString>(to, std::optional<std::string>(), "optional<empty optional>");
  check_echo<MaybeMaybeString>(to, std::optional<std::string>("x"), "optional<optional<string>>");
  check_echo<nn::ParamDict>(to, nn::ParamDict(), "empty ParamDict");
  check_echo<nn::ParamDict>(to,
                            nn::ParamDict({{"fc1.weight", randn({3, 4})},
                                           {"fc1.bias", zeros({3})},
                                           {"bn.num_batches_tracked", scalar_tensor(3, {.dtype = kInt64})},
                                           {"mask", untracked::gt(randn({2}), 0.0)}}),
                            "ParamDict");
  check_echo<Batch>(to, make_batch(), "DISTGRAD_CODEC struct");

  const auto args =
      std::make_tuple(true, int8_t{-128}, std::numeric_limits<uint64_t>::max(), 1.5f, std::string("s\0s", 3),
                      transposed, std::vector<int32_t>{1, 2}, std::optional<double>(2.5));
  const auto back = rpc_sync(to, &mixed, true, int8_t{-128}, std::numeric_limits<uint64_t>::max(), 1.5f,
                             std::string("s\0s", 3), transposed, std::vector<int32_t>{1, 2}, 2.5);
  require(same(args, back), "mixed arguments came back different");
  const auto async_back = rpc_async(to, &echo<Batch>, make_batch()).get();
  require(async_back.name == std::string("batch\0one", 9), "rpc_async of a struct came back different");
  const int64_t touches = rpc_sync(to, &touch_count);
  rpc_sync(to, &touch);
  rpc_async(to, &touch).get();
  require(rpc_sync(to, &touch_count) == touches + 2, "void calls did not run");
  require(rpc_sync(to, &forty_two) == 42, "a call without arguments");
}

int codecs() {
  return auto_init_rpc(nullptr, rank_zero_only([] {
                         check_every_codec(get_worker_name(1));
                         check_every_codec(0);
                         say(values_checked, " values round-tripped through worker1 and worker0");
                       }),
                       test_options());
}

int fanout() {
  return auto_init_rpc(nullptr, rank_zero_only([] {
                         constexpr int kCalls = 10'000;
                         const Clock::time_point start = Clock::now();
                         std::vector<Future<int64_t>> futures;
                         futures.reserve(kCalls);
                         for (int i = 0; i < kCalls; ++i) futures.push_back(rpc_async(1, &times_two, int64_t{i}));
                         const std::vector<int64_t> values = wait_all(futures);
                         for (int i = 0; i < kCalls; ++i) {
                           require(values[i] == 2 * i, "call ", i, " returned ", values[i]);
                         }
                         const auto all = collect_all(futures).get();
                         require(all.size() == size_t{kCalls}, "collect_all lost futures");
                         say(kCalls, " async calls answered in ", seconds_since(start), " s");
                       }),
                       test_options());
}

int nested() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        const std::string path = rpc_sync(1, &hop, 2, std::string("worker0"));
        say("rpc_sync path: ", path);
        require(path == "worker0->worker1->worker2->worker0", "unexpected path ", path);
        const std::string async_path = rpc_sync(1, &hop_async, 2, std::string("worker0"), false);
        require(async_path == path, "unexpected rpc_async path ", async_path);
        // Many chains at once: every executor runs out of threads and must add some.
        std::vector<Future<std::string>> chains;
        for (int i = 0; i < 40; ++i) chains.push_back(rpc_async(1 + i % 2, &hop, 5, str("chain", i)));
        const std::vector<std::string> paths = wait_all(chains);
        for (int i = 0; i < 40; ++i) {
          require(paths[i].size() > 5 * 9 && paths[i].rfind(str("chain", i), 0) == 0, "unexpected chain ", paths[i]);
        }
        const RemoteError error = expect_remote_error("a failure 3 deep", StatusCode::kUnknown,
                                                      [] { rpc_sync(1, &hop_async, 2, std::string("worker0"), true); });
        require(error.worker() == "worker1" && error.function() == "hop_async", "the outer error names ",
                error.worker(), "/", error.function());
        require_contains(error.remote_message(), "the end of the ring at worker0->worker1->worker2",
                         "the innermost message");
        require_contains(error.remote_message(), "worker2", "the middle worker");
      }),
      test_options());
}

// Plain init_rpc (no barrier after it): rank 0 calls every other worker the moment its init_rpc
// returns, with a function that calls the next worker in turn, while they may still be finishing
// their own init_rpc (Note [Calls before init_rpc returns] in rpc/agent.h).
int early_calls() {
  init_rpc(test_options());
  if (get_rank() == 0) {
    std::vector<Future<std::string>> paths;
    for (int rank = 1; rank < get_world_size(); ++rank) paths.push_back(rpc_async(rank, &hop, 2, str("early", rank)));
    for (int rank = 1; rank < get_world_size(); ++rank) {
      const std::string path = paths[rank - 1].get();
      require(path.rfind(str("early", rank, "->", get_worker_name(rank)), 0) == 0, "unexpected path ", path);
    }
    say("early calls: every nested call found RPC running");
  }
  shutdown();
  return 0;
}

int remote_exception() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        const std::string message =
            "the original message: \xc3\xbcnic\xc3\xb6"
            "de, 100%";
        for (int to : {1, 0}) {
          const std::string worker = get_worker_name(to);
          RemoteError error =
              expect_remote_error("rpc_sync", StatusCode::kUnknown, [&] { rpc_sync(to, &raise_error, message); });
          require(error.worker() == worker, "the error names ", error.worker(), " instead of ", worker);
          require(error.function() == "raise_error", "the error names the function ", error.function());
          require(error.remote_message() == message, "the message came back as \"", error.remote_message(), "\"");
          require_contains(error.what(), "remote exception in raise_error on " + worker + ": " + message, "what()");

          error = expect_remote_error("rpc_async", StatusCode::kUnknown,
                                      [&] { rpc_async(to, &raise_error, message).get(); });
          require(error.remote_message() == message, "the async message came back as ", error.remote_message());

          error =
              expect_remote_error("DISTGRAD_CHECK", StatusCode::kUnknown, [&] { rpc_sync(to, &check_positive, -3); });
          require_contains(error.remote_message(), "check_positive: expected a positive number, found -3", "message");

          error = expect_remote_error("a long message", StatusCode::kUnknown,
                                      [&] { rpc_sync(to, &raise_error, std::string(100'000, 'x')); });
          require(error.remote_message().size() < 5000, "a 100 KB message came back whole");
          require_contains(error.remote_message(), "[truncated]", "a long message");

          // Non-ASCII bytes take 3 bytes each in the trailers: the cut must account for that.
          std::string umlauts;
          for (int i = 0; i < 50'000; ++i) umlauts += "\xc3\xbc";
          error = expect_remote_error("a long non-ASCII message", StatusCode::kUnknown,
                                      [&] { rpc_sync(to, &raise_error, umlauts); });
          const std::string kept = error.remote_message().substr(0, error.remote_message().find(" [truncated]"));
          require(!kept.empty() && kept.size() < error.remote_message().size() && kept.size() % 2 == 0 &&
                      umlauts.compare(0, kept.size(), kept) == 0,
                  "a long non-ASCII message came back as ", kept.size(), " bytes of ", error.remote_message().size());

          error = expect_remote_error("not a std::exception", StatusCode::kUnknown,
                                      [&] { rpc_sync(to, &throw_non_standard); });
          require_contains(error.remote_message(), "throw_non_standard", "a non-standard exception");

          require(rpc_sync(to, &check_positive, 3) == 3, "the worker stopped answering after errors");
        }
      }),
      test_options());
}

int unknown_function() {
  return auto_init_rpc(nullptr, rank_zero_only([] {
                         for (int to : {1, 0}) {
                           const std::string worker = get_worker_name(to);
                           RemoteError error = expect_remote_error("call_sync", StatusCode::kNotFound, [&] {
                             agent().call_sync(to, OutgoingCall{"no_such_function", 0, {}}, 10s);
                           });
                           require_contains(error.what(), "no_such_function", "the message");
                           require_contains(error.what(), worker, "the message");
                           require(error.worker() == worker && error.function() == "no_such_function",
                                   "the error names ", error.worker(), "/", error.function());
                           error = expect_remote_error("call_async", StatusCode::kNotFound, [&] {
                             agent().call_async(to, OutgoingCall{"no_such_function", 0, {}}, 10s).get();
                           });
                           require_contains(error.what(), "no_such_function", "the async message");
                         }
                       }),
                       test_options());
}

// Calls `function` on worker1 with a hand-encoded payload of `num_arguments`; it must fail with
// INVALID_ARGUMENT and a message holding every fragment.
void check_invalid_arguments(const std::string& what, const std::string& function, uint32_t num_arguments, Encoder& out,
                             const std::vector<std::string>& fragments) {
  OutgoingCall call{function, num_arguments, {out.bytes(), out.tensors()}};
  const RemoteError error =
      expect_remote_error(what, StatusCode::kInvalidArgument, [&] { agent().call_sync(1, std::move(call), 10s); });
  require_contains(error.what(), "worker1", what);
  for (const std::string& fragment : fragments) require_contains(error.remote_message(), fragment, what);
}

int bad_arguments() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        {
          Encoder out;
          Codec<std::string>::encode(out, "seven");
          Codec<int64_t>::encode(out, 2);
          check_invalid_arguments("a string for an int", "add_ints", 2, out,
                                  {"add_ints", "argument 0 (int64)", "expected int64, found a string"});
        }
        {
          Encoder out;
          Codec<int64_t>::encode(out, 1);
          Codec<double>::encode(out, 2.0);
          check_invalid_arguments("a double for an int", "add_ints", 2, out,
                                  {"add_ints", "argument 1 (int64)", "found a floating-point number"});
        }
        {
          Encoder out;
          Codec<int64_t>::encode(out, 1);
          check_invalid_arguments("one argument of two", "add_ints", 1, out,
                                  {"add_ints", "expected 2 arguments, the call has 1"});
          check_invalid_arguments("two announced, one sent", "add_ints", 2, out,
                                  {"add_ints", "argument 1 (int64)", "truncated payload"});
        }
        {
          Encoder out;
          for (int64_t value : {1, 2, 3}) Codec<int64_t>::encode(out, value);
          check_invalid_arguments("three arguments of two", "add_ints", 3, out,
                                  {"add_ints", "expected 2 arguments, the call has 3"});
          check_invalid_arguments("bytes after the arguments", "add_ints", 2, out,
                                  {"add_ints", "bytes follow the last argument"});
        }
        {
          Encoder out;
          Codec<int64_t>::encode(out, 300);
          Codec<int64_t>::encode(out, 1);
          check_invalid_arguments("out of range", "add_small", 2, out,
                                  {"add_small", "argument 0 (int8)", "value 300 does not fit in int8"});
        }
        {
          Encoder out;
          out.put_tag(WireTag::kTensor);
          out.put_u32(5);
          check_invalid_arguments("a tensor index past the tensors", "echo_tensor", 1, out,
                                  {"echo_tensor", "argument 0 (Tensor)", "tensor index 5 is out of range"});
        }
        {
          Encoder out;
          Codec<std::vector<std::string>>::encode(out, {"a", "b"});
          check_invalid_arguments("a vector of the wrong elements", "count_elements", 1, out,
                                  {"count_elements", "argument 0 (vector<int64>)", "element 0"});
        }
        // A result that does not decode as the caller's type is the caller's INTERNAL error.
        Encoder out;
        Codec<int64_t>::encode(out, 2);
        Codec<int64_t>::encode(out, 3);
        const Encoded reply = agent().call_sync(1, OutgoingCall{"add_ints", 2, {out.bytes(), out.tensors()}}, 10s);
        expect_remote_error("a result of another type", StatusCode::kInternal,
                            [&] { detail::decode_result<std::string>("add_ints", "worker1", reply); });
        require(rpc_sync(1, &add_ints, 2, 3) == 5, "worker1 stopped answering");
      }),
      test_options());
}

// For self_calls: adds one to its argument in place and returns its sum; calls itself once more
// when `depth` > 0.
double add_one_and_sum(Tensor x, int64_t depth) {
  untracked::add_(x, 1.0);
  if (depth > 0) rpc_sync(get_rank(), &add_one_and_sum, x, depth - 1);
  return untracked::sum(x).item<double>();
}
DISTGRAD_REMOTE(add_one_and_sum);

// Rank 0 calls itself (Note [Calls to oneself] in rpc/loopback.h): blocking, asynchronous and
// nested calls get their answers, each callee has its own arguments (the caller's tensors, small
// ones in the frame and large ones in shared memory, are left alone), deadlines hold, and the calls
// skip the socket unless a fast path is off.
int self_calls() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        const bool loopback = testing::loopback_on();
        const TransportStats before = transport_stats();
        for (const int64_t n : {int64_t{16}, int64_t{1} << 18}) {
          const Tensor x = zeros({n});
          const auto expected = static_cast<double>(n);
          require(rpc_sync(0, &add_one_and_sum, x, int64_t{0}) == expected, "a blocking call to itself");
          require(rpc_async(0, &add_one_and_sum, x, int64_t{0}).get() == expected, "an asynchronous call to itself");
          require(rpc_sync(0, &add_one_and_sum, x, int64_t{2}) == expected, "a nested call to itself");
          require(untracked::sum(x).item<double>() == 0, "a call to itself changed the caller's tensor of ", n,
                  " elements");
        }
        const Clock::time_point start = Clock::now();
        expect_remote_error("a blocking call to itself past its deadline", StatusCode::kDeadlineExceeded,
                            [] { rpc_sync_with_timeout(0, 200ms, &sleep_then_return, int64_t{3000}); });
        expect_remote_error("an asynchronous call to itself past its deadline", StatusCode::kDeadlineExceeded,
                            [] { rpc_async_with_timeout(0, 200ms, &sleep_then_return, int64_t{3000}).get(); });
        require(seconds_since(start) < 2.5, "two 200 ms deadlines took ", seconds_since(start), " s");
        const TransportStats after = transport_stats();
        const uint64_t in_process = after.in_process_calls - before.in_process_calls;
        const uint64_t on_socket = after.socket_calls - before.socket_calls;
        say("calls to itself: ", in_process, " in the process, ", on_socket, " on a socket");
        // 2 sizes x (1 + 1 + 3 nested) calls, and the two past their deadline.
        require(in_process == (loopback ? 12u : 0u), "expected ", loopback ? 12 : 0, " calls in the process, found ",
                in_process);
        require(!loopback || on_socket == 0, on_socket, " calls to itself took the socket");
      }),
      test_options());
}

int timeouts() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        auto bounded = [](const std::string& what, const std::function<void()>& call) {
          const Clock::time_point start = Clock::now();
          const RemoteError error = expect_remote_error(what, StatusCode::kDeadlineExceeded, call);
          const double took = seconds_since(start);
          say(what, " failed after ", took, " s");
          require(took >= 0.15 && took < 2, what, ": a 200 ms deadline took ", took, " s");
          require(error.worker() == "worker1" && error.function() == "sleep_then_return", what, ": the error names ",
                  error.worker(), "/", error.function());
        };
        bounded("rpc_sync_with_timeout", [] { rpc_sync_with_timeout(1, 200ms, &sleep_then_return, int64_t{3000}); });
        bounded("rpc_async_with_timeout",
                [] { rpc_async_with_timeout(1, 200ms, &sleep_then_return, int64_t{3000}).get(); });
        set_default_timeout(200ms);
        bounded("the default timeout", [] { rpc_sync(1, &sleep_then_return, int64_t{3000}); });
        set_default_timeout(60s);
        require(rpc_sync_with_timeout(1, 0ms, &sleep_then_return, int64_t{300}) == 300, "a call without deadline");
        require(rpc_sync(1, &sleep_then_return, int64_t{1}) == 1, "worker1 stopped answering");
      }),
      test_options());
}

int peer_killed() {
  init_rpc(test_options());
  if (get_rank() != 0) {
    shutdown(true);  // serves until the call that kills this process
    return 0;
  }
  std::vector<Future<int64_t>> in_flight;
  for (int i = 0; i < 4; ++i) in_flight.push_back(rpc_async_with_timeout(1, 20s, &sleep_then_return, int64_t{15'000}));
  const Clock::time_point start = Clock::now();
  try {
    rpc_sync_with_timeout(1, 20s, &die);
    throw Failure("the call of die() returned");
  } catch (const RemoteError& error) {
    say("the killed peer's call failed after ", seconds_since(start), " s with ", status_code_name(error.code()), ": ",
        error.what());
    require(error.code() != StatusCode::kDeadlineExceeded, "the caller waited for the deadline");
    require(error.worker() == "worker1" && error.function() == "die", "the error names ", error.worker(), "/",
            error.function());
  }
  require(seconds_since(start) < 10, "the error took ", seconds_since(start), " s");
  for (const Future<int64_t>& future : in_flight) {
    require(future.wait_for(10s), "a call in flight to the killed peer did not complete");
    require(future.error() != nullptr, "a call in flight to the killed peer succeeded");
  }
  const Clock::time_point again = Clock::now();
  expect_remote_error("a call to the dead peer", StatusCode::kUnavailable,
                      [] { rpc_sync_with_timeout(1, 20s, &forty_two); });
  require(seconds_since(again) < 10, "a call to the dead peer took ", seconds_since(again), " s");
  shutdown(false);
  say("stopped without waiting for the dead peer");
  return 0;
}

int dead_at_shutdown() {
  init_rpc(test_options());
  barrier();
  if (get_rank() != 0) {
    say("exiting without shutdown");
    ::_exit(0);
  }
  const Clock::time_point start = Clock::now();
  const std::string message = expect_error("graceful shutdown", [] { shutdown(true); });
  require_contains(message, "worker1", "the shutdown error");
  require_contains(message, "shutdown", "the shutdown error");
  require(seconds_since(start) < 30, "the dead worker was found after ", seconds_since(start), " s");
  require(is_initialized(), "a failed graceful shutdown stopped the agent");
  shutdown(false);
  require(!is_initialized(), "shutdown(false) left the agent running");
  return 0;
}

// worker1 stops itself (SIGSTOP: a frozen process, or a hung machine) once every rank is up: a
// call to it fails at its deadline, and the driver's graceful shutdown fails within the liveness
// timeout naming it, instead of waiting for it for good. The driver then kills it.
int frozen_at_shutdown() {
  RpcOptions options = test_options();
  options.liveness_timeout = 2s;
  init_rpc(options);
  barrier();
  if (get_rank() != 0) {
    agent().store().set("test/frozen_pid", std::to_string(::getpid()));
    ::raise(SIGSTOP);
    return 0;
  }
  const auto frozen = static_cast<pid_t>(std::stoll(agent().store().get("test/frozen_pid", 30s)));
  std::this_thread::sleep_for(200ms);  // worker1 stops meanwhile
  const Clock::time_point call_start = Clock::now();
  expect_remote_error("a call to the frozen worker", StatusCode::kDeadlineExceeded,
                      [] { rpc_sync_with_timeout(1, 1s, &forty_two); });
  require(seconds_since(call_start) < 3, "a call of 1 s to the frozen worker took ", seconds_since(call_start), " s");
  const Clock::time_point start = Clock::now();
  const std::string message = expect_error("graceful shutdown", [] { shutdown(true); });
  require_contains(message, "worker1 did not answer within 2000 ms", "the shutdown error");
  require_contains(message, "waited for it to reach shutdown", "the shutdown error");
  require(seconds_since(start) < 10, "the frozen worker was found after ", seconds_since(start), " s");
  say("frozen worker at shutdown: ", message);
  ::kill(frozen, SIGKILL);
  shutdown(false);
  return 0;
}

int barrier_timeout() {
  init_rpc(test_options());
  const std::string done_key = "test/barrier_failed";
  if (get_rank() == 0) {
    const Clock::time_point start = Clock::now();
    const std::string message = expect_error("barrier", [] { barrier(500ms); });
    require_contains(message, "barrier", "the barrier error");
    require_contains(message, "workers 1 (of 2) did not arrive", "the barrier error");
    require(seconds_since(start) >= 0.45 && seconds_since(start) < 5, "a 500 ms barrier took ", seconds_since(start),
            " s");
    agent().store().set(done_key, "1");
  } else {
    agent().store().get(done_key, 60s);
  }
  shutdown(true);
  return 0;
}

int security_token() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        const char* token = std::getenv("DISTGRAD_TOKEN");
        require(token != nullptr && *token != '\0', "DISTGRAD_TOKEN is not set");
        const std::unique_ptr<grpc::GenericStub> stub = raw_stub(1);
        const std::string frame = add_ints_frame(20, 22);
        grpc::ByteBuffer response;
        const std::string wrong = std::string(token) + "x";
        std::string flipped = token;
        flipped.back() = static_cast<char>(flipped.back() ^ 1);
        for (const auto& [name, sent] :
             std::vector<std::pair<std::string, std::optional<std::string>>>{{"no token", std::nullopt},
                                                                             {"an empty token", ""},
                                                                             {"a longer token", wrong},
                                                                             {"a wrong token", flipped}}) {
          const grpc::Status status = raw_call(*stub, frame, sent, &response);
          say(name, ": ", status_code_name(static_cast<StatusCode>(status.error_code())), ": ", status.error_message());
          require_status(status, grpc::StatusCode::UNAUTHENTICATED, name);
          require_contains(status.error_message(), "worker1", name);
          require_contains(status.error_message(), "DISTGRAD_TOKEN", name);
        }
        const grpc::Status other =
            raw_call(*stub, frame, std::string(token), &response, "/distgrad.rpc.wire.Worker/Other");
        require_status(other, grpc::StatusCode::UNIMPLEMENTED, "another method of the service");
        require_contains(other.error_message(),
                         "worker1 serves /distgrad.rpc.wire.Worker/Call only, not "
                         "/distgrad.rpc.wire.Worker/Other",
                         "another method");
        const grpc::Status status = raw_call(*stub, frame, std::string(token), &response);
        require_status(status, grpc::StatusCode::OK, "the right token");
        wire::ReplyHeader header;
        const DecodedFrame reply = decode_frame(response, header);
        Decoder in(reply.payload, reply.tensors);
        require(Codec<int64_t>::decode(in) == 42, "the raw call returned another sum");
        // The Store refuses a wrong token too.
        const rendezvous::WorldInfo& world = rendezvous::world_info();
        rendezvous::StoreClient intruder(world.master_addr + ":" + std::to_string(world.master_port), wrong, 5s);
        require_contains(
            expect_error("the store with a wrong token", [&] { intruder.get(testing::rendezvous_entry_key(1)); }),
            "refused the job token", "the store");
        require(rpc_sync(1, &add_ints, 1, 2) == 3, "calls through the agent carry the token");
      }),
      test_options());
}

// This process's peak resident memory, in bytes.
int64_t peak_memory_bytes() { return testing::memory_status_bytes("VmHWM"); }
DISTGRAD_REMOTE(peak_memory_bytes);

// A 256 MB call with a wrong token is refused before its message is read (Note [Token before the
// message] in rpc/call_server.h): the worker's peak memory does not grow by the message.
int big_call_with_a_wrong_token() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        const std::string wrong = std::string(std::getenv("DISTGRAD_TOKEN")) + "x";
        const std::unique_ptr<grpc::GenericStub> stub = raw_stub(1);
        const int64_t before = rpc_sync(1, &peak_memory_bytes);
        grpc::ByteBuffer response;
        const grpc::Status status = raw_call(*stub, std::string(size_t{256} << 20, 'x'), wrong, &response);
        require_status(status, grpc::StatusCode::UNAUTHENTICATED, "a 256 MB call with a wrong token");
        const int64_t grown = rpc_sync(1, &peak_memory_bytes) - before;
        say("a 256 MB call with a wrong token: refused, worker1's peak memory grew by ", grown >> 20, " MB");
        require(grown < (int64_t{64} << 20), "worker1's peak memory grew by ", grown >> 20,
                " MB for a call it refused");
      }),
      test_options());
}

// Sends a 256 MB Set with a wrong token to the job's Store; returns the status's code.
int write_a_big_value_to_the_store_with_a_wrong_token() {
  const rendezvous::WorldInfo& world = rendezvous::world_info();
  grpc::GenericStub store(grpc::CreateChannel(world.master_addr + ":" + std::to_string(world.master_port),
                                              grpc::InsecureChannelCredentials()));
  const std::string wrong = std::string(std::getenv("DISTGRAD_TOKEN")) + "x";
  grpc::ByteBuffer response;
  const grpc::Status status =
      raw_call(store, std::string(size_t{256} << 20, 'x'), wrong, &response, "/distgrad.rendezvous.wire.Store/Set");
  return static_cast<int>(status.error_code());
}
DISTGRAD_REMOTE(write_a_big_value_to_the_store_with_a_wrong_token);

// The same for the Store, which rank 0 hosts (Note [Store token before the message] in
// rendezvous/store.cc): worker1 writes 256 MB with a wrong token; rank 0's peak memory stays.
int big_store_write_with_a_wrong_token() {
  return auto_init_rpc(nullptr, rank_zero_only([] {
                         const int64_t before = peak_memory_bytes();
                         const int code = rpc_sync(1, &write_a_big_value_to_the_store_with_a_wrong_token);
                         require_status(grpc::Status(static_cast<grpc::StatusCode>(code), ""),
                                        grpc::StatusCode::UNAUTHENTICATED, "a 256 MB store write with a wrong token");
                         const int64_t grown = peak_memory_bytes() - before;
                         say("a 256 MB store write with a wrong token: refused, the store host's peak memory grew by ",
                             grown >> 20, " MB");
                         require(grown < (int64_t{64} << 20), "the store host's peak memory grew by ", grown >> 20,
                                 " MB for a write it refused");
                       }),
                       test_options());
}

std::string text_of_size(int64_t bytes) { return std::string(static_cast<size_t>(bytes), 'x'); }
DISTGRAD_REMOTE(text_of_size);
int64_t size_of_text(std::string text) { return static_cast<int64_t>(text.size()); }
DISTGRAD_REMOTE(size_of_text);

// Run with DISTGRAD_MAX_MESSAGE_BYTES=1048576: a 2 MB request and a 2 MB reply each fail their call
// with RESOURCE_EXHAUSTED naming the limit, and the next calls go through.
int message_size_limit() {
  return auto_init_rpc(nullptr, rank_zero_only([] {
                         constexpr int64_t kBig = int64_t{2} << 20;
                         for (int round = 0; round < 2; ++round) {
                           const std::string request =
                               expect_error("a 2 MB request", [&] { rpc_sync(1, &size_of_text, text_of_size(kBig)); });
                           require_contains(request, "RESOURCE_EXHAUSTED", "a 2 MB request");
                           require_contains(request, "RpcOptions::max_message_bytes", "a 2 MB request");
                           const std::string reply =
                               expect_error("a 2 MB reply", [&] { rpc_sync(1, &text_of_size, kBig); });
                           require_contains(reply, "RESOURCE_EXHAUSTED", "a 2 MB reply");
                           require(rpc_sync(1, &size_of_text, text_of_size(1000)) == 1000, "a small request");
                           require(rpc_sync(1, &text_of_size, 1000).size() == 1000, "a small reply");
                         }
                         say("messages over the limit refused: ",
                             expect_error("a 2 MB request", [&] { rpc_sync(1, &size_of_text, text_of_size(kBig)); }));
                       }),
                       test_options());
}

int insecure_refused() {
  const std::string message = expect_error("init_rpc", [] { init_rpc(test_options()); });
  require_contains(message, "is not a loopback address and no job token is set", "the refusal");
  require_contains(message, "DISTGRAD_TOKEN", "the refusal");
  require_contains(message, "DISTGRAD_INSECURE=1", "the refusal");
  require(!is_initialized(), "a refused init_rpc left RPC running");
  return 0;
}

int simple_call() {
  return auto_init_rpc(nullptr, rank_zero_only([] {
                         say("MASTER_ADDR=", rendezvous::world_info().master_addr);
                         require(rpc_sync(1, &add_ints, 40, 2) == 42, "add_ints on worker1");
                         require(rpc_sync(0, &add_ints, 1, 2) == 3, "add_ints on worker0");
                       }),
                       test_options());
}

int garbage_frames() {
  return auto_init_rpc(
      nullptr, rank_zero_only([] {
        const std::unique_ptr<grpc::GenericStub> stub = raw_stub(1);
        int refused = 0;
        auto expect_refused = [&](const std::string& what, const std::string& bytes,
                                  grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT) {
          grpc::ByteBuffer response;
          const grpc::Status status = raw_call(*stub, bytes, std::nullopt, &response);
          require_status(status, code, what);
          require(status.error_message().size() < 5000, what, ": a status message of ", status.error_message().size(),
                  " bytes");
          ++refused;
        };
        expect_refused("an empty message", "");
        for (size_t size : {1, 2, 3})
          expect_refused("a message of " + std::to_string(size) + " bytes", std::string(size, '\x7f'));
        std::mt19937 random(1234);
        for (int i = 0; i < 200; ++i) {
          std::string bytes(random() % (i < 100 ? 64 : 8192), '\0');
          for (char& byte : bytes) byte = static_cast<char>(random());
          expect_refused(str("random message ", i, " of ", bytes.size(), " bytes"), bytes);
        }
        // Every prefix of a small call, and of a call with a tensor (through its bytes).
        const std::string small = add_ints_frame(1, 2);
        for (size_t size = 0; size < small.size(); ++size) {
          expect_refused(str("add_ints truncated to ", size, " of ", small.size()), small.substr(0, size));
        }
        const std::string with_tensor = echo_tensor_frame(rand({1000}));
        for (size_t size = 0; size < with_tensor.size(); size += 37) {
          expect_refused(str("echo_tensor truncated to ", size, " of ", with_tensor.size()),
                         with_tensor.substr(0, size));
        }
        expect_refused("a tensor frame with trailing bytes", with_tensor + "junk");
        // Headers that claim more than the message holds.
        for (uint32_t size : {0xffffffffu, 0x7fffffffu, 1u << 20}) {
          std::string bytes(reinterpret_cast<const char*>(&size), sizeof size);
          bytes +=
              "\x0a\x03"
              "abc";
          expect_refused(str("a header length of ", size), bytes);
        }
        Encoder out;
        Codec<int64_t>::encode(out, 1);
        Codec<int64_t>::encode(out, 2);
        wire::CallHeader header = call_header("add_ints", 2, out.bytes());
        header.set_payload_bytes(uint64_t{1} << 62);
        expect_refused("a payload of 2^62 bytes", frame_bytes(header, out.bytes()));
        auto tensor_header = [&](int32_t dtype, std::vector<int64_t> sizes, uint64_t nbytes, int32_t device = 0) {
          Encoder tensor_out;
          tensor_out.put_tag(WireTag::kTensor);
          tensor_out.put_u32(0);
          wire::CallHeader h = call_header("echo_tensor", 1, tensor_out.bytes());
          wire::TensorMeta* meta = h.add_tensors();
          meta->set_dtype(dtype);
          for (int64_t size : sizes) meta->add_sizes(size);
          meta->set_device_type(device);
          meta->set_nbytes(nbytes);
          return frame_bytes(h, tensor_out.bytes(), std::string(64, '\1'));
        };
        expect_refused("a tensor of 2^60 bytes", tensor_header(0, {int64_t{1} << 58}, uint64_t{1} << 60));
        expect_refused("a shape that overflows", tensor_header(0, {int64_t{1} << 40, int64_t{1} << 40}, 0));
        expect_refused("a negative size", tensor_header(0, {-16}, 64));
        expect_refused("a size that does not match its bytes", tensor_header(0, {3}, 64));
        expect_refused("an unknown dtype", tensor_header(99, {16}, 64));
        expect_refused("an unknown device", tensor_header(0, {16}, 64, 7));
        if (!cuda::is_available()) expect_refused("a CUDA tensor on a CPU worker", tensor_header(0, {16}, 64, 1));
        expect_refused("a bad payload", frame_bytes(call_header("add_ints", 2, "\x02garbage"), "\x02garbage"));
        expect_refused("4 billion arguments", frame_bytes(call_header("forty_two", 0xffffffffu, ""), ""));
        expect_refused("a function name of 100 KB", frame_bytes(call_header(std::string(100'000, '\xff'), 0, ""), ""),
                       grpc::StatusCode::NOT_FOUND);
        say(refused, " malformed calls refused");
        require(rpc_sync(1, &add_ints, 2, 3) == 5, "worker1 stopped answering");
      }),
      test_options());
}

int shutdown_in_flight() {
  init_rpc(test_options());
  constexpr int kCalls = 200;
  const int to = (get_rank() + 1) % get_world_size();
  std::vector<Future<int64_t>> futures;
  for (int i = 0; i < kCalls; ++i) futures.push_back(rpc_async(to, &sleep_then_echo, int64_t{50}, int64_t{i}));
  const Clock::time_point start = Clock::now();
  shutdown(true);
  say("graceful shutdown with ", kCalls, " calls in flight took ", seconds_since(start), " s");
  for (int i = 0; i < kCalls; ++i) {
    require(futures[i].is_ready(), "call ", i, " was still in flight after shutdown");
    require(futures[i].get() == i, "call ", i, " returned ", futures[i].get());
  }
  return 0;
}

// The agent carries each interceptor's bytes, and runs it with the call's peer, function and
// tensors on both sides; on_request's scope lasts while the function runs.
int interceptors() {
  RpcOptions options = test_options();
  options.interceptors.push_back(std::make_shared<RecordingInterceptor>());
  start_agent(options);
  barrier();
  if (get_rank() == 0) {
    const auto [a, b, context] = rpc_sync(1, &hooked, std::vector<Tensor>{ones({2}), ones({2}), ones({2})});
    require(same_tensor(a, full({2}, 3.0)) && same_tensor(b, a), "hooked returned the wrong sums");
    require(context == request_context(0), "worker1 ran hooked in context ", context, ", expected ",
            request_context(0));
    SeenRecord reply;
    uint64_t request_message = 0;
    {
      std::lock_guard<std::mutex> lock(seen_mutex);
      require(replies_seen.size() == 1, replies_seen.size(), " replies seen");
      reply = record_of(replies_seen[0]);
      require(requests_sent.size() == 1 && requests_sent[0].peer == 1 && requests_sent[0].tensors == 3,
              "before_request saw ", requests_sent.size(), " requests");
      request_message = requests_sent[0].ids.message_id;
    }
    require(std::get<0>(reply) == 1 && std::get<1>(reply) == 2 && std::get<2>(reply) == reply_context(1) &&
                std::get<3>(reply) != 0,
            "the reply arrived as peer ", std::get<0>(reply), ", ", std::get<1>(reply), " tensors, ids ",
            std::get<2>(reply), "/", std::get<3>(reply));
    const std::vector<SeenRecord> received = rpc_sync(1, &requests_received);
    require(!received.empty(), "worker1 saw no requests");
    const SeenRecord expected{0, 3, request_context(0), request_message};
    require(received.front() == expected, "worker1 saw the request as peer ", std::get<0>(received.front()), ", ",
            std::get<1>(received.front()), " tensors, ids ", std::get<2>(received.front()), "/",
            std::get<3>(received.front()));
    // The other way: worker1 calls worker0.
    const SeenRecord back = rpc_sync(1, &call_back_hooked);
    require(std::get<0>(back) == 0 && std::get<1>(back) == 2 && std::get<2>(back) == reply_context(0),
            "worker1 saw worker0's reply as peer ", std::get<0>(back), ", ", std::get<1>(back), " tensors, context ",
            std::get<2>(back));
    {
      std::lock_guard<std::mutex> lock(seen_mutex);
      const bool from_worker1 = std::any_of(requests_seen.begin(), requests_seen.end(), [](const Seen& seen) {
        return seen.peer == 1 && seen.tensors == 1 && seen.ids.context_id == request_context(1) &&
               seen.ids.message_id != 0;
      });
      require(from_worker1, "worker0 never saw worker1's request with its ids");
    }
    say("ids and tensor counts arrived on both sides");
  }
  shutdown(true);
  return 0;
}

// Rank 0 runs the recording interceptor, rank 1 none: rank 1 refuses rank 0's calls, naming it.
int interceptor_missing_on_the_callee() {
  RpcOptions options = test_options();
  if (get_rank() == 0) options.interceptors.push_back(std::make_shared<RecordingInterceptor>());
  start_agent(options);
  barrier();
  if (get_rank() == 0) {
    const RemoteError error =
        expect_remote_error("a call with bytes for an interceptor worker1 lacks", StatusCode::kFailedPrecondition,
                            [] { rpc_sync(1, &hooked, std::vector<Tensor>{ones({2})}); });
    say("refused: ", error.what());
  }
  shutdown(true);
  return 0;
}

int device_maps() {
  RpcOptions options = test_options();
  options.device_maps["worker1"] = {{Device::cuda(0), Device::cuda(0)}};
  return auto_init_rpc(nullptr, rank_zero_only([] {
                         require(cuda::is_available(), "device_maps needs CUDA");
                         const Tensor x = randn({4, 5}, {.device = Device::cuda(0)});
                         require(rpc_sync(1, &device_of, x) == "cuda:0", "the mapped tensor did not arrive on cuda:0");
                         const Tensor back = rpc_sync(1, &echo<Tensor>, x);
                         require(back.device() == Device::cuda(0), "the result came back on ", back.device().str());
                         require(same_tensor(back, x), "the result came back different");
                         require(rpc_sync(0, &device_of, x) == "cuda:0", "a call to itself moved a CUDA tensor");
                         require(rpc_sync(2, &device_of, x) == "cpu", "an unmapped CUDA tensor did not go to the CPU");
                         require(rpc_sync(1, &device_of, randn({2})) == "cpu", "a CPU tensor left the CPU");
                       }),
                       options);
}

// With DISTGRAD_TLS_* set: calls work, and a plaintext client cannot talk to a worker.
int tls() {
  return auto_init_rpc(nullptr, rank_zero_only([] {
                         require(rpc_sync(1, &add_ints, int64_t{20}, int64_t{22}) == 42, "a call over TLS failed");
                         const std::unique_ptr<grpc::GenericStub> plaintext = raw_stub(1);
                         grpc::ByteBuffer response;
                         const char* token = std::getenv("DISTGRAD_TOKEN");
                         const grpc::Status status =
                             raw_call(*plaintext, add_ints_frame(1, 2),
                                      token != nullptr ? std::optional<std::string>(token) : std::nullopt, &response);
                         require(!status.ok(), "a plaintext client was answered by a TLS worker");
                         say("plaintext client: ", status_code_name(static_cast<StatusCode>(status.error_code())));
                       }));
}

const std::map<std::string, std::function<int()>>& scenarios() {
  static const auto* table = new std::map<std::string, std::function<int()>>{
      {"rendezvous", rendezvous},
      {"codecs", codecs},
      {"self_calls", self_calls},
      {"fanout", fanout},
      {"nested", nested},
      {"early_calls", early_calls},
      {"remote_exception", remote_exception},
      {"unknown_function", unknown_function},
      {"bad_arguments", bad_arguments},
      {"timeouts", timeouts},
      {"peer_killed", peer_killed},
      {"dead_at_shutdown", dead_at_shutdown},
      {"barrier_timeout", barrier_timeout},
      {"security_token", security_token},
      {"insecure_refused", insecure_refused},
      {"simple_call", simple_call},
      {"garbage_frames", garbage_frames},
      {"shutdown_in_flight", shutdown_in_flight},
      {"frozen_at_shutdown", frozen_at_shutdown},
      {"big_call_with_a_wrong_token", big_call_with_a_wrong_token},
      {"big_store_write_with_a_wrong_token", big_store_write_with_a_wrong_token},
      {"message_size_limit", message_size_limit},
      {"interceptors", interceptors},
      {"interceptor_missing_on_the_callee", interceptor_missing_on_the_callee},
      {"device_maps", device_maps},
      {"tls", tls},
  };
  return *table;
}

}  // namespace
}  // namespace distgrad::rpc

int main(int argc, char** argv) {
  return distgrad::rpc::testing::scenario_main(argc, argv, distgrad::rpc::scenarios());
}
