// The worker of the distributed autograd tests: `dist_autograd_worker SCENARIO`, run as every rank
// of a world by tests/dist_autograd/dist_autograd_test.cc (through tests/rpc/multiprocess.h). It
// holds the registered functions the scenarios call and the scenarios themselves. A scenario's
// driver (rank 0, or ranks 0 and 1) runs computations across the workers inside distributed
// autograd contexts and checks every gradient, on the driver (.grad(), get_gradients) and on the
// workers (their leaves' gradients in the context, fetched through an RPC), against the same
// computation done here in one process with the local engine, in float64. Each scenario ends by
// requiring that no rank holds a context any more. A failed check ends the driver with
// "[workerN] error: ..." and a non-zero code.
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/creation.h"
#include "core/ops.h"
#include "core/random.h"
#include "dist_autograd/dist_autograd.h"
#include "dist_autograd/init_rpc.h"
#include "rpc/rpc.h"
#include "tests/rpc/scenario.h"

namespace distgrad::autograd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using rpc::get_rank;
using rpc::get_worker_name;
using rpc::get_world_size;
using rpc::RemoteError;
using rpc::rpc_async;
using rpc::rpc_sync;

constexpr int kWorldSize = 4;
// How long a released context may take to disappear from every worker (release is asynchronous).
constexpr auto kReleaseTimeout = 10s;
// Tolerances of the comparisons with the local reference (float64, the same ops in the same order;
// only the order of sums across workers may differ).
constexpr double kRtol = 1e-12;
constexpr double kAtol = 1e-12;

using rpc::testing::expect_error;
using rpc::testing::Failure;
using rpc::testing::require;
using rpc::testing::require_contains;
using rpc::testing::say;
using rpc::testing::seconds_since;
using rpc::testing::str;

// Requires `found` (a distributed gradient) to match `expected` (the local reference).
void require_close(const std::string& what, const Tensor& found, const Tensor& expected) {
  require(expected.defined(), what, ": the local reference has no gradient");
  require(found.defined(), what, ": no gradient, expected ", expected);
  require(found.dtype() == kFloat64 && found.sizes() == expected.sizes(), what, ": a ", found.describe(),
          ", expected a ", expected.describe());
  require(untracked::allclose(found, expected, kRtol, kAtol), what, ": found\n", found, "\nexpected\n", expected);
}

// Runs `call`, which must throw a RemoteError; returns it.
template <typename F>
RemoteError expect_remote_error(const std::string& what, F&& call) {
  try {
    call();
  } catch (const RemoteError& error) {
    say(what, ": ", error.what());
    return error;
  }
  throw Failure(what + ": expected a RemoteError, there was none");
}

rpc::RpcOptions test_options() {
  rpc::RpcOptions options;
  options.init_timeout = 60s;
  options.timeout = 30s;
  return options;
}

// ---------------------------------------------------------------------------------------------
// Tensors and the local reference.

// A float64 leaf that requires grad.
Tensor leaf(const Shape& sizes, Generator& generator) {
  return randn(sizes, {.dtype = kFloat64, .requires_grad = true}, generator);
}

// A leaf of the local reference: a copy of `t`'s values that requires grad.
Tensor copy_leaf(const Tensor& t) {
  Tensor copy = untracked::clone(t.detach());
  copy.requires_grad_();
  return copy;
}

// The local engine's gradients of `loss` with respect to `inputs` (undefined for unused ones).
TensorList reference_grads(const Tensor& loss, const TensorList& inputs) {
  return autograd::grad({loss}, inputs, {.allow_unused = true});
}

// The leaf every rank holds: a parameter that requires grad, with values that depend on the rank.
const Tensor& worker_param() {
  static const Tensor param = [] {
    std::vector<double> values(9);
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5 + 0.1 * static_cast<double>(i) + 0.25 * get_rank();
    Tensor t = from_vector(values, {3, 3});
    t.requires_grad_();
    return t;
  }();
  return param;
}

// ---------------------------------------------------------------------------------------------
// The computations, written once: the registered functions run them on the workers, the local
// reference runs them here.

// One hop of a chain, with the parameter of the worker it runs on.
Tensor hop_math(const Tensor& x, const Tensor& param, int64_t step) {
  return tanh(x * param + 0.1 * static_cast<double>(step)) + x * 0.5;
}

Tensor param_math(const Tensor& x, const Tensor& param) { return tanh(x * param) + param * param; }

Tensor nested_inner_math(const Tensor& u, const Tensor& a, const Tensor& param) { return sin(u) * a + param; }

// `inner(u, a)` is the call of nested_inner on another worker (or its local twin).
Tensor nested_outer_math(const Tensor& a, const Tensor& b, const Tensor& param,
                         const std::function<Tensor(const Tensor&, const Tensor&)>& inner) {
  const Tensor u = a * b;
  return inner(u, a) + b * param;
}

Tensor mixed_math(const Tensor& a, const Tensor& b, const Tensor& index, double scale, const Tensor& c) {
  return index_select(a, 0, index) * b * scale + c * c;
}

// ---------------------------------------------------------------------------------------------
// Registered functions.

Tensor my_add(Tensor a, Tensor b) { return a + b; }
DISTGRAD_REMOTE(my_add);
Tensor square(Tensor x) { return x * x; }
DISTGRAD_REMOTE(square);
Tensor sin_twice(Tensor x) { return sin(x) * 2.0; }
DISTGRAD_REMOTE(sin_twice);
Tensor apply_param(Tensor x) { return param_math(x, worker_param()); }
DISTGRAD_REMOTE(apply_param);

// Runs hop `step` here, then sends the result on along `path` (ranks), each hop calling the next.
Tensor chain_hop(Tensor x, std::vector<int64_t> path, int64_t step) {
  const Tensor y = hop_math(x, worker_param(), step);
  if (path.empty()) return y;
  const int next = static_cast<int>(path.front());
  path.erase(path.begin());
  return rpc_sync(next, &chain_hop, y, path, step + 1);
}
DISTGRAD_REMOTE(chain_hop);

Tensor nested_inner(Tensor u, Tensor a) { return nested_inner_math(u, a, worker_param()); }
DISTGRAD_REMOTE(nested_inner);
Tensor nested_outer(Tensor a, Tensor b, int64_t inner) {
  return nested_outer_math(a, b, worker_param(), [inner](const Tensor& u, const Tensor& a2) {
    return rpc_sync(inner, &nested_inner, u, a2);
  });
}
DISTGRAD_REMOTE(nested_outer);

std::tuple<Tensor, Tensor, Tensor> three_results(Tensor x, Tensor y) {
  return {x * y, exp(x) * worker_param(), y * y * y};
}
DISTGRAD_REMOTE(three_results);
std::vector<Tensor> listed_results(Tensor x) { return {x * 2.0, sin(x), cos(x) * worker_param()}; }
DISTGRAD_REMOTE(listed_results);

Tensor mixed_args(Tensor a, Tensor b, Tensor index, double scale, Tensor c) {
  return mixed_math(a, b, index, scale, c);
}
DISTGRAD_REMOTE(mixed_args);
// Which of the tensors arrived requiring grad.
std::vector<bool> requires_grad_of(Tensor a, Tensor b, Tensor c) {
  return {a.requires_grad(), b.requires_grad(), c.requires_grad()};
}
DISTGRAD_REMOTE(requires_grad_of);

