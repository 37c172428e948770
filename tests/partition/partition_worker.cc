// The worker of the multi-process partition tests: `partition_worker SCENARIO`, run as every rank
// of a world by tests/partition/remote_call_test.cc (through tests/rpc/multiprocess.h). Rank 0
// drives each scenario through remote_*_call / parallelize* and checks what comes back; the
// other ranks serve. A failed check ends rank 0 with "[worker0] error: ..." and exit code 1.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/ops.h"
#include "distgrad.h"
#include "tests/rpc/scenario.h"

namespace partition_worker {
namespace {

namespace dg = distgrad;
using dg::Tensor;

void check(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error("check failed: " + what);
}

void check_close(const Tensor& actual, const Tensor& expected, const std::string& what, double rtol = 1e-12) {
  check(actual.defined(), what + ": undefined, expected a tensor of shape " + dg::shape_str(expected.sizes()));
  check(actual.sizes() == expected.sizes(),
        what + ": shape " + dg::shape_str(actual.sizes()) + ", expected " + dg::shape_str(expected.sizes()));
  check(
      dg::untracked::allclose(actual, expected, rtol, 1e-12),
      what + ": values differ; max |difference| " +
          std::to_string(dg::untracked::max(dg::untracked::abs(dg::untracked::sub(actual, expected))).item<double>()));
}

Tensor batch(int64_t rows, int64_t columns) {
  return dg::untracked::reshape(dg::arange(0.0, static_cast<double>(rows * columns), 1.0, {.dtype = dg::kFloat64}),
                                {rows, columns});
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Registered functions.

std::pair<int64_t, Tensor> doubled_with_rank(Tensor x) { return {dg::get_rank(), dg::untracked::mul(x, 2.0)}; }
DISTGRAD_REMOTE(doubled_with_rank);

Tensor total(Tensor x) { return dg::sum(x); }
DISTGRAD_REMOTE(total);

std::tuple<Tensor, double> mean_and_rows(Tensor x) { return {dg::mean(x), static_cast<double>(x.size(0))}; }
DISTGRAD_REMOTE(mean_and_rows);

Tensor weighted_total(Tensor x, Tensor weights) { return dg::sum(dg::mul(x, weights)); }
DISTGRAD_REMOTE(weighted_total);

int64_t rank_plus(int64_t offset) { return dg::get_rank() + offset; }
DISTGRAD_REMOTE(rank_plus);

Tensor fails_on_rank_two(Tensor x) {
  if (dg::get_rank() == 2) throw std::invalid_argument("no samples wanted on rank 2");
  return x;
}
DISTGRAD_REMOTE(fails_on_rank_two);
// The rows, after `milliseconds` on rank 2 (none elsewhere).
Tensor slow_on_rank_two(Tensor x, int64_t milliseconds) {
  if (dg::rpc::get_rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
  return x;
}
DISTGRAD_REMOTE(slow_on_rank_two);

// Nested: a worker splits its part again over every rank.
Tensor fanned_out_total(Tensor row) { return dg::parallelize(total, dg::batch_partitioner, dg::sum_reducer)(row); }
DISTGRAD_REMOTE(fanned_out_total);

// A MAML step in float64, small enough to compare to the local computation at 1e-12.
struct TinyNet : dg::nn::Module {
  TinyNet() {
    fc1 = register_module("fc1", std::make_shared<dg::nn::Linear>(1, 8));
    fc2 = register_module("fc2", std::make_shared<dg::nn::Linear>(8, 1));
    to(dg::kFloat64);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(dg::tanh(fc1->forward(x))); }
  std::string name() const override { return "TinyNet"; }
  std::shared_ptr<dg::nn::Linear> fc1, fc2;
};

struct Task {
  Tensor x_support, y_support, x_query, y_query;
};
DISTGRAD_CODEC(Task, x_support, y_support, x_query, y_query);

Tensor adapt_and_eval(dg::nn::ParamDict params, Task task, int inner_steps) {
  static TinyNet net;  // shared by the threads serving calls at once
  dg::optim::MetaSGD inner(params, 0.1);
  for (int step = 0; step < inner_steps; ++step) {
    params = inner.step(dg::nn::mse_loss(dg::nn::functional_call(net, params, task.x_support), task.y_support));
  }
  return dg::nn::mse_loss(dg::nn::functional_call(net, params, task.x_query), task.y_query);
}
DISTGRAD_REMOTE(adapt_and_eval);

// adapt_and_eval, except that the process running it on `dying_rank` dies first (SIGKILL): a
// worker lost in the middle of an iteration's forward.
Tensor adapt_and_eval_or_die(dg::nn::ParamDict params, Task task, int inner_steps, int64_t dying_rank) {
  if (dg::get_rank() == dying_rank) {
    std::fprintf(stderr, "[%s] adapt_and_eval_or_die: raising SIGKILL\n", dg::get_worker_name().c_str());
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  return adapt_and_eval(std::move(params), std::move(task), inner_steps);
}
DISTGRAD_REMOTE(adapt_and_eval_or_die);

// x, but the process running it on rank 2 dies after `milliseconds` (SIGKILL).
Tensor dies_on_rank_two_after(Tensor x, int64_t milliseconds) {
  if (dg::get_rank() == 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
    std::fprintf(stderr, "[worker2] dies_on_rank_two_after: raising SIGKILL\n");
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  return x;
}
DISTGRAD_REMOTE(dies_on_rank_two_after);

int64_t live_contexts() { return static_cast<int64_t>(dg::autograd::get_debug_info().num_autograd_contexts); }
DISTGRAD_REMOTE(live_contexts);

namespace {

// ---------------------------------------------------------------------------------------------
// Scenarios (rank 0 drives).

// Every partitioner kind, with and without reducers, in a world of 3.
void calls() {
  const Tensor x = batch(7, 2);
  // batch_partitioner, no reducer: chunks 2, 2, 3 on ranks 0, 1, 2, in partition order.
  const auto chunks = dg::remote_sync_call(doubled_with_rank, dg::args(x), dg::batch_partitioner);
  check(chunks.size() == 3, "batch_partitioner over 3 workers makes 3 calls, made " + std::to_string(chunks.size()));
  std::vector<Tensor> doubled;
  for (size_t i = 0; i < chunks.size(); ++i) {
    check(chunks[i].first == static_cast<int64_t>(i),
          "chunk " + std::to_string(i) + " ran on rank " + std::to_string(chunks[i].first));
    doubled.push_back(chunks[i].second);
  }
  check(chunks[2].second.size(0) == 3, "the last chunk takes the remainder");
  check_close(dg::cat(doubled), dg::untracked::mul(x, 2.0), "the chunks in partition order");

  // exclusive_batch_partitioner: one call per sample, round-robin, dim 0 kept (size 1), as TorchOpt's.
  const auto samples = dg::parallelize(doubled_with_rank, dg::exclusive_batch_partitioner)(x);
  check(samples.size() == 7, "exclusive makes one call per sample");
  for (size_t i = 0; i < samples.size(); ++i) {
    check(samples[i].first == static_cast<int64_t>(i % 3), "sample " + std::to_string(i) + " round-robin");
    check_close(samples[i].second, dg::untracked::mul(dg::untracked::narrow(x, 0, static_cast<int64_t>(i), 1), 2.0),
                "sample");
  }
  // keepdim = false selects the sample away.
  const auto selected =
      dg::parallelize(doubled_with_rank, dg::dim_partitioner(0, {.exclusive = true, .keepdim = false}))(x);
  check_close(selected[4].second, dg::untracked::mul(dg::untracked::select(x, 0, 4), 2.0), "sample 4, dim dropped");
  const auto columns = dg::remote_sync_call(doubled_with_rank, dg::args(x),
                                            dg::dim_partitioner(1, {.exclusive = true, .keepdim = false}));
  check(columns.size() == 2, "dim 1 of size 2 makes 2 calls");
  check_close(columns[1].second, dg::untracked::mul(dg::untracked::select(x, 1, 1), 2.0), "column 1, dim dropped");

  // Reducers: the default (batch_partitioner + mean_reducer), a sum, a tuple field by field.
  const double mean_of_totals = (dg::sum(dg::untracked::narrow(x, 0, 0, 2)).item<double>() +
                                 dg::sum(dg::untracked::narrow(x, 0, 2, 2)).item<double>() +
                                 dg::sum(dg::untracked::narrow(x, 0, 4, 3)).item<double>()) /
                                3;
  check(dg::parallelize(total)(x).item<double>() == mean_of_totals, "parallelize(fn) is batch + mean");
  check(dg::parallelize(total, dg::batch_partitioner, dg::sum_reducer)(x).item<double>() == dg::sum(x).item<double>(),
        "sum_reducer");
  const auto [mean, rows] = dg::parallelize(mean_and_rows, dg::batch_partitioner, dg::mean_reducer)(x);
  check(rows == 7.0 / 3, "the mean of the row counts is 7/3, got " + std::to_string(rows));
  check(mean.dim() == 0, "the tensor field is folded to a scalar");

  // A worker as the partitioner: unsplit, there; by rank or by name.
  const auto on_two = dg::remote_sync_call(doubled_with_rank, dg::args(x), 2);
  check(on_two.size() == 1 && on_two[0].first == 2, "a rank as partitioner makes one call, there");
  check_close(on_two[0].second, dg::untracked::mul(x, 2.0), "unsplit");
  check(dg::remote_sync_call(doubled_with_rank, dg::args(x), "worker1").at(0).first == 1, "a name as partitioner");

  // Custom partitioner and reducer.
  auto backwards = [](const std::tuple<Tensor>& arguments) {
    return dg::Partitions<Tensor>{{2, arguments}, {1, arguments}, {0, arguments}};
  };
  auto ranks_in_order = [](const std::vector<std::pair<int64_t, Tensor>>& results) {
    std::string ranks;
    for (const auto& [rank, tensor] : results) ranks += std::to_string(rank);
    return ranks;
  };
  const std::string order = dg::remote_sync_call(doubled_with_rank, dg::args(x), backwards, ranks_in_order);
  check(order == "210", "a custom partitioner's calls come back in its order, got " + order);

  // Broadcast values with split tensors; no tensor at all runs on the caller.
  const Tensor weights = dg::untracked::mul(dg::ones({7, 2}, {.dtype = dg::kFloat64}), 0.5);
  check(dg::parallelize(weighted_total, dg::batch_partitioner, dg::sum_reducer)(x, weights).item<double>() ==
            dg::sum(x).item<double>() * 0.5,
        "every tensor is split alike");
  check(dg::remote_sync_call(rank_plus, dg::args(int64_t{10}), dg::batch_partitioner).at(0) == 10,
        "no tensors: one call, on rank 0");

  // Workers chosen by name and by rank.
  const auto chosen =
      dg::remote_sync_call(doubled_with_rank, dg::args(x), dg::dim_partitioner(0, {.workers = {"worker2", 1}}));
  check(chosen.size() == 2 && chosen[0].first == 2 && chosen[1].first == 1, "the workers named, in their order");
  check(chosen[1].second.size(0) == 4, "the last of 2 workers takes the remainder");

  // A batch-size mismatch is reported before any call.
  try {
    dg::remote_sync_call(weighted_total, dg::args(x, dg::ones({5, 2}, {.dtype = dg::kFloat64})));
    check(false, "a batch-size mismatch must throw");
  } catch (const dg::Error& error) {
    check(std::string(error.what()).find("Batch size mismatch on dim=0. Expected 7, got 5 (shape: [5, 2]).") !=
              std::string::npos,
          std::string("the mismatch message, got: ") + error.what());
  }
}

// parallelize_async and remote_async_call: futures, many in flight (world of 2).
void async_calls() {
  const Tensor x = batch(6, 3);
  auto summed = dg::parallelize_async(total, dg::batch_partitioner, dg::sum_reducer)(x);
  auto elsewhere = dg::remote_async_call(doubled_with_rank, dg::args(x), 1);
  auto unreduced = dg::parallelize_async(total, dg::exclusive_batch_partitioner)(x);
  std::vector<dg::rpc::Future<Tensor>> many;
  for (int i = 0; i < 50; ++i)
    many.push_back(dg::parallelize_async(total)(dg::untracked::add(x, static_cast<double>(i))));
  check(summed.get().item<double>() == dg::sum(x).item<double>(), "async sum");
  check(elsewhere.get().at(0).first == 1, "async on worker 1");
  check(unreduced.get().size() == 6, "async unreduced: one result per sample");
  for (int i = 0; i < 50; ++i) {
    const double expected = dg::sum(dg::untracked::add(x, static_cast<double>(i))).item<double>() / 2;
    check(many[static_cast<size_t>(i)].get().item<double>() == expected, "call " + std::to_string(i) + " of 50");
  }
}

// A parallelized function that parallelizes again on the worker; gradients through both levels.
void nested() {
  const Tensor x = dg::untracked::add(batch(3, 6), 1.0);
  x.requires_grad_();
  dg::autograd::Context context;
  const std::vector<Tensor> totals = dg::remote_sync_call(
      fanned_out_total, dg::args(x), dg::dim_partitioner(0, {.exclusive = true, .keepdim = false}));
  check(totals.size() == 3, "one call per row");
  for (int64_t row = 0; row < 3; ++row) {
    check(totals[static_cast<size_t>(row)].item<double>() == dg::sum(dg::untracked::select(x, 0, row)).item<double>(),
          "row " + std::to_string(row) + " summed over the workers");
  }
  const Tensor loss = dg::sum(dg::mul(dg::stack(totals), dg::stack(totals)));
  dg::autograd::backward(context, {loss});
  // d/dx of sum_r (sum_j x_rj)^2 = 2 sum_j x_rj, on every element of row r.
  const Tensor expected =
      dg::untracked::mul(dg::untracked::expand(dg::untracked::sum(x.detach(), {1}, true), {3, 6}), 2.0);
  check_close(x.grad(), expected, "gradients through two levels of parallelize");
}

// A batch of size 0 makes no calls: without a reducer the result is an empty list (as TorchOpt's);
// with one, an error at the call, naming the function.
void empty_batch() {
  const Tensor empty = batch(0, 2);
  check(dg::remote_sync_call(total, dg::args(empty), dg::batch_partitioner).empty(), "no reducer: an empty list");
  check(dg::parallelize(doubled_with_rank, dg::exclusive_batch_partitioner)(empty).empty(),
        "parallelize, no reducer: an empty list");
  check(dg::parallelize_async(total, dg::batch_partitioner)(empty).get().empty(), "async, no reducer: an empty list");
  auto no_calls = [](const std::tuple<Tensor>&) { return dg::Partitions<Tensor>{}; };
  check(dg::remote_sync_call(total, dg::args(batch(2, 2)), no_calls).empty(), "a partitioner making no calls");

  const std::vector<std::function<void()>> reduced = {
      [&] { dg::remote_async_call(total, dg::args(empty), dg::batch_partitioner, dg::mean_reducer); },
      [&] { dg::parallelize(total)(empty); },
      [&] { dg::parallelize_async(total, dg::exclusive_batch_partitioner, dg::sum_reducer)(empty); },
      [&] { dg::remote_sync_call(total, dg::args(batch(2, 2)), no_calls, dg::sum_reducer); },
  };
  for (size_t i = 0; i < reduced.size(); ++i) {
    const std::string what = "reduced empty call " + std::to_string(i);
    try {
      reduced[i]();  // throws at the call, before any future
      check(false, what + " must throw");
    } catch (const dg::Error& error) {
      const std::string message = error.what();
      check(message.find("total: the partitioner made no calls (an empty batch?), so the reducer has nothing to "
                         "reduce") != std::string::npos,
            what + ": the message, got: " + message);
    }
  }
  check(dg::remote_sync_call(total, dg::args(batch(2, 2)), 1).at(0).item<double>() == 6,
        "the world still serves calls");
}

// A failure in one partition fails the whole call, naming the worker and the function.
void failure() {
  const Tensor x = batch(6, 1);
  for (bool async : {false, true}) {
    try {
      if (async) {
        dg::parallelize_async(fails_on_rank_two, dg::batch_partitioner)(x).get();
      } else {
        dg::remote_sync_call(fails_on_rank_two, dg::args(x), dg::batch_partitioner, dg::mean_reducer);
      }
      check(false, "a failed partition must fail the call");
    } catch (const dg::rpc::RemoteError& error) {
      const std::string message = error.what();
      check(error.worker() == "worker2", "the failed worker is named, got " + error.worker());
      check(message.find("fails_on_rank_two") != std::string::npos, "the function is named: " + message);
      check(message.find("no samples wanted on rank 2") != std::string::npos, "the remote message: " + message);
    }
  }
  check(dg::remote_sync_call(fails_on_rank_two, dg::args(x), 1).at(0).size(0) == 6, "the world still serves calls");
}

// A timeout given by name (RemoteCallOptions), with and without a reducer and through parallelize:
// rank 2's partition takes 3 s, the calls give it 300 ms.
void timeout() {
  using namespace std::chrono_literals;
  const Tensor x = batch(6, 1);
  const std::vector<std::function<void()>> timed_out = {
      [&] {
        dg::remote_sync_call(slow_on_rank_two, dg::args(x, int64_t{3000}), dg::batch_partitioner, {.timeout = 300ms});
      },
      [&] {
        dg::remote_sync_call(slow_on_rank_two, dg::args(x, int64_t{3000}), dg::batch_partitioner, dg::sum_reducer,
                             {.timeout = 300ms});
      },
      [&] { dg::parallelize(slow_on_rank_two, dg::batch_partitioner, {.timeout = 300ms})(x, 3000); },
      [&] {
        dg::parallelize_async(slow_on_rank_two, dg::batch_partitioner, dg::sum_reducer, {.timeout = 300ms})(x, 3000)
            .get();
      },
  };
  for (size_t i = 0; i < timed_out.size(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    try {
      timed_out[i]();
      check(false, "timed-out call " + std::to_string(i) + " must fail");
    } catch (const dg::rpc::RemoteError& error) {
      check(error.worker() == "worker2", "the timed-out worker is named, got " + error.worker());
      check(error.code() == dg::rpc::StatusCode::kDeadlineExceeded,
            "call " + std::to_string(i) + " failed with another code than DEADLINE_EXCEEDED: " + error.what());
    }
    check(std::chrono::steady_clock::now() - start < 2500ms, "call " + std::to_string(i) + " waited past its timeout");
  }
  check(
      dg::remote_sync_call(slow_on_rank_two, dg::args(x, int64_t{0}), dg::batch_partitioner, {.timeout = 30s}).size() ==
          3,
      "a call within its timeout");
  // Under reissue_lost_partitions the late partition goes to the next rank round the world (0),
  // and the call completes with every row in order; a late worker is not recorded lost.
  const auto start = std::chrono::steady_clock::now();
  const auto reissued = dg::remote_sync_call(slow_on_rank_two, dg::args(x, int64_t{3000}), dg::batch_partitioner,
                                             {.timeout = 300ms, .reissue_lost_partitions = true});
  check(std::chrono::steady_clock::now() - start < 2500ms, "the reissued call waited for the late worker");
  check(reissued.size() == 3, "the reissued call returns every partition");
  check_close(dg::cat(reissued), x, "the reissued call's rows in partition order");
  check(dg::rpc::lost_workers().empty(), "a late worker is not recorded lost");
}

// `count` sine-regression tasks of 4 shots each (float64), stacked; the support inputs require
// grad, so gradients reach split inputs too.
Task sinusoid_tasks(int64_t count) {
  constexpr int64_t kShots = 4;
  Task tasks;
  tasks.x_support =
      dg::untracked::sub(dg::untracked::mul(dg::rand({count, kShots, 1}, {.dtype = dg::kFloat64}), 4.0), 2.0);
  tasks.x_query =
      dg::untracked::sub(dg::untracked::mul(dg::rand({count, kShots, 1}, {.dtype = dg::kFloat64}), 4.0), 2.0);
  tasks.y_support = dg::untracked::sin(tasks.x_support);
  tasks.y_query = dg::untracked::sin(tasks.x_query);
  tasks.x_support.requires_grad_();
  return tasks;
}

// Gradients through a parallelized MAML step equal the local computation (float64).
void maml_gradients() {
  dg::manual_seed(3);
  TinyNet net;
  constexpr int64_t kTasks = 5;
  constexpr int kInnerSteps = 2;
  Task tasks = sinusoid_tasks(kTasks);

  // Local: every task here, mean of the losses.
  std::vector<Tensor> local_losses;
  for (int64_t task = 0; task < kTasks; ++task) {
    auto pick = [&](const Tensor& t) { return dg::select(t, 0, task); };
    local_losses.push_back(adapt_and_eval(
        dg::nn::module_clone(net, dg::nn::CloneBy::kReference),
        {pick(tasks.x_support), pick(tasks.y_support), pick(tasks.x_query), pick(tasks.y_query)}, kInnerSteps));
  }
  const Tensor local_loss = dg::mean(dg::stack(local_losses));
  local_loss.backward();
  std::map<std::string, Tensor> local_gradients;
  for (const auto& [name, parameter] : net.named_parameters())
    local_gradients[name] = dg::untracked::clone(parameter.grad());
  const Tensor local_input_gradient = dg::untracked::clone(tasks.x_support.grad());
  net.zero_grad();
  tasks.x_support.set_grad(Tensor());

  // Distributed: one task per call, round-robin over 3 workers.
  dg::autograd::Context context;
  const auto meta_loss =
      dg::parallelize(adapt_and_eval, dg::dim_partitioner(0, {.exclusive = true, .keepdim = false}), dg::mean_reducer);
  const Tensor loss = meta_loss(dg::nn::module_clone(net, dg::nn::CloneBy::kClone), tasks, kInnerSteps);
  check_close(loss.detach(), local_loss.detach(), "the meta-loss", 1e-12);
  dg::autograd::backward(context, {loss});
  for (const auto& [name, parameter] : net.named_parameters()) {
    check(parameter.grad().defined(), "parameter " + name + " has a gradient");
    check_close(parameter.grad(), local_gradients.at(name), "the meta-gradient of " + name, 1e-10);
  }
  check_close(tasks.x_support.grad(), local_input_gradient, "the gradient of the split support inputs", 1e-10);
}

// The gradients of `net`'s parameters and of the tasks' support inputs, cleared after.
std::map<std::string, Tensor> take_gradients(TinyNet& net, Task& tasks) {
  std::map<std::string, Tensor> gradients;
  for (const auto& [name, parameter] : net.named_parameters()) {
    check(parameter.grad().defined(), "parameter " + name + " has a gradient");
    gradients[name] = dg::untracked::clone(parameter.grad());
  }
  gradients["x_support"] = dg::untracked::clone(tasks.x_support.grad());
  net.zero_grad();
  tasks.x_support.set_grad(Tensor());
  return gradients;
}

void check_equal(const Tensor& actual, const Tensor& expected, const std::string& what) {
  check(actual.sizes() == expected.sizes(), what + ": shape " + dg::shape_str(actual.sizes()));
  const double difference = dg::untracked::max(dg::untracked::abs(dg::untracked::sub(actual, expected))).item<double>();
  std::ostringstream message;
  message << what << ": differs from the undisturbed step by up to " << std::scientific << difference;
  check(difference == 0, message.str());
}

// A parallelized MAML step of `net` over `tasks` (one per call, 2 inner steps), with
// reissue_lost_partitions as given; the worker `dying_rank` dies in its forward (-1: none).
// Returns the meta-loss and the gradients (take_gradients).
std::pair<Tensor, std::map<std::string, Tensor>> maml_step(TinyNet& net, Task& tasks, bool reissue,
                                                           int64_t dying_rank) {
  dg::autograd::Context context;
  const auto meta_loss =
      dg::parallelize(adapt_and_eval_or_die, dg::dim_partitioner(0, {.exclusive = true, .keepdim = false}),
                      dg::mean_reducer, {.reissue_lost_partitions = reissue});
  const Tensor loss = meta_loss(dg::nn::module_clone(net, dg::nn::CloneBy::kClone), tasks, 2, dying_rank);
  dg::autograd::backward(context, {loss});
  return {loss.detach(), take_gradients(net, tasks)};
}

// Requires `survivors` to hold no distributed autograd context within 10 s (releases travel
// without being waited for).
void expect_no_context_on(const std::vector<int>& survivors) {
  using namespace std::chrono_literals;
  for (int rank : survivors) {
    const auto waiting = std::chrono::steady_clock::now();
    while (dg::rpc::rpc_sync(rank, live_contexts) != 0) {
      check(std::chrono::steady_clock::now() - waiting < 10s,
            dg::get_worker_name(rank) + " still holds a context after 10 s");
      std::this_thread::sleep_for(1ms);
    }
  }
}

// The world of 4 (ranks 0-3) loses worker3, then worker2, each killed by the task it was sent in
// a parallelized MAML step's forward. Without the policy the call fails naming worker3; with it
// the lost workers' partitions go to live workers and the step's loss and meta-gradients are an
// undisturbed step's, bit for bit; the lost workers then leave the partitioners' lists, and the
// survivors hold no context. The survivors end with a graceful shutdown, without the lost.
void lost_workers() {
  using namespace std::chrono_literals;
  dg::manual_seed(5);
  TinyNet net;
  Task tasks = sinusoid_tasks(6);
  const auto step = [&](bool reissue, int64_t dying_rank) { return maml_step(net, tasks, reissue, dying_rank); };
  const auto [undisturbed_loss, undisturbed_gradients] = step(false, -1);

  const auto start = std::chrono::steady_clock::now();
  try {
    step(false, 3);
    check(false, "without the policy, a step whose worker3 dies must fail");
  } catch (const dg::rpc::RemoteError& error) {
    check(error.worker() == "worker3", std::string("the lost worker is named: ") + error.what());
    check(error.code() == dg::rpc::StatusCode::kUnavailable, std::string("UNAVAILABLE: ") + error.what());
  }
  check(std::chrono::steady_clock::now() - start < 10s, "the failure took 10 s or more");
  check(dg::rpc::lost_workers().empty(), "without the policy no worker is recorded lost");

  const auto [loss, gradients] = step(true, 2);
  check_equal(loss, undisturbed_loss, "the meta-loss");
  for (const auto& [name, gradient] : gradients) check_equal(gradient, undisturbed_gradients.at(name), name);
  check(dg::rpc::lost_workers() == std::vector<int>{2, 3}, "worker2 and worker3 are recorded lost");
  namespace testing = dg::rpc::testing;
  testing::require_contains(
      testing::expect_error(
          "a partitioner of lost workers only",
          [&] {
            dg::parallelize(doubled_with_rank, dg::dim_partitioner(0, {.workers = {2, 3}}))(batch(2, 1));
          }),
      "dim_partitioner: every worker it may use is lost (worker2, worker3)", "the error");
  testing::require_contains(testing::expect_error("a lost rank out of the world", [] { dg::rpc::mark_worker_lost(4); }),
                            "mark_worker_lost: expected a rank of this world of 4, found 4", "the error");

  const auto samples = dg::parallelize(doubled_with_rank, dg::exclusive_batch_partitioner)(batch(6, 1));
  for (size_t i = 0; i < samples.size(); ++i) {
    check(samples[i].first == static_cast<int64_t>(i % 2), "sample " + std::to_string(i) + " ran on rank " +
                                                               std::to_string(samples[i].first) + ", not rank " +
                                                               std::to_string(i % 2) + " of the live workers 0 and 1");
  }
  expect_no_context_on({0, 1});
  std::printf(
      "lost_workers: without the policy the step failed naming worker3; with it the step equals the "
      "undisturbed one, worker2 and worker3 are lost, the next call used ranks 0 and 1 only, and the "
      "survivors hold no context\n");
}

// A call whose context the caller released before its worker was lost is not reissued (a new
// call would leave a context on its callee that nothing releases): the future fails as without
// the policy, the worker is recorded lost (the world ends without it), and the callees hold no
// context. World of 3; worker2 dies 300 ms into its call.
void abandoned_call() {
  using namespace std::chrono_literals;
  dg::rpc::Future<std::vector<Tensor>> result;
  {
    dg::autograd::Context context;
    const Tensor x = batch(3, 2);
    x.requires_grad_();
    result =
        dg::parallelize_async(dies_on_rank_two_after, dg::batch_partitioner, {.reissue_lost_partitions = true})(x, 300);
    // The other calls are answered by now: the context's release cannot overtake them.
    std::this_thread::sleep_for(100ms);
  }
  try {
    result.get();
    check(false, "a call whose context was released must not be reissued");
  } catch (const dg::rpc::RemoteError& error) {
    check(error.worker() == "worker2", std::string("the lost worker is named: ") + error.what());
    check(error.code() == dg::rpc::StatusCode::kUnavailable, std::string("UNAVAILABLE: ") + error.what());
  }
  check(dg::rpc::lost_workers() == std::vector<int>{2}, "worker2 is recorded lost");
  expect_no_context_on({0, 1});
  std::printf("abandoned_call: not reissued, UNAVAILABLE naming worker2, no context left\n");
}

int64_t process_id() { return ::getpid(); }
DISTGRAD_REMOTE(process_id);

int64_t own_incarnation() { return dg::rpc::incarnation(); }
DISTGRAD_REMOTE(own_incarnation);

// Under `distgrad-run --max-rejoins 1` (world of 4): worker2 dies in a parallelized MAML step's
// forward (which the policy completes, equal to an undisturbed step), the launcher starts it
// again, and it rejoins the running world (Note [Rejoining workers]): rank 0 sees the membership
// change (lost, then rejoined), the new process (another pid, incarnation 1) answers calls with
// tensors large enough for shared memory, the next partitioned call uses it again, a MAML step
// through it equals the undisturbed one, an RRef it owns works, and no context is left anywhere.
// The rejoined worker refuses a barrier and ends in the graceful shutdown with the others.
void rejoin() {
  using namespace std::chrono_literals;
  std::mutex events_mutex;
  std::vector<dg::rpc::MembershipChange> events;
  dg::rpc::on_membership_change([&](const dg::rpc::MembershipChange& change) {
    std::lock_guard<std::mutex> lock(events_mutex);
    events.push_back(change);
  });
  const auto seen = [&] {
    std::lock_guard<std::mutex> lock(events_mutex);
    std::string text;
    for (const auto& change : events) {
      text += std::string(change.kind == dg::rpc::MembershipChange::Kind::kLost ? " lost " : " rejoined ") +
              std::to_string(change.rank) + "@" + std::to_string(change.epoch);
    }
    return text;
  };

  dg::manual_seed(5);
  TinyNet net;
  Task tasks = sinusoid_tasks(8);
  const auto step = [&](int64_t dying_rank) { return maml_step(net, tasks, /*reissue=*/true, dying_rank); };
  const auto [undisturbed_loss, undisturbed_gradients] = step(-1);
  const int64_t first_pid = dg::rpc::rpc_sync(2, process_id);
  check(dg::rpc::membership_epoch() == 0, "no change before worker2 dies");

  const auto [loss, gradients] = step(2);
  check_equal(loss, undisturbed_loss, "the meta-loss of the step that lost worker2");
  for (const auto& [name, gradient] : gradients) check_equal(gradient, undisturbed_gradients.at(name), name);
  check(seen().starts_with(" lost 2@1"), "worker2 was recorded lost; seen:" + seen());  // it may be back already

  const auto waiting = std::chrono::steady_clock::now();
  while (dg::rpc::is_worker_lost(2)) {
    check(std::chrono::steady_clock::now() - waiting < 60s, "worker2 did not rejoin within 60 s; seen:" + seen());
    std::this_thread::sleep_for(10ms);
  }
  check(seen() == " lost 2@1 rejoined 2@2", "the membership changes seen: lost 2@1 rejoined 2@2, found" + seen());
  check(dg::rpc::membership_epoch() == 2, "membership epoch 2");
  check(dg::rpc::live_workers() == std::vector<int>{0, 1, 2, 3}, "every worker is live again");
  dg::rpc::mark_worker_lost(2, /*seen_at_epoch=*/0);  // a late failure of a call to the old process
  check(!dg::rpc::is_worker_lost(2) && dg::rpc::membership_epoch() == 2, "a failure of the earlier life is ignored");
  const int64_t second_pid = dg::rpc::rpc_sync(2, process_id);
  check(second_pid != first_pid, "worker2 is a new process (pid " + std::to_string(second_pid) + ")");
  check(dg::rpc::rpc_sync(2, own_incarnation) == 1, "worker2 is in its second life (incarnation 1)");
  check(dg::rpc::rpc_sync(1, own_incarnation) == 0, "worker1 is in its first life");
  const Tensor large = batch(256, 64);  // 128 KiB both ways: shared memory where it is on
  const auto [rank, doubled] = dg::rpc::rpc_sync(2, doubled_with_rank, large);
  check(rank == 2, "the rejoined worker answered as rank 2");
  check_close(doubled, dg::untracked::mul(large, 2.0), "a large tensor doubled by the rejoined worker");

  const auto samples = dg::parallelize(doubled_with_rank, dg::exclusive_batch_partitioner)(batch(8, 1));
  for (size_t i = 0; i < samples.size(); ++i) {
    check(samples[i].first == static_cast<int64_t>(i % 4),
          "sample " + std::to_string(i) + " ran on rank " + std::to_string(samples[i].first) + ", not " +
              std::to_string(i % 4) + ": the partitioner uses worker2 again");
  }
  const auto [again_loss, again_gradients] = step(-1);
  check_equal(again_loss, undisturbed_loss, "the meta-loss of a step through the rejoined worker");
  for (const auto& [name, gradient] : again_gradients) check_equal(gradient, undisturbed_gradients.at(name), name);
  check(dg::rpc::remote(2, rank_plus, int64_t{40}).to_here() == 42, "an RRef owned by the rejoined worker");
  expect_no_context_on({0, 1, 2, 3});
  std::printf(
      "rejoin: worker2 came back as a new process (incarnation 1); lost then rejoined, the partitioner and a MAML "
      "step use it again, both steps equal the undisturbed one, no context left\n");
}

// The rejoin scenario's worker_init_fn: a rejoined worker may not enter a barrier (Note
// [Rejoining workers]); it prints the refusal.
void refuse_a_barrier_once_rejoined() {
  if (!dg::rpc::rejoined_world()) return;
  try {
    dg::barrier();
    std::printf("%s: a rejoined worker entered a barrier\n", dg::get_worker_name().c_str());
  } catch (const dg::Error& error) {
    std::printf("%s rejoined, and refused a barrier: %s\n", dg::get_worker_name().c_str(), error.what());
  }
}

// Each scenario runs as a whole program: rank 0 drives it, the others serve until shutdown.
int world_running(void (*scenario)()) { return dg::auto_init_rpc(nullptr, dg::rank_zero_only(scenario)); }

const std::map<std::string, std::function<int()>>& scenarios() {
  static const std::map<std::string, std::function<int()>> all = {
      {"calls", [] { return world_running(calls); }},
      {"async", [] { return world_running(async_calls); }},
      {"nested", [] { return world_running(nested); }},
      {"empty_batch", [] { return world_running(empty_batch); }},
      {"failure", [] { return world_running(failure); }},
      {"timeout", [] { return world_running(timeout); }},
      {"maml_gradients", [] { return world_running(maml_gradients); }},
      {"lost_workers", [] { return world_running(lost_workers); }},
      {"abandoned_call", [] { return world_running(abandoned_call); }},
      {"rejoin", [] { return dg::auto_init_rpc(refuse_a_barrier_once_rejoined, dg::rank_zero_only(rejoin)); }},
  };
  return all;
}

}  // namespace
}  // namespace partition_worker

int main(int argc, char** argv) {
  return distgrad::rpc::testing::scenario_main(argc, argv, partition_worker::scenarios());
}