// What the driver asks the workers about their state.
int64_t live_contexts() { return static_cast<int64_t>(get_debug_info().num_autograd_contexts); }
DISTGRAD_REMOTE(live_contexts);
Tensor param_value() { return untracked::clone(worker_param().detach()); }
DISTGRAD_REMOTE(param_value);
// The gradient of this worker's parameter in the context (get_gradients on this worker); empty
// when the context has none for it or is not here.
std::optional<Tensor> param_gradient(int64_t context_id) {
  if (get_debug_info().find(context_id) == nullptr) return std::nullopt;
  const GradientMap gradients = get_gradients(context_id);
  if (!gradients.contains(worker_param())) return std::nullopt;
  return gradients.at(worker_param());
}
DISTGRAD_REMOTE(param_gradient);
// The error of get_gradients for a context this worker does not know ("" when there is none).
std::string get_gradients_error(int64_t context_id) {
  try {
    get_gradients(context_id);
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}
DISTGRAD_REMOTE(get_gradients_error);
// The number of this worker's leaves with a gradient in the context; -1 when the context is not here.
int64_t gradient_count(int64_t context_id) {
  const DebugInfo info = get_debug_info();
  const ContextDebugInfo* context = info.find(context_id);
  return context == nullptr ? -1 : static_cast<int64_t>(context->num_gradients);
}
DISTGRAD_REMOTE(gradient_count);
bool param_grad_defined() { return worker_param().grad().defined(); }
DISTGRAD_REMOTE(param_grad_defined);
// The send and recv functions this worker recorded in the context, and the workers it knows
// there, from its debug info; empty when the context is not here.
std::vector<int64_t> context_counts(int64_t context_id) {
  const DebugInfo info = get_debug_info();
  const ContextDebugInfo* context = info.find(context_id);
  if (context == nullptr) return {};
  std::vector<int64_t> counts = {static_cast<int64_t>(context->num_send_functions),
                                 static_cast<int64_t>(context->num_recv_functions)};
  counts.insert(counts.end(), context->known_workers.begin(), context->known_workers.end());
  return counts;
}
DISTGRAD_REMOTE(context_counts);
// Runs a backward pass of the caller's context from here, knowing only its id: from the loss
// sum(x * x) of the tensor the caller sent.
bool backward_by_id(int64_t context_id, Tensor x) {
  autograd::backward(context_id, {(x * x).sum()});
  return true;
}
DISTGRAD_REMOTE(backward_by_id);

// The heap this process's objects hold, in bytes (rpc::testing::heap_in_use_bytes).
int64_t heap_bytes() { return rpc::testing::heap_in_use_bytes(); }
DISTGRAD_REMOTE(heap_bytes);

// Failures: in the forward pass, in a backward formula, in a hook, and a worker that dies.
Tensor failing_forward(Tensor x) { throw std::runtime_error("failing_forward: refused a " + x.describe()); }
DISTGRAD_REMOTE(failing_forward);

// x * 2, recorded with a backward formula that throws.
Tensor throwing_backward(Tensor x) {
  Tensor result = untracked::mul(x, 2.0);
  record("ThrowingBackward", {&x}, {&result}, [](const BackwardContext&) -> TensorList {
    throw std::runtime_error("ThrowingBackward: this formula always fails");
  });
  return result;
}
DISTGRAD_REMOTE(throwing_backward);
Tensor nested_throwing_backward(Tensor x, int64_t inner) { return rpc_sync(inner, &throwing_backward, sin(x)) + x; }
DISTGRAD_REMOTE(nested_throwing_backward);

Tensor throwing_hook(Tensor x) {
  x.register_hook(
      [](const Tensor&) -> Tensor { throw std::runtime_error("throwing_hook: this hook refuses every gradient"); });
  return x * x;
}
DISTGRAD_REMOTE(throwing_hook);

// x * 3, whose gradient kills this process when it arrives here.
Tensor dies_in_backward(Tensor x) {
  x.register_hook([](const Tensor&) -> Tensor {
    say("dies_in_backward: the gradient arrived, raising SIGKILL");
    ::raise(SIGKILL);
    return {};
  });
  return x * 3.0;
}
DISTGRAD_REMOTE(dies_in_backward);
Tensor forward_to_dying(Tensor x, int64_t victim) { return rpc_sync(victim, &dies_in_backward, sin(x)) * 2.0; }
DISTGRAD_REMOTE(forward_to_dying);

// sin(x) * 3, whose gradient passes in a first-order pass and, in a pass with create_graph, is
// passed on as a tensor of that pass's graph that kills this process when a second-order pass
// reaches it.
Tensor dies_in_second_order(Tensor x) {
  x.register_hook([](const Tensor& gradient) -> Tensor {
    if (!gradient.requires_grad()) return {};
    const Tensor passed = gradient * 1.0;
    passed.register_hook([](const Tensor&) -> Tensor {
      say("dies_in_second_order: the second-order pass arrived, raising SIGKILL");
      ::raise(SIGKILL);
      return {};
    });
    return passed;
  });
  return sin(x) * 3.0;
}
DISTGRAD_REMOTE(dies_in_second_order);
Tensor forward_to_dying_in_second_order(Tensor x, int64_t victim) {
  return rpc_sync(victim, &dies_in_second_order, sin(x)) * 2.0;
}
DISTGRAD_REMOTE(forward_to_dying_in_second_order);

// Opens a distributed autograd context of its own.
bool opens_context() {
  Context inner;
  return true;
}
DISTGRAD_REMOTE(opens_context);

// A row of this worker's parameter: a call without tensors whose result requires grad (a
// parameter server's lookup).
Tensor param_row(int64_t row) { return select(worker_param(), 0, row) * 1.0; }
DISTGRAD_REMOTE(param_row);

// `tensor`, whose gradient waits `delay_us` microseconds here before it goes on.
Tensor delayed_in_backward(const Tensor& tensor, int64_t delay_us) {
  Tensor delayed = tensor * 1.0;
  delayed.register_hook([delay_us](const Tensor& grad) {
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    return grad;
  });
  return delayed;
}
// (x * scale).sum(), answered after `delay_us` microseconds, whose backward waits as long: calls
// that end, forward and backward, in an order of their own.
Tensor late_scaled_sum(Tensor x, double scale, int64_t delay_us) {
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  return (delayed_in_backward(x, delay_us) * scale).sum();
}
DISTGRAD_REMOTE(late_scaled_sum);
// The same of this worker's parameter, from a call without tensors.
Tensor late_scaled_param_sum(double scale, int64_t delay_us) {
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  return (delayed_in_backward(worker_param(), delay_us) * scale).sum();
}
DISTGRAD_REMOTE(late_scaled_param_sum);

// Where the backward parts of overlapping_backwards meet, on the driver: each worker's part
// calls meet_in_backward, which waits until all three have arrived (or kMeetingTimeout passed)
// and returns how many did.
constexpr int kMeetingWorkers = 3;
constexpr auto kMeetingTimeout = 10s;
struct BackwardMeeting {
  std::mutex mutex;  // guards arrived
  std::condition_variable changed;
  int64_t arrived = 0;
};
BackwardMeeting& backward_meeting() {
  static BackwardMeeting meeting;
  return meeting;
}
int64_t meet_in_backward() {
  BackwardMeeting& meeting = backward_meeting();
  std::unique_lock<std::mutex> lock(meeting.mutex);
  ++meeting.arrived;
  meeting.changed.notify_all();
  meeting.changed.wait_for(lock, kMeetingTimeout, [&] { return meeting.arrived >= kMeetingWorkers; });
  return meeting.arrived;
}
DISTGRAD_REMOTE(meet_in_backward);

// x * 3, whose backward here goes on only once the backward parts of the other workers have
// started too (a backward that sent its gradients to one worker at a time would fail here).
Tensor waits_for_the_others_in_backward(Tensor x) {
  x.register_hook([](const Tensor& grad) -> Tensor {
    const int64_t arrived = rpc_sync(0, &meet_in_backward);
    if (arrived < kMeetingWorkers) {
      throw std::runtime_error(str("waits_for_the_others_in_backward: only ", arrived, " of ", kMeetingWorkers,
                                   " workers' backward parts were running within ", kMeetingTimeout.count(), " s"));
    }
    return grad;
  });
  return x * 3.0;
}
DISTGRAD_REMOTE(waits_for_the_others_in_backward);

// ---------------------------------------------------------------------------------------------
// Helpers of the drivers.

std::vector<int> all_ranks() {
  std::vector<int> ranks;
  for (int rank = 0; rank < get_world_size(); ++rank) ranks.push_back(rank);
  return ranks;
}

// Asks `rank` about its state by a call made outside the current context: a call inside one would
// carry the context there (dist_autograd/interceptor.h).
template <typename R, typename... Params, typename... Args>
auto ask(int rank, R (*function)(Params...), Args&&... args) {
  dist_autograd::ContextScope outside(nullptr);
  return rpc_sync(rank, function, std::forward<Args>(args)...);
}

// Waits until none of `ranks` holds a context (releases are asynchronous): polls each one, and
// fails naming the first that still holds some after kReleaseTimeout.
void expect_no_live_contexts(const std::vector<int>& ranks) {
  for (int rank : ranks) {
    const Clock::time_point start = Clock::now();
    for (int64_t live = ask(rank, &live_contexts); live != 0; live = ask(rank, &live_contexts)) {
      require(Clock::now() - start < kReleaseTimeout, get_worker_name(rank), " still holds ", live, " contexts after ",
              seconds_since(start), " s");
      std::this_thread::sleep_for(1ms);
    }
  }
}

// The parameter of every rank, as leaves of the local reference.
std::vector<Tensor> reference_params() {
  std::vector<Tensor> params;
  for (int rank = 0; rank < get_world_size(); ++rank) params.push_back(copy_leaf(ask(rank, &param_value)));
  return params;
}

// Requires `rank`'s parameter gradient in `context` to match `expected` (none when undefined).
void require_param_gradient(const Context& context, int rank, const Tensor& expected, const std::string& what) {
  const std::string name = str(what, ": ", get_worker_name(rank), "'s parameter");
  if (rank == get_rank()) {
    const GradientMap gradients = get_gradients(context);
    if (expected.defined()) {
      require_close(name + " in get_gradients", gradients.at(worker_param()), expected);
    } else {
      require(!gradients.contains(worker_param()), name, ": a gradient where none was expected");
    }
    return;
  }
  const std::optional<Tensor> found = ask(rank, &param_gradient, context.id());
  if (expected.defined()) {
    require(found.has_value(), name, ": no gradient in the context");
    require_close(name, *found, expected);
  } else {
    require(!found.has_value(), name, ": a gradient where none was expected: ", *found);
  }
}

// The PyTorch docs example with my_add on `target`: t1, t2, t4 against the local reference.
void check_docs_example_on(int target, Generator& generator) {
  Context ctx;
  const Tensor t1 = leaf({3, 3}, generator), t2 = leaf({3, 3}, generator), t4 = leaf({3, 3}, generator);
  const Tensor t3 = rpc_sync(target, &my_add, t1, t2);
  autograd::backward(ctx, {(t3 * t4).sum()});
  const Tensor r1 = copy_leaf(t1), r2 = copy_leaf(t2), r4 = copy_leaf(t4);
  const TensorList expected = reference_grads(((r1 + r2) * r4).sum(), {r1, r2, r4});
  const std::string what = str("docs example on ", get_worker_name(target));
  require_close(what + ": t1.grad()", t1.grad(), expected[0]);
  require_close(what + ": t2.grad()", t2.grad(), expected[1]);
  require_close(what + ": t4.grad()", t4.grad(), expected[2]);
  require(get_gradients(ctx).size() == 3, what, ": get_gradients has ", get_gradients(ctx).size(), " entries");
}

// nested_outer on `outer`, calling nested_inner on `inner`: the driver's leaves and both
// workers' parameters against the local reference.
void check_nested_on(int outer, int inner, Generator& generator) {
  Context ctx;
  const Tensor a = leaf({3, 3}, generator), b = leaf({3, 3}, generator);
  const Tensor y = rpc_sync(outer, &nested_outer, a, b, int64_t{inner});
  autograd::backward(ctx, {(y * y).sum()});
  const std::vector<Tensor> params = reference_params();
  const Tensor ra = copy_leaf(a), rb = copy_leaf(b);
  const Tensor ry = nested_outer_math(ra, rb, params[outer], [&](const Tensor& u, const Tensor& a2) {
    return nested_inner_math(u, a2, params[inner]);
  });
  const TensorList expected = reference_grads((ry * ry).sum(), {ra, rb, params[outer], params[inner]});
  const std::string what = str("nested ", get_worker_name(outer), " -> ", get_worker_name(inner));
  require_close(what + ": a.grad()", a.grad(), expected[0]);
  require_close(what + ": b.grad()", b.grad(), expected[1]);
  require_param_gradient(ctx, outer, expected[2], what);
  require_param_gradient(ctx, inner, expected[3], what);
}

// apply_param on `target`: the driver's leaf gets its gradient, the worker's parameter gets its
// own in the worker's context (and not in .grad() there).
void check_param_on(int target, Generator& generator) {
  Context ctx;
  const Tensor x = leaf({3, 3}, generator);
  const Tensor y = rpc_sync(target, &apply_param, x);
  autograd::backward(ctx, {(y * y).sum()});
  const Tensor rx = copy_leaf(x), rp = reference_params()[target];
  const Tensor ry = param_math(rx, rp);
  const TensorList expected = reference_grads((ry * ry).sum(), {rx, rp});
  const std::string what = str("a parameter on ", get_worker_name(target));
  require_close(what + ": x.grad()", x.grad(), expected[0]);
  require_param_gradient(ctx, target, expected[1], what);
  const GradientMap driver = get_gradients(ctx);
  require(driver.size() == 1 && driver.contains(x), what, ": the driver's get_gradients has ", driver.size(),
          " entries, expected x only");
  require(ask(target, &gradient_count, ctx.id()) == 1, what, ": the worker's context holds ",
          ask(target, &gradient_count, ctx.id()), " leaf gradients, expected 1");
  require(!ask(target, &param_grad_defined), what, ": the worker's .grad() was written");
}

// Runs `body` on the driver (rank 0) while the other ranks serve, then requires every rank to have
// released every context.
int drive(const std::string& scenario, const std::function<void()>& body) {
  return rpc::auto_init_rpc(nullptr, rpc::rank_zero_only([&] {
                              require(get_world_size() == kWorldSize, "the scenarios need a world of ", kWorldSize,
                                      ", found ", get_world_size());
                              body();
                              expect_no_live_contexts(all_ranks());
                              say(scenario, ": no live contexts on any worker");
                            }),
                            test_options());
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

int docs_example() {
  return drive("docs_example", [] {
    Generator generator(1);
    Context ctx;
    const Tensor t1 = leaf({3, 3}, generator), t2 = leaf({3, 3}, generator), t4 = leaf({3, 3}, generator);
    t1.set_grad(ones({3, 3}, {.dtype = kFloat64}));  // backward adds to what .grad() holds
    const Tensor t3 = rpc_sync("worker1", &my_add, t1, t2);
    require(t3.grad_fn() != nullptr && t3.grad_fn()->name() == "RecvBackward", "t3 came back without a RecvBackward");
    autograd::backward(ctx, {(t3 * t4).sum()});

    const Tensor r1 = copy_leaf(t1), r2 = copy_leaf(t2), r4 = copy_leaf(t4);
    const TensorList expected = reference_grads(((r1 + r2) * r4).sum(), {r1, r2, r4});
    require_close("t1.grad() (ones before)", t1.grad(), expected[0] + 1.0);
    require_close("t2.grad()", t2.grad(), expected[1]);
    require_close("t4.grad()", t4.grad(), expected[2]);
    require_close("t1.grad() == t4", t1.grad() - 1.0, t4.detach());
    require_close("t4.grad() == t1 + t2", t4.grad(), t1.detach() + t2.detach());
    const GradientMap grads = get_gradients(ctx);
    require(grads.size() == 3, "get_gradients has ", grads.size(), " entries, expected 3");
    require_close("get_gradients[t1] (this pass only)", grads.at(t1), expected[0]);
    require_close("get_gradients[t2]", grads.at(t2), expected[1]);
    require_close("get_gradients[t4]", grads.at(t4), expected[2]);
    require(ask(1, &gradient_count, ctx.id()) == 0, "worker1 holds leaf gradients, but has no leaves");
    require(ask(1, &live_contexts) == 1, "worker1 did not join the context");
    for (int rank : {2, 3}) require(ask(rank, &live_contexts) == 0, get_worker_name(rank), " joined a context");
    say("docs example: t1, t2, t4 match the local reference; get_gradients has 3 entries");
  });
}

// Runs x through chain_hop along `ranks` (the driver calls ranks[0], each hop calls the next) and
// checks every gradient, the parameters of every rank included, against the same hops done here.
void check_chain(const std::vector<int64_t>& ranks, Generator& generator) {
  worker_param().set_grad(Tensor());
  Context ctx;
  const Tensor x = leaf({3, 3}, generator), w = leaf({3, 3}, generator);
  const Tensor y = rpc_sync(static_cast<int>(ranks.front()), &chain_hop, x,
                            std::vector<int64_t>(ranks.begin() + 1, ranks.end()), int64_t{0});
  autograd::backward(ctx, {(y * w).sum()});

  const std::vector<Tensor> params = reference_params();
  const Tensor rx = copy_leaf(x), rw = copy_leaf(w);
  Tensor ry = rx;
  std::string path = get_worker_name();
  for (size_t step = 0; step < ranks.size(); ++step) {
    ry = hop_math(ry, params[ranks[step]], static_cast<int64_t>(step));
    path += "->" + get_worker_name(static_cast<int>(ranks[step]));
  }
  TensorList inputs = {rx, rw};
  inputs.insert(inputs.end(), params.begin(), params.end());
  const TensorList expected = reference_grads((ry * rw).sum(), inputs);
  require_close(path + ": x.grad()", x.grad(), expected[0]);
  require_close(path + ": w.grad()", w.grad(), expected[1]);
  for (int rank = 0; rank < get_world_size(); ++rank) require_param_gradient(ctx, rank, expected[2 + rank], path);
  if (expected[2].defined()) require_close(path + ": worker0's parameter .grad()", worker_param().grad(), expected[2]);
  for (int rank = 1; rank < get_world_size(); ++rank) {
    const bool visited = expected[2 + rank].defined();
    require(ask(rank, &live_contexts) == (visited ? 1 : 0), get_worker_name(rank),
            visited ? " did not join the context" : " joined a context it was never sent");
  }
  say("chain ", path, " (", ranks.size(), " hops): every gradient matches the local reference");
}

int chain() {
  return drive("chain", [] {
    Generator generator(2);
    check_chain({1, 2, 0}, generator);
  });
}

int ring() {
  return drive("ring", [] {
    Generator generator(3);
    check_chain({1, 2, 3, 0, 1, 2, 3, 0, 1, 2}, generator);
  });
}

int nested() {
  return drive("nested", [] {
    Generator generator(4);
    check_nested_on(2, 3, generator);
    check_nested_on(3, 1, generator);
    say("nested: a remote function calling another worker matches the local reference");
  });
}

int several_results() {
  return drive("several_results", [] {
    Generator generator(5);
    {
      Context ctx;
      const Tensor x = leaf({3, 3}, generator), y = leaf({3, 3}, generator);
      const auto [r0, r1, r2] = rpc_sync(1, &three_results, x, y);
      require(r0.requires_grad() && r1.requires_grad() && r2.requires_grad(), "a result came back without history");
      autograd::backward(ctx, {(r0 + r2).sum()});
      const Tensor rx = copy_leaf(x), ry = copy_leaf(y);
      const TensorList expected = reference_grads((rx * ry + ry * ry * ry).sum(), {rx, ry});
      require_close("tuple: x.grad()", x.grad(), expected[0]);
      require_close("tuple: y.grad()", y.grad(), expected[1]);
      require(ask(1, &gradient_count, ctx.id()) == 0,
              "tuple: worker1's parameter, used only by the unused result, got a gradient");
    }
    {
      Context ctx;
      const Tensor x = leaf({3, 3}, generator), y = leaf({3, 3}, generator);
      const std::vector<Tensor> results = rpc_sync(2, &listed_results, x);
      require(results.size() == 3, "listed_results returned ", results.size(), " tensors");
      autograd::backward(ctx, {(results[1] * y).sum()});
      const Tensor rx = copy_leaf(x), ry = copy_leaf(y);
      const TensorList expected = reference_grads((sin(rx) * ry).sum(), {rx, ry});
      require_close("vector: x.grad()", x.grad(), expected[0]);
      require_close("vector: y.grad()", y.grad(), expected[1]);
      require(ask(2, &gradient_count, ctx.id()) == 0,
              "vector: worker2's parameter, used only by an unused result, got a gradient");
    }
    say("several results: only the used ones carry gradients, matching the local reference");
  });
}

int mixed_requires_grad() {
  return drive("mixed_requires_grad", [] {
    Generator generator(6);
    Context ctx;
    const Tensor a = leaf({4, 3}, generator), c = leaf({2, 3}, generator);
    const Tensor b = randn({2, 3}, {.dtype = kFloat64}, generator);
    const Tensor index = from_vector<int64_t>({3, 1});
    const std::vector<bool> arrived = rpc_sync(1, &requires_grad_of, a, b, c);
    require(arrived == std::vector<bool>{true, false, true}, "requires_grad arrived as ", arrived[0], arrived[1],
            arrived[2], ", expected 101");
    const Tensor y = rpc_sync(1, &mixed_args, a, b, index, 0.5, c);
    autograd::backward(ctx, {(y * y).sum()});
    const Tensor ra = copy_leaf(a), rc = copy_leaf(c);
    const Tensor ry = mixed_math(ra, b, index, 0.5, rc);
    const TensorList expected = reference_grads((ry * ry).sum(), {ra, rc});
    require_close("a.grad()", a.grad(), expected[0]);
    require_close("c.grad()", c.grad(), expected[1]);
    require(!b.grad().defined(), "b, which does not require grad, got a gradient");
    require(get_gradients(ctx).size() == 2, "get_gradients has ", get_gradients(ctx).size(), " entries, expected 2");
    say("mixed arguments: a and c match the local reference, b and the index get nothing");
  });
}

int no_grad() {
  return drive("no_grad", [] {
    Generator generator(7);
    {
      Context ctx;
      const Tensor p = randn({3, 3}, {.dtype = kFloat64}, generator), q = randn({3, 3}, {.dtype = kFloat64}, generator);
      const Tensor r = rpc_sync(1, &my_add, p, q);
      require(!r.requires_grad(), "a result of tensors without grad requires grad");
      require(rpc_sync(1, &requires_grad_of, p, q, r) == std::vector<bool>{false, false, false},
              "a tensor without grad arrived requiring grad");
      require_close("the result", r, p + q);
      const DebugInfo info = get_debug_info();
      const ContextDebugInfo* state = info.find(ctx.id());
      require(state->num_send_functions == 0, "calls without grad recorded ", state->num_send_functions,
              " send functions");
      require(state->known_workers == std::vector<int>{1}, "the context reached ", info.str(), ", expected worker1");
      require(ask(1, &live_contexts) == 1, "worker1 did not join the context of calls without grad tensors");
    }
    {
      Context ctx;
      const Tensor t1 = leaf({3, 3}, generator), t2 = leaf({3, 3}, generator);
      NoGradGuard no_grad;
      const Tensor r = rpc_sync(1, &my_add, t1, t2);
      require(!r.requires_grad(), "a result computed under NoGradGuard requires grad");
      require_close("the result", r, t1.detach() + t2.detach());
      const Tensor row = rpc_sync(1, &param_row, int64_t{0});
      require(!row.requires_grad(), "a worker's parameter row fetched under NoGradGuard requires grad");
      const DebugInfo info = get_debug_info();
      const ContextDebugInfo* state = info.find(ctx.id());
      require(state->num_send_functions == 0 && state->known_workers.empty(),
              "calls made with grad mode off recorded send functions: ", info.str());
      require(ask(1, &live_contexts) == 0, "worker1 created a context for calls made with grad mode off");
    }
    {
      // Outside any context, as in PyTorch, a result that required grad on the worker arrives as a
      // leaf that requires grad, unless grad mode is off.
      require(rpc_sync(1, &param_row, int64_t{0}).requires_grad(), "a parameter row arrived without requires_grad");
      NoGradGuard no_grad;
      require(!rpc_sync(1, &param_row, int64_t{0}).requires_grad(),
              "a parameter row fetched under NoGradGuard requires grad");
    }
    say("no grad: calls without grad tensors carry the context but record nothing; under NoGradGuard nothing "
        "reaches a worker and results do not require grad");
  });
}

// Calls whose arguments hold no tensor that requires grad, whose results depend on the workers'
// own parameters: the gradients reach those parameters (PyTorch propagates the context of every
// call of a user function).
int worker_params_only() {
  return drive("worker_params_only", [] {
    Generator generator(21);
    Context ctx;
    const Tensor x = randn({3, 3}, {.dtype = kFloat64}, generator);
    const Tensor y1 = rpc_sync(1, &apply_param, x);
    const Tensor y3 = rpc_sync(3, &apply_param, x);
    const Tensor row = rpc_sync(2, &param_row, int64_t{1});
    require(y1.requires_grad() && row.requires_grad(), "results of the workers' parameters came back without grad");
    autograd::backward(ctx, {(y1 * y3).sum() + (row * row).sum()});
    const std::vector<Tensor> params = reference_params();
    const Tensor r1 = param_math(x, params[1]), r3 = param_math(x, params[3]), rrow = select(params[2], 0, 1);
    const TensorList expected =
        reference_grads((r1 * r3).sum() + (rrow * rrow).sum(), {params[1], params[2], params[3]});
    require_param_gradient(ctx, 1, expected[0], "worker params only");
    require_param_gradient(ctx, 2, expected[1], "worker params only");
    require_param_gradient(ctx, 3, expected[2], "worker params only");
    say("worker params only: the parameters of worker1, worker2 and worker3 got their gradients");
  });
}

// get_debug_info's counts on both sides of a call, and backward passes given a context id alone:
// run by a worker that got the id as an argument, and by the driver.
int debug_info_and_backward_by_id() {
  return drive("debug_info_and_backward_by_id", [] {
    Generator generator(31);
    Context ctx;
    const Tensor a = leaf({3, 3}, generator), b = leaf({3, 3}, generator);
    const Tensor c = rpc_sync(1, &my_add, a, b);
    const DebugInfo info = get_debug_info();
    const ContextDebugInfo* here = info.find(ctx.id());
    require(here != nullptr && here->num_send_functions == 1 && here->num_recv_functions == 1 &&
                here->known_workers == std::vector<int>{1} && here->num_gradients == 0,
            "after one call to worker1 the driver's debug info is ", info.str(),
            ", expected 1 send, 1 recv, workers [1], 0 gradients");
    const std::string line = "context " + std::to_string(ctx.id()) + ": 1 sends, 1 recvs, workers [1], 0 gradients";
    require(info.str().find(line) != std::string::npos, "the debug info's line is ", info.str(), ", expected ", line);
    const std::vector<int64_t> there = ask(1, &context_counts, ctx.id());
    require(there == std::vector<int64_t>{1, 1, 0}, "worker1's context holds ", there.size() < 2 ? -1 : there[0],
            " sends and ", there.size() < 2 ? -1 : there[1], " recvs, expected 1 and 1 and to know worker0");
    require(ask(2, &context_counts, ctx.id()).empty(), "worker2 holds a context no call reached it in");

    require(rpc_sync(2, &backward_by_id, ctx.id(), c), "worker2's backward by id did not return");
    const Tensor ra = copy_leaf(a), rb = copy_leaf(b);
    const TensorList expected = reference_grads(((ra + rb) * (ra + rb)).sum(), {ra, rb});
    require_close("a's gradient from worker2's pass", get_gradients(ctx.id()).at(a), expected[0]);
    require_close("b's gradient from worker2's pass", get_gradients(ctx).at(b), expected[1]);

    const Tensor d = rpc_sync(3, &square, a);
    backward(ctx.id(), {d.sum()}, {.inputs = {a}});
    require_close("a.grad() from the driver's pass by id", a.grad(), a.detach() * 2.0);
    require(!b.grad().defined(), "b.grad() was set by a pass limited to a");

    std::string error;
    try {
      backward(ctx.id() + 1000, {d.sum()});
    } catch (const std::exception& e) {
      error = e.what();
    }
    require(error.find("is not known on worker0") != std::string::npos, "a backward with an unknown id said: ", error);
    error.clear();
    try {
      backward(ctx, {d.sum()}, {.grad_outputs = {ones_like(d.sum())}});
    } catch (const std::exception& e) {
      error = e.what();
    }
    require(error.find("backward: a distributed pass starts from one-element roots with gradient 1; 1 grad_outputs "
                       "were given") != std::string::npos,
            "a distributed backward with grad_outputs said: ", error);
    say("debug info and backward by id: counts match on both sides; passes by id from worker2 and the driver "
        "gave the reference gradients");
  });
}

// ---------------------------------------------------------------------------------------------
// Higher-order gradients across workers (create_graph, Note [Differentiable gradient messages]).

// f(x, w) computed across the workers by `distributed`, and here by `local` (on the reference's
// copies of the leaves and of every worker's parameter): the first, second (a Hessian-vector
// product and a gradient penalty) and third derivatives with respect to x, computed by
// distributed grad with create_graph, must match the local engine's.
void check_higher_order(const std::string& what, const std::function<Tensor(const Tensor&)>& distributed,
                        const std::function<Tensor(const Tensor&, const std::vector<Tensor>&)>& local,
                        Generator& generator) {
  const Tensor x = leaf({3, 3}, generator);
  const Tensor v = randn({3, 3}, {.dtype = kFloat64}, generator), u = randn({3, 3}, {.dtype = kFloat64}, generator);
  const std::vector<Tensor> params = reference_params();
  const Tensor rx = copy_leaf(x);
  const Tensor rf = local(rx, params);
  const Tensor rg = autograd::grad({rf}, {rx}, {.create_graph = true})[0];
  const Tensor rh = autograd::grad({(rg * v).sum()}, {rx}, {.create_graph = true})[0];
  const Tensor r_penalty = autograd::grad({(rg * rg).sum()}, {rx}, {.retain_graph = true})[0];
  const Tensor r_third = autograd::grad({(rh * u).sum()}, {rx})[0];

  Context ctx;
  const Tensor f = distributed(x);
  const Tensor g = grad(ctx, {f}, {x}, {.create_graph = true})[0];
  require(g.requires_grad(), what, ": the gradient of a create_graph pass does not require grad");
  require_close(what + ": the gradient", g.detach(), rg.detach());
  const Tensor h = grad(ctx, {(g * v).sum()}, {x}, {.create_graph = true})[0];
  require_close(what + ": the Hessian-vector product", h.detach(), rh.detach());
  require_close(what + ": the gradient penalty's gradient", grad(ctx, {(g * g).sum()}, {x}, {.retain_graph = true})[0],
                r_penalty);
  require_close(what + ": the third derivative", grad(ctx, {(h * u).sum()}, {x})[0], r_third);
  say(what, ": first, second and third derivatives match the local engine's");
}

int higher_order() {
  return drive("higher_order", [] {
    Generator generator(7);
    const Tensor w = randn({3, 3}, {.dtype = kFloat64}, generator);
    // A chain driver -> worker1 -> worker2 -> driver.
    check_higher_order(
        "chain",
        [&](const Tensor& x) { return (rpc_sync(1, &chain_hop, x, std::vector<int64_t>{2}, int64_t{0}) * w).sum(); },
        [&](const Tensor& x, const std::vector<Tensor>& params) {
          return (hop_math(hop_math(x, params[1], 0), params[2], 1) * w).sum();
        },
        generator);
    // Fan-out: x to three workers at once, the results combined on the driver.
    check_higher_order(
        "fan-out",
        [&](const Tensor& x) {
          std::vector<rpc::Future<Tensor>> parts;
          for (int rank = 1; rank < get_world_size(); ++rank) parts.push_back(rpc_async(rank, &apply_param, x));
          Tensor sum = x * x;
          for (const Tensor& part : rpc::wait_all(parts)) sum = sum + part * part;
          return sum.sum();
        },
        [&](const Tensor& x, const std::vector<Tensor>& params) {
          Tensor sum = x * x;
          for (int rank = 1; rank < get_world_size(); ++rank) {
            const Tensor part = param_math(x, params[rank]);
            sum = sum + part * part;
          }
          return sum.sum();
        },
        generator);
    // Nested calls: worker1 calls worker3 while serving the driver.
    check_higher_order(
        "nested",
        [&](const Tensor& x) {
          const Tensor y = rpc_sync(1, &nested_outer, x, x * w, int64_t{3});
          return (y * y).sum();
        },
        [&](const Tensor& x, const std::vector<Tensor>& params) {
          const Tensor y = nested_outer_math(x, x * w, params[1], [&](const Tensor& a, const Tensor& b) {
            return nested_inner_math(a, b, params[3]);
          });
          return (y * y).sum();
        },
        generator);
    // One tensor sent twice to one worker and once to another.
    check_higher_order(
        "sent twice",
        [&](const Tensor& x) {
          const Tensor a = rpc_sync(2, &sin_twice, x), b = rpc_sync(2, &sin_twice, x * x), c = rpc_sync(3, &square, x);
          return (a * b * c).sum();
        },
        [&](const Tensor& x, const std::vector<Tensor>&) { return (sin(x) * 2.0 * sin(x * x) * 2.0 * (x * x)).sum(); },
        generator);
    // A MAML step: the gradient at adapted (non-leaf) weights, computed across workers with
    // create_graph, then the loss after the step differentiated back to the leaf.
    const auto loss = [](const Tensor& phi) {
      return (rpc_sync(1, &sin_twice, phi) * rpc_sync(2, &square, phi)).sum();
    };
    const auto local_loss = [](const Tensor& phi) { return (sin(phi) * 2.0 * (phi * phi)).sum(); };
    const Tensor x = leaf({3, 3}, generator);
    const Tensor rx = copy_leaf(x);
    const Tensor r_phi = rx * 1.5 + 0.25;
    const Tensor r_step = r_phi - 0.1 * autograd::grad({local_loss(r_phi)}, {r_phi}, {.create_graph = true})[0];
    const Tensor r_meta = autograd::grad({local_loss(r_step)}, {rx})[0];
    Context ctx;
    const Tensor phi = x * 1.5 + 0.25;
    const Tensor step = phi - 0.1 * grad(ctx, {loss(phi)}, {phi}, {.create_graph = true})[0];
    require_close("MAML step: the meta-gradient through a non-leaf's distributed gradient",
                  grad(ctx, {loss(step)}, {x})[0], r_meta);
    say("MAML step: the meta-gradient through a distributed gradient at non-leaf weights matches");
  });
}

int same_tensor_two_workers() {
  return drive("same_tensor_two_workers", [] {
    Generator generator(8);
    Context ctx;
    const Tensor t = leaf({3, 3}, generator), w = leaf({3, 3}, generator);
    rpc::Future<Tensor> on_worker1 = rpc_async(1, &sin_twice, t);
    rpc::Future<Tensor> on_worker2 = rpc_async(2, &square, t);
    autograd::backward(ctx, {((on_worker1.get() + on_worker2.get()) * w).sum() + (t * w).sum()});
    const Tensor rt = copy_leaf(t), rw = copy_leaf(w);
    const TensorList expected = reference_grads(((sin(rt) * 2.0 + rt * rt) * rw).sum() + (rt * rw).sum(), {rt, rw});
    require_close("t.grad() (summed over worker1, worker2 and the driver)", t.grad(), expected[0]);
    require_close("w.grad()", w.grad(), expected[1]);
    require_close("get_gradients[t]", get_gradients(ctx).at(t), expected[0]);
    const DebugInfo info = get_debug_info();
    require(info.find(ctx.id())->known_workers == std::vector<int>{1, 2},
            "the context talked to other workers than "
            "worker1 and worker2: ",
            info.str());
    say("same tensor to two workers: the gradients are summed, matching the local reference");
  });
}

int overlapping_backwards() {
  return drive("overlapping_backwards", [] {
    Generator generator(12);
    Context ctx;
    const Tensor x = leaf({3, 3}, generator);
    std::vector<rpc::Future<Tensor>> parts;
    for (int worker = 1; worker <= kMeetingWorkers; ++worker) {
      parts.push_back(rpc_async(worker, &waits_for_the_others_in_backward, x));
    }
    Tensor total = parts[0].get();
    for (size_t i = 1; i < parts.size(); ++i) total = total + parts[i].get();
    autograd::backward(ctx, {(total * total).sum()});
    const Tensor rx = copy_leaf(x);
    const Tensor reference_total = rx * 3.0 + rx * 3.0 + rx * 3.0;
    require_close("x.grad()", x.grad(), reference_grads((reference_total * reference_total).sum(), {rx})[0]);
    say("overlapping backwards: the backward parts of workers 1-3 ran at the same time; x.grad() matches");
  });
}

int worker_leaves() {
  return drive("worker_leaves", [] {
    Generator generator(9);
    check_param_on(1, generator);
    check_param_on(3, generator);
    const int64_t unknown_context = 12345;
    require_contains(ask(2, &get_gradients_error, unknown_context),
                     "get_gradients: context 12345 is not known on worker2",
                     "get_gradients on worker2 for a context it never saw");
    say("leaves on a worker: their gradients are in the worker's context, not on the driver");
  });
}

int multiple_roots() {
  return drive("multiple_roots", [] {
    Generator generator(10);
    Context ctx;
    const Tensor t1 = leaf({3, 3}, generator), t2 = leaf({3, 3}, generator), t4 = leaf({3, 3}, generator);
    const Tensor t3 = rpc_sync(1, &my_add, t1, t2);
    const Tensor y = rpc_sync(2, &apply_param, t1);
    autograd::backward(ctx, {(t3 * t4).sum(), exp(t3).mean(), (y * t4).sum()});
    const std::vector<Tensor> params = reference_params();
    const Tensor r1 = copy_leaf(t1), r2 = copy_leaf(t2), r4 = copy_leaf(t4), rp = params[2];
    const Tensor r3 = r1 + r2;
    const TensorList expected =
        autograd::grad({(r3 * r4).sum(), exp(r3).mean(), (param_math(r1, rp) * r4).sum()}, {r1, r2, r4, rp});
    require_close("t1.grad()", t1.grad(), expected[0]);
    require_close("t2.grad()", t2.grad(), expected[1]);
    require_close("t4.grad()", t4.grad(), expected[2]);
    require_param_gradient(ctx, 2, expected[3], "multiple roots");
    say("multiple roots: the gradients of three roots match the local reference");
  });
}

int retain_graph() {
  return drive("retain_graph", [] {
    Generator generator(11);
    {
      Context ctx;
      const Tensor t1 = leaf({3, 3}, generator), t4 = leaf({3, 3}, generator);
      const Tensor loss = (rpc_sync(1, &apply_param, t1) * t4).sum();
      const Tensor r1 = copy_leaf(t1), r4 = copy_leaf(t4), rp = reference_params()[1];
      const TensorList expected = reference_grads((param_math(r1, rp) * r4).sum(), {r1, r4, rp});

      autograd::backward(ctx, {loss}, /*retain_graph=*/true);
      require_close("pass 1: t1.grad()", t1.grad(), expected[0]);
      require_close("pass 1: t4.grad()", t4.grad(), expected[1]);
      require_close("pass 1: get_gradients[t1]", get_gradients(ctx).at(t1), expected[0]);
      require_param_gradient(ctx, 1, expected[2], "pass 1");
      const Tensor t1_grad_after_one = untracked::clone(t1.grad());

      autograd::backward(ctx, {loss});  // the graph was retained: a second pass works
      require_close("pass 2: t1.grad() (one more pass)", t1.grad(), t1_grad_after_one + expected[0]);
      require_close("pass 2: t4.grad()", t4.grad(), expected[1] * 2.0);
      require_close("pass 2: get_gradients[t1] (accumulated)", get_gradients(ctx).at(t1), expected[0] * 2.0);
      require_close("pass 2: get_gradients[t4] (accumulated)", get_gradients(ctx).at(t4), expected[1] * 2.0);
      require_param_gradient(ctx, 1, expected[2] * 2.0, "pass 2 (accumulated)");

      const std::string message =
          expect_error("pass 3, the graph freed by pass 2", [&] { autograd::backward(ctx, {loss}); });
      require_contains(message, "backward through the graph a second time", "pass 3");
      require_contains(message, "retain_graph", "pass 3");
      // The failed pass left the context and what the passes before it accumulated.
      require_close("get_gradients[t1] after the failed pass", get_gradients(ctx).at(t1), expected[0] * 2.0);
    }
    {
      // The driver's part saves nothing: the second pass fails on worker1, whose graph was freed.
      Context ctx;
      const Tensor t1 = leaf({3, 3}, generator);
      const Tensor loss = rpc_sync(1, &square, t1).sum();
      autograd::backward(ctx, {loss});
      const std::string message =
          expect_error("a second pass over worker1's freed graph", [&] { autograd::backward(ctx, {loss}); });
      require_contains(message, "worker1", "the second pass");
      require_contains(message, "backward through the graph a second time", "the second pass");
    }
    // Every time: the second pass starts only once the workers have freed the first one's graph
    // (it used to race the asynchronous release, and could run over a graph being freed).
    constexpr int kContexts = 60;
    for (int i = 0; i < kContexts; ++i) {
      Context ctx;
      const int target = 1 + i % 3;
      const Tensor loss = rpc_sync(target, &square, leaf({3, 3}, generator)).sum();
      autograd::backward(ctx, {loss});
      bool failed = false;
      try {
        autograd::backward(ctx, {loss});
      } catch (const Error& error) {
        require_contains(error.what(), "backward through the graph a second time", "a second pass");
        failed = true;
      }
      require(failed, "context ", i, ": a second pass over ", get_worker_name(target), "'s freed graph succeeded");
    }
    say("retain_graph: ", kContexts, " second passes over freed worker graphs all failed");
    say("retain_graph: gradients accumulate over two passes; a third pass fails naming retain_graph");
  });
}

int grad_allow_unused() {
  return drive("grad_allow_unused", [] {
    Generator generator(12);
    Context ctx;
    const Tensor t1 = leaf({3, 3}, generator), t2 = leaf({3, 3}, generator), t4 = leaf({3, 3}, generator);
    const Tensor unused = leaf({2}, generator);
    const Tensor t3 = rpc_sync(1, &my_add, t1, t2);
    const Tensor loss = (t3 * t4).sum();
    const Tensor r1 = copy_leaf(t1), r2 = copy_leaf(t2), r4 = copy_leaf(t4);
    const TensorList expected = reference_grads(((r1 + r2) * r4).sum(), {r1, r2, r4});

    const TensorList grads = autograd::grad(ctx, {loss}, {t1, t4, unused}, /*retain_graph=*/true,
                                            /*allow_unused=*/true);
    require(grads.size() == 3, "grad returned ", grads.size(), " gradients");
    require_close("grad: t1", grads[0], expected[0]);
    require_close("grad: t4", grads[1], expected[2]);
    require(!grads[2].defined(), "grad: the unused input got a gradient");
    require(!t1.grad().defined() && !t2.grad().defined() && !t4.grad().defined() && !unused.grad().defined(),
            "grad wrote .grad()");

    const std::string message = expect_error("grad without allow_unused", [&] {
      autograd::grad(ctx, {loss}, {t2, unused}, /*retain_graph=*/true);
    });
    require_contains(message, "input 1", "grad without allow_unused");
    require_contains(message, "allow_unused", "grad without allow_unused");
    // Both passes accumulated every leaf in the context.
    require_close("get_gradients[t2] after two passes", get_gradients(ctx).at(t2), expected[1] * 2.0);
    require_close("get_gradients[t1] after two passes", get_gradients(ctx).at(t1), expected[0] * 2.0);
    // A non-leaf input (a reply of worker1): the gradient arriving at it, as local grad gives it.
    require_close("grad: the non-leaf t3", autograd::grad(ctx, {loss}, {t3})[0], t4.detach());
    say("grad: t1 and t4 match the local reference, the unused input is undefined, .grad() untouched");
  });
}

// A grad at a non-leaf made here from a leaf that the call also takes as is: the pass runs nothing
// made before the input (Note [Passes stop below the inputs]), so that leaf, below the input, gets
// no gradient in the context, though the call's send reaches it.
int grad_below_inputs() {
  return drive("grad_below_inputs", [] {
    Generator generator(21);
    Context ctx;
    const Tensor theta = leaf({3, 3}, generator);
    const Tensor phi = theta * 2.0;
    const Tensor y = rpc_sync(1, &my_add, phi, theta);
    require_close("grad: the non-leaf phi", autograd::grad(ctx, {y.sum()}, {phi})[0], ones_like(phi));
    require(!get_gradients(ctx).contains(theta), "grad at phi: theta, below it, got a gradient in the context");
    say("grad below inputs: phi's gradient is right and theta, below it, has none in the context");
  });
}

int inputs_filter() {
  return drive("inputs_filter", [] {
    Generator generator(13);
    Context ctx;
    const Tensor t1 = leaf({3, 3}, generator), t2 = leaf({3, 3}, generator), t4 = leaf({3, 3}, generator);
    const Tensor t3 = rpc_sync(1, &my_add, t1, t2);
    autograd::backward(ctx, {(t3 * t4).sum()}, false, {t1, t4});
    const Tensor r1 = copy_leaf(t1), r2 = copy_leaf(t2), r4 = copy_leaf(t4);
    const TensorList expected = reference_grads(((r1 + r2) * r4).sum(), {r1, r2, r4});
    require_close("t1.grad()", t1.grad(), expected[0]);
    require_close("t4.grad()", t4.grad(), expected[2]);
    require(!t2.grad().defined(), "t2, not among the inputs, got .grad()");
    const GradientMap grads = get_gradients(ctx);
    require(grads.size() == 3, "get_gradients has ", grads.size(), " entries, expected 3");
    require_close("get_gradients[t2] (the context has every leaf)", grads.at(t2), expected[1]);
    // Inputs that could never receive a gradient are refused, naming them (as TorchOpt does).
    const Tensor plain = randn({3, 3}, {.dtype = kFloat64}, generator);
    const Tensor again = (rpc_sync(1, &my_add, t1, t2) * t4).sum();
    require_contains(expect_error("an input that does not require grad",
                                  [&] {
                                    autograd::backward(ctx, {again}, true, {t1, plain});
                                  }),
                     "backward: input 1 (a float64 tensor of shape [3, 3] on cpu) must be a leaf that requires grad",
                     "backward");
    require_contains(
        expect_error("an input that is not a leaf", [&] { autograd::backward(ctx, {again}, true, {t2 * 2.0}); }),
        "backward: input 0", "backward");
    say("inputs: only t1 and t4 got .grad(); the context holds all three; inputs without grad are refused");
  });
}

// Contexts do not nest, on the driver or in a remote function (which runs in its caller's).
int nested_contexts() {
  return drive("nested_contexts", [] {
    {
      Context outer;
      require_contains(expect_error("a context inside another", [] { Context inner; }), "contexts do not nest",
                       "a nested context");
      require_contains(expect_remote_error("a remote function opening a context inside its caller's",
                                           [] { rpc_sync(1, &opens_context); })
                           .what(),
                       "a remote function runs in its caller's context", "a nested context on worker1");
    }
    require(rpc_sync(1, &opens_context), "outside any context, a remote function could not open one");
    Context after;  // the refused ones left nothing behind
    say("nested contexts: refused on the driver and in a remote function; a context opens after them");
  });
}

// Every sum across workers follows the order of the calls, whatever order they end in: a driver's
// leaf sent in twelve calls and a worker's parameter used by eight get gradients summed in call
// order, bit for bit, in each of five passes whose calls end (forward and backward) in orders of
// their own. The scales make the sum depend on its order (1e16 + 1 - 1e16 is 0, 1e16 - 1e16 + 1
// is 1).
int call_order_sums() {
  return drive("call_order_sums", [] {
    const std::vector<double> scales = {1e16, 1, -1e16, 2.5, 7e15, -3, -7e15, 0.125, 3e16, 1.5, -3e16, 5};
    const std::vector<double> param_scales = {1e16, 1, -1e16, 3, -2e16, 0.5, 2e16, 7};
    const auto in_call_order = [](const std::vector<double>& values) {
      double sum = values[0];
      for (size_t i = 1; i < values.size(); ++i) sum = sum + values[i];
      return sum;
    };
    std::mt19937 random(12345);
    std::uniform_int_distribution<int64_t> delay_us(0, 3000);
    for (int pass = 0; pass < 5; ++pass) {
      Context ctx;
      const Tensor p = zeros({3}, {.dtype = kFloat64, .requires_grad = true});
      std::vector<rpc::Future<Tensor>> calls;
      for (size_t k = 0; k < scales.size(); ++k) {
        calls.push_back(rpc_async(1 + static_cast<int>(k % 3), &late_scaled_sum, p, scales[k], delay_us(random)));
      }
      for (double scale : param_scales) {
        calls.push_back(rpc_async(1, &late_scaled_param_sum, scale, delay_us(random)));
      }
      Tensor loss = calls[0].get();
      for (size_t i = 1; i < calls.size(); ++i) loss = loss + calls[i].get();
      autograd::backward(ctx, {loss});
      for (double element : p.grad().to_vector<double>()) {
        require(element == in_call_order(scales), "pass ", pass, ": the driver's leaf got ", element,
                ", the sum in call order is ", in_call_order(scales));
      }
      const std::optional<Tensor> param_grad = ask(1, &param_gradient, ctx.id());
      require(param_grad.has_value(), "pass ", pass, ": worker1's parameter got no gradient");
      for (double element : param_grad->to_vector<double>()) {
        require(element == in_call_order(param_scales), "pass ", pass, ": worker1's parameter got ", element,
                ", the sum in call order is ", in_call_order(param_scales));
      }
    }
    say("call order sums: five passes summed the gradients of 12 and 8 calls in call order, bit for bit");
  });
}

int non_scalar_roots() {
  return drive("non_scalar_roots", [] {
    Generator generator(14);
    Context ctx;
    const Tensor t1 = leaf({3, 3}, generator), t2 = leaf({3, 3}, generator), t4 = leaf({3, 3}, generator);
    const Tensor product = rpc_sync(1, &my_add, t1, t2) * t4;
    require_contains(expect_error("backward of a 3x3 root", [&] { autograd::backward(ctx, {product}); }),
                     "roots must be scalars", "backward");
    require_contains(expect_error("grad of a 3x3 output", [&] { autograd::grad(ctx, {product}, {t1}); }),
                     "roots must be scalars", "grad");
    const std::string second = expect_error("backward of a scalar and a 3x3 root", [&] {
      autograd::backward(ctx, {product.sum(), product});
    });
    require_contains(second, "roots must be scalars", "the second root");
    require_contains(second, "root 1", "the second root");
    // The refused calls left the context usable.
    autograd::backward(ctx, {product.sum()});
    require_close("t4.grad() after the refusals", t4.grad(), t1.detach() + t2.detach());
    say("non-scalar roots: refused with \"roots must be scalars\"; the context stays usable");
  });
}

int concurrent_contexts() {
  return drive("concurrent_contexts", [] {
    constexpr int kThreads = 4, kIterations = 24;
    std::mutex errors_mutex;  // guards errors
    std::vector<std::string> errors;
    std::vector<std::thread> threads;
    for (int thread = 0; thread < kThreads; ++thread) {
      threads.emplace_back([&, thread] {
        try {
          Generator generator(100 + thread);
          for (int i = 0; i < kIterations; ++i) {
            const int target = 1 + (thread + i) % 3;
            switch ((thread + 2 * i) % 3) {
              case 0: check_docs_example_on(target, generator); break;
              case 1: check_nested_on(target, target % 3 + 1, generator); break;
              default: check_param_on(target, generator); break;
            }
          }
        } catch (const std::exception& error) {
          std::lock_guard<std::mutex> lock(errors_mutex);
          errors.push_back(str("thread ", thread, ": ", error.what()));
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    if (!errors.empty()) throw Failure(errors.front());
    say("concurrent contexts: ", kThreads, " threads x ", kIterations, " contexts matched the local reference");
  });
}

// Ranks 0 and 1 both drive contexts against ranks 2 and 3 at once.
int two_drivers() {
  static const std::string kSecondDriverDone = "dist_autograd_test/second_driver_done";
  return rpc::auto_init_rpc(nullptr,
                            rpc::on_ranks({0, 1},
                                          [] {
                                            constexpr int kIterations = 30;
                                            Generator generator(300 + get_rank());
                                            for (int i = 0; i < kIterations; ++i) {
                                              const int target = 2 + (i + get_rank()) % 2;
                                              switch (i % 3) {
                                                case 0: check_docs_example_on(target, generator); break;
                                                case 1: check_nested_on(target, 5 - target, generator); break;
                                                default: check_param_on(target, generator); break;
                                              }
                                            }
                                            say("driver ", get_worker_name(), ": ", kIterations,
                                                " contexts against worker2 and worker3 matched");
                                            if (get_rank() == 1) {
                                              rpc::agent().store().set(kSecondDriverDone, "1");
                                              return;
                                            }
                                            rpc::agent().store().get(kSecondDriverDone, 60s);
                                            expect_no_live_contexts(all_ranks());
                                            say("two_drivers: no live contexts on any worker");
                                          }),
                            test_options());
}

// Runs iteration(1..warmup + measured) and requires the heap of every rank (what its objects hold:
// rpc::testing::heap_in_use_bytes) to grow by at most `max_growth` over the last `measured`.
void require_flat_heap(const std::string& loop, int warmup, int measured, int64_t max_growth,
                       const std::function<void(int)>& iteration) {
  std::vector<int64_t> after_warmup;
  for (int i = 1; i <= warmup + measured; ++i) {
    iteration(i);
    if (i != warmup && i != warmup + measured) continue;
    expect_no_live_contexts(all_ranks());
    std::vector<int64_t> heap;
    for (int rank : all_ranks()) heap.push_back(ask(rank, &heap_bytes));
    if (i == warmup) {
      after_warmup = heap;
      continue;
    }
    for (int rank : all_ranks()) {
      const int64_t growth = heap[rank] - after_warmup[rank];
      say(loop, ": ", get_worker_name(rank), "'s heap in use ", after_warmup[rank] >> 10, " KiB after ", warmup,
          " iterations, ", growth >= 0 ? "+" : "", growth >> 10, " KiB over the next ", measured);
      require(growth <= max_growth, loop, ": ", get_worker_name(rank), "'s heap grew by ", growth >> 10, " KiB over ",
              measured, " iterations (at most ", max_growth >> 10, " KiB allowed)");
    }
  }
}

// 1,000 contexts of the docs example (64x64): every one correct, none left behind, and the heap
// of every rank flat between the 300th and the 1,000th.
int context_loop() {
  return drive("context_loop", [] {
    constexpr int kWarmup = 300, kMeasured = 700;
    // A leak of one 64x64 float64 tensor (32 KiB) per context would grow each callee's heap by
    // 7.3 MiB (each serves a third) and the caller's by 22 MiB; measured: under 0.2 MiB.
    constexpr int64_t kMaxGrowth = 2 << 20;
    Generator generator(15);
    const Clock::time_point start = Clock::now();
    require_flat_heap("context loop", kWarmup, kMeasured, kMaxGrowth, [&](int i) {
      Context ctx;
      const Tensor t1 = leaf({64, 64}, generator), t2 = leaf({64, 64}, generator), t4 = leaf({64, 64}, generator);
      const Tensor t3 = rpc_sync(1 + i % 3, &my_add, t1, t2);
      autograd::backward(ctx, {(t3 * t4).sum()});
      const Tensor r1 = copy_leaf(t1), r2 = copy_leaf(t2), r4 = copy_leaf(t4);
      const TensorList expected = reference_grads(((r1 + r2) * r4).sum(), {r1, r2, r4});
      require_close(str("iteration ", i, ": t1.grad()"), t1.grad(), expected[0]);
      require_close(str("iteration ", i, ": t2.grad()"), t2.grad(), expected[1]);
      require_close(str("iteration ", i, ": t4.grad()"), t4.grad(), expected[2]);
      require(get_gradients(ctx).size() == 3, "iteration ", i, ": get_gradients has ", get_gradients(ctx).size(),
              " entries");
    });
    say("context loop: ", kWarmup + kMeasured, " contexts in ", seconds_since(start), " s, flat memory on every rank");
  });
}

// 1,000 Hessian-vector products of a function spread over the three workers, each in a context of
// its own: every one correct, none left behind, and the heap of every rank flat between the
// 300th and the 1,000th.
int second_order_loop() {
  return drive("second_order_loop", [] {
    constexpr int kWarmup = 300, kMeasured = 700;
    // Every worker takes part in every iteration: a leak of one 64x64 float64 tensor (32 KiB) per
    // iteration would grow a heap by 22 MiB; measured: under 0.2 MiB.
    constexpr int64_t kMaxGrowth = 2 << 20;
    Generator generator(19);
    const Clock::time_point start = Clock::now();
    require_flat_heap("second-order loop", kWarmup, kMeasured, kMaxGrowth, [&](int i) {
      const Tensor x = leaf({64, 64}, generator), v = randn({64, 64}, {.dtype = kFloat64}, generator);
      const Tensor rx = copy_leaf(x);
      const Tensor ra = sin(rx) * 2.0;
      const Tensor rg = autograd::grad({(ra * ra * (sin(rx) * 2.0)).sum()}, {rx}, {.create_graph = true})[0];
      const Tensor r_hvp = autograd::grad({(rg * v).sum()}, {rx})[0];
      Context ctx;
      const Tensor loss = (rpc_sync(2, &square, rpc_sync(1, &sin_twice, x)) * rpc_sync(3, &sin_twice, x)).sum();
      const Tensor g = grad(ctx, {loss}, {x}, {.create_graph = true})[0];
      require_close(str("iteration ", i, ": the Hessian-vector product"), grad(ctx, {(g * v).sum()}, {x})[0], r_hvp);
    });
    say("second-order loop: ", kWarmup + kMeasured, " Hessian-vector products in ", seconds_since(start),
        " s, flat memory on every rank");
  });
}

int forward_error() {
  return drive("forward_error", [] {
    Generator generator(16);
    Context ctx;
    const Tensor x = leaf({3, 3}, generator);
    const RemoteError error = expect_remote_error("an exception in forward", [&] { rpc_sync(1, &failing_forward, x); });
    require(error.worker() == "worker1" && error.function() == "failing_forward", "the error names ", error.worker(),
            "/", error.function());
    require_contains(error.what(), "remote exception in failing_forward on worker1: failing_forward: refused a float64",
                     "the forward error");
    // The context is still usable.
    autograd::backward(ctx, {rpc_sync(2, &square, x).sum()});
    require_close("x.grad() after the failed call", x.grad(), x.detach() * 2.0);
    say("forward error: a RemoteError naming worker1 and failing_forward; the context stays usable");
  });
}

// A pass that fails: the error reaches the driver naming `fragments`; the context stays usable,
// as PyTorch's: a further pass in it, through workers the failed one did not reach too, gives the
// right gradients (and drive() requires every context released in the end).
void check_failing_pass(const std::string& what, const Tensor& loss, const Context& ctx,
                        const std::vector<std::string>& fragments, Generator& generator) {
  const std::string message = expect_error(what, [&] { autograd::backward(ctx, {loss}); });
  for (const std::string& fragment : fragments) require_contains(message, fragment, what);
  const Tensor z = leaf({3, 3}, generator);
  autograd::backward(ctx, {(rpc_sync(2, &square, z) + rpc_sync(3, &apply_param, z)).sum()});
  const Tensor rz = copy_leaf(z), rp = reference_params()[3];
  require_close(what + ": z.grad() of the pass after it", z.grad(),
                reference_grads((rz * rz + param_math(rz, rp)).sum(), {rz})[0]);
}

int backward_error() {
  return drive("backward_error", [] {
    Generator generator(17);
    {
      Context ctx;
      const Tensor x = leaf({3, 3}, generator);
      const Tensor loss = (rpc_sync(1, &throwing_backward, x) * x).sum();
      check_failing_pass("a backward formula that throws on worker1", loss, ctx,
                         {"worker1", "ThrowingBackward: this formula always fails"}, generator);
    }
    {
      Context ctx;
      const Tensor x = leaf({3, 3}, generator);
      const Tensor loss = rpc_sync(2, &nested_throwing_backward, x, int64_t{3}).sum();
      check_failing_pass("a backward formula that throws on worker3, reached through worker2", loss, ctx,
                         {"on worker2", "on worker3", "ThrowingBackward: this formula always fails"}, generator);
    }
    {
      Context ctx;
      const Tensor x = leaf({3, 3}, generator);
      const Tensor loss = (rpc_sync(1, &throwing_hook, x) + rpc_sync(2, &square, x)).sum();
      check_failing_pass("a hook that throws on worker1", loss, ctx,
                         {"worker1", "throwing_hook: this hook refuses every gradient"}, generator);
    }
    say("backward errors: each reached the driver naming the worker; a further pass in the context succeeded");
  });
}

// Runs `fail_the_pass` on the driver, in a world whose worker1 dies during it (the other ranks
// serve meanwhile), then requires the survivors to have released every context.
int with_worker1_killed(const std::string& scenario, const std::function<void(Generator&)>& fail_the_pass) {
  const std::string done = str("dist_autograd_test/", scenario, "_done");
  const std::string left = str("dist_autograd_test/", scenario, "_left/");
  rpc::init_rpc(test_options());
  rpc::barrier();  // every rank's RPC is running before the first call
  if (get_rank() != 0) {
    rpc::agent().store().get(done, 60s);  // serves meanwhile; worker1 dies here
    rpc::agent().store().set(str(left, get_rank()), "1");
    rpc::shutdown(false);  // cancels the release still on its way to the dead worker1
    return 0;
  }
  Generator generator(18);
  fail_the_pass(generator);
  expect_no_live_contexts({0, 2, 3});
  say(scenario, ": no live contexts on the survivors");
  rpc::agent().store().set(done, "1");
  rpc::agent().store().wait({str(left, 2), str(left, 3)}, 60s);  // this rank hosts the Store
  rpc::shutdown(false);
  return 0;
}

// Requires `pass` to fail within 10 s (the calls' timeout is 30 s) naming worker3, which waited
// for worker1, and worker1.
void expect_pass_failure_naming_worker1(const std::string& what, const std::function<void()>& pass) {
  const Clock::time_point start = Clock::now();
  const std::string message = expect_error(what, pass);
  const double seconds = seconds_since(start);
  require(seconds < 10, what, ": the error took ", seconds, " s");
  require_contains(message, "worker3", what);
  require_contains(message, "worker1", what);
  say(what, ": error at the driver after ", seconds, " s");
}

// worker1 dies when its gradient arrives, in the middle of a pass that also reaches worker2 and
// (waiting for worker1) worker3: the driver gets an error well within the call timeout, and the
// survivors release the context.
int killed_worker() {
  return with_worker1_killed("killed_worker", [](Generator& generator) {
    Context ctx;
    const Tensor x = leaf({3, 3}, generator);
    const Tensor loss = (rpc_sync(2, &square, x) + rpc_sync(3, &forward_to_dying, x, int64_t{1})).sum();
    expect_pass_failure_naming_worker1("worker killed mid-backward", [&] { autograd::backward(ctx, {loss}); });
  });
}

// The same world, worker1 dying in a second-order pass: the first pass, with create_graph, went
// through it and left each worker's part of the gradient's graph in the context; the pass
// differentiating the gradient fails, and every survivor releases that graph with the context.
int killed_in_second_order() {
  return with_worker1_killed("killed_in_second_order", [](Generator& generator) {
    Context ctx;
    const Tensor x = leaf({3, 3}, generator);
    const Tensor loss = (rpc_sync(2, &square, x) + rpc_sync(3, &forward_to_dying_in_second_order, x, int64_t{1})).sum();
    const Tensor gradient = grad(ctx, {loss}, {x}, {.create_graph = true})[0];
    require(gradient.requires_grad(), "the gradient of the create_graph pass does not require grad");
    expect_pass_failure_naming_worker1("worker killed in a second-order pass",
                                       [&] { grad(ctx, {(gradient * gradient).sum()}, {x}); });
  });
}

// RPC started without distributed autograd's interceptor (rpc::start_agent): a context is refused,
// naming the cure, rather than recording nothing across workers.
int without_interceptor() {
  rpc::start_agent(test_options());
  if (get_rank() == 0) {
    const std::string message = expect_error("a context without the interceptor", [] { Context ctx; });
    require_contains(message, "without distributed autograd's call interceptor", "the error");
    require_contains(message, "init_rpc", "the error");
    say("without the interceptor: autograd::Context refused: ", message);
  }
  rpc::shutdown(true);
  return 0;
}

const std::map<std::string, std::function<int()>>& scenarios() {
  static const auto* table = new std::map<std::string, std::function<int()>>{
      {"docs_example", docs_example},
      {"chain", chain},
      {"ring", ring},
      {"nested", nested},
      {"several_results", several_results},
      {"mixed_requires_grad", mixed_requires_grad},
      {"no_grad", no_grad},
      {"worker_params_only", worker_params_only},
      {"nested_contexts", nested_contexts},
      {"call_order_sums", call_order_sums},
      {"same_tensor_two_workers", same_tensor_two_workers},
      {"higher_order", higher_order},
      {"debug_info_and_backward_by_id", debug_info_and_backward_by_id},
      {"overlapping_backwards", overlapping_backwards},
      {"worker_leaves", worker_leaves},
      {"multiple_roots", multiple_roots},
      {"retain_graph", retain_graph},
      {"grad_allow_unused", grad_allow_unused},
      {"grad_below_inputs", grad_below_inputs},
      {"inputs_filter", inputs_filter},
      {"non_scalar_roots", non_scalar_roots},
      {"concurrent_contexts", concurrent_contexts},
      {"two_drivers", two_drivers},
      {"context_loop", context_loop},
      {"second_order_loop", second_order_loop},
      {"forward_error", forward_error},
      {"backward_error", backward_error},
      {"killed_worker", killed_worker},
      {"killed_in_second_order", killed_in_second_order},
      {"without_interceptor", without_interceptor},
  };
  return *table;
}

}  // namespace
}  // namespace distgrad::autograd

int main(int argc, char** argv) {
  return distgrad::rpc::testing::scenario_main(argc, argv, distgrad::autograd::scenarios());
}
