// The ranks of the ddp multi-process tests (tests/ddp/ddp_test.cc runs one scenario of this
// binary as every rank of a world). Each rank checks what it can see and exits non-zero,
// naming the failed check, when something is wrong.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/copy.h"
#include "core/creation.h"
#include "core/cuda.h"
#include "core/views.h"
#include "ddp/process_group.h"
#include "tests/ddp/worker_util.h"

namespace distgrad::ddp::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Rank r's all_reduce input of `n` elements: element i is (r + 1) * (i + 1), exact in every dtype.
Tensor rank_values(int rank, int64_t n, DType dtype) {
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<double>((rank + 1) * (i + 1));
  return ops::to(from_vector(values), dtype);
}

// What op gives over ranks 0..size-1 of rank_values at element i.
double reduced(ReduceOp op, int size, int64_t i) {
  double sum = 0, product = 1;
  for (int r = 0; r < size; ++r) {
    const double v = static_cast<double>((r + 1) * (i + 1));
    sum += v;
    product *= v;
  }
  switch (op) {
    case ReduceOp::kSum: return sum;
    case ReduceOp::kAvg: return sum / size;
    case ReduceOp::kMax: return static_cast<double>(size * (i + 1));
    case ReduceOp::kMin: return static_cast<double>(i + 1);
    case ReduceOp::kProduct: return product;
  }
  return 0;
}

void check_values(const Tensor& tensor, const std::vector<double>& expected, const std::string& what) {
  const std::vector<double> found = ops::to(tensor, kFloat64).to_vector<double>();
  require(found.size() == expected.size(), what, ": expected ", expected.size(), " elements, found ", found.size());
  for (size_t i = 0; i < found.size(); ++i) {
    require_near(found[i], expected[i], 1e-6 * std::max(1.0, std::abs(expected[i])), str(what, "[", i, "]"));
  }
}

void check_all_reduce(ProcessGroup& pg, DType dtype, ReduceOp op, int64_t n) {
  Tensor tensor = rank_values(pg.rank(), n, dtype);
  pg.all_reduce(tensor, op);
  std::vector<double> expected(n);
  for (int64_t i = 0; i < n; ++i) expected[i] = reduced(op, pg.size(), i);
  check_values(tensor, expected, str("all_reduce(", to_string(op), ") of ", dtype_name(dtype), "[", n, "]"));
}

void check_collectives(ProcessGroup& pg) {
  const int rank = pg.rank(), size = pg.size();
  for (DType dtype : {kFloat32, kFloat64, kInt64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
      if (op == ReduceOp::kAvg && dtype == kInt64) continue;
      check_all_reduce(pg, dtype, op, 7);
    }
  }
  check_all_reduce(pg, kFloat32, ReduceOp::kSum, 0);
  check_all_reduce(pg, kFloat32, ReduceOp::kSum, 300001);  // several Gloo segments

  for (DType dtype : {kFloat64, kInt64}) {
    Tensor tensor = rank_values(rank, 5, dtype);
    pg.broadcast(tensor, size - 1);
    check_values(tensor, rank_values(size - 1, 5, kFloat64).to_vector<double>(), "broadcast from the last rank");
  }
  Tensor nothing = zeros({0, 3});
  pg.broadcast(nothing, 0);

  // all_gather with uneven sizes: rank r sends r + 1 elements (rank 0 of a world of 1 too).
  std::vector<Tensor> gathered;
  for (int r = 0; r < size; ++r) gathered.push_back(zeros({r + 1}, {.dtype = kInt64}));
  pg.all_gather(gathered, rank_values(rank, rank + 1, kInt64));
  for (int r = 0; r < size; ++r) {
    check_values(gathered[r], rank_values(r, r + 1, kFloat64).to_vector<double>(), str("all_gather output ", r));
  }
  std::vector<Tensor> empty_gathered(size, zeros({0}));
  pg.all_gather(empty_gathered, zeros({0}));

  // reduce_scatter with uneven shares: share j has j + 2 elements.
  std::vector<Tensor> shares;
  for (int j = 0; j < size; ++j) shares.push_back(rank_values(rank, j + 2, kFloat64));
  Tensor mine = zeros({rank + 2}, {.dtype = kFloat64});
  pg.reduce_scatter(mine, shares, ReduceOp::kSum);
  std::vector<double> expected(rank + 2);
  for (int64_t i = 0; i < rank + 2; ++i) expected[i] = reduced(ReduceOp::kSum, size, i);
  check_values(mine, expected, "reduce_scatter share");
  Tensor mine_max = zeros({rank + 2}, {.dtype = kInt64});
  std::vector<Tensor> int_shares;
  for (int j = 0; j < size; ++j) int_shares.push_back(rank_values(rank, j + 2, kInt64));
  pg.reduce_scatter(mine_max, int_shares, ReduceOp::kMax);
  for (int64_t i = 0; i < rank + 2; ++i) expected[i] = reduced(ReduceOp::kMax, size, i);
  check_values(mine_max, expected, "reduce_scatter(max) share");

  pg.barrier();

  // Async: queued in order, finished in order, results as the blocking forms give.
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 8; ++k) {
    tensors.push_back(full({1000}, k + rank));
    works.push_back(pg.all_reduce_async(tensors.back(), ReduceOp::kSum));
  }
  works.push_back(pg.barrier_async());
  for (auto& work : works) work->wait();
  for (int k = 0; k < 8; ++k) {
    const double expect = k * size + size * (size - 1) / 2.0;
    check_values(ops::narrow(tensors[k], 0, 999, 1), {expect}, str("async all_reduce ", k));
    require(works[k]->is_completed() && !works[k]->failed(), "async all_reduce ", k, " is not marked completed");
  }
}

void check_argument_errors(ProcessGroup& pg) {
  expect_error("a transposed tensor", "not contiguous", [&] { pg.all_reduce(ops::t(zeros({2, 3}))); });
  expect_error("a bool tensor", "bool tensor", [&] { pg.all_reduce(zeros({2}, {.dtype = kBool})); });
  expect_error("avg of int64", "avg needs a float32 or float64 tensor, found int64",
               [&] { pg.all_reduce(zeros({2}, {.dtype = kInt64}), ReduceOp::kAvg); });
  expect_error("a root outside the group", "root 99 is not a rank", [&] { pg.broadcast(zeros({2}), 99); });
  expect_error("too few outputs", "expected one output per rank",
               [&] { pg.all_gather(std::vector<Tensor>(pg.size() + 1, zeros({2})), zeros({2})); });
  std::vector<Tensor> mixed(pg.size(), zeros({2}));
  mixed[0] = zeros({2}, {.dtype = kFloat64});
  expect_error("outputs of another dtype", "outputs[0] is a float64", [&] { pg.all_gather(mixed, zeros({2})); });
  expect_error("a share of the wrong size", "the output has 3 elements",
               [&] { pg.reduce_scatter(zeros({3}), std::vector<Tensor>(pg.size(), zeros({2}))); });
  if (cuda::is_available()) {
    ProcessGroup* cpu_only = &pg;  // the test's group uses kCpu
    expect_error("a CUDA tensor on the CPU backend", "found a tensor on cuda:0",
                 [&] { cpu_only->all_reduce(zeros({2}, {.device = Device::cuda(0)})); });
  }
}

int collectives() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(60)});
  require(pg->backend_name() == "gloo", "backend_name: expected gloo, found ", pg->backend_name());
  check_collectives(*pg);
  check_argument_errors(*pg);
  say("collectives passed in a world of ", pg->size());
  destroy_process_group();
  return 0;
}

// Subgroups: the even ranks and the odd ranks; every rank calls new_group for both.
int subgroups() {
  auto world = init_process_group({.timeout = seconds(60)});
  std::vector<int> evens, odds;
  for (int r = 0; r < world->size(); ++r) (r % 2 == 0 ? evens : odds).push_back(r);
  auto even_group = new_group(evens);
  auto odd_group = odds.empty() ? nullptr : new_group(odds);
  auto& mine = world->rank() % 2 == 0 ? even_group : odd_group;
  auto& other = world->rank() % 2 == 0 ? odd_group : even_group;
  require(mine != nullptr, "new_group returned no group for a member");
  require(other == nullptr, "new_group returned a group for a rank outside it");
  require(mine->rank() == world->rank() / 2, "subgroup rank: expected ", world->rank() / 2, ", found ", mine->rank());
  Tensor t = full({3}, world->rank());
  mine->all_reduce(t);
  double expected = 0;
  for (int r : (world->rank() % 2 == 0 ? evens : odds)) expected += r;
  check_values(t, {expected, expected, expected}, "subgroup all_reduce");
  check_collectives(*mine);
  world->barrier();
  expect_error("a repeated rank", "increasing order", [&] { new_group({0, 0}); });
  expect_error("a rank outside the job", "is not in the job", [&] { new_group({world->size()}); });
  say("subgroups passed");
  destroy_process_group();
  return 0;
}

// Rank 1 dies while the others are inside an all-reduce: they fail well before the timeout.
int rank_dies() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(30)});
  Tensor big = ones({1 << 22});
  pg->all_reduce(big);  // everyone connected and working
  if (pg->rank() == 1) {
    std::this_thread::sleep_for(milliseconds(300));
    _exit(3);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string message = expect_error("all_reduce with a dead rank", "all_reduce(sum) of float32", [&] {
    for (int i = 0; i < 100; ++i) pg->all_reduce(big);
  });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  require(waited < 20, "the dead rank was noticed after ", waited, " s, expected well under the 30 s timeout");
  require(message.find("rank " + std::to_string(pg->rank())) != std::string::npos,
          "the error names no rank: ", message);
  expect_error("the next collective", "unusable after an earlier failure", [&] { pg->all_reduce(big); });
  return 0;
}

// Rank 1 stays alive but never joins the all-reduce: the others fail at the timeout.
int rank_stalls() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(2)});
  pg->barrier();
  if (pg->rank() == 1) {
    std::this_thread::sleep_for(seconds(6));
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  Tensor t = ones({10});
  expect_error("all_reduce with a rank that never comes", "timed out", [&] { pg->all_reduce(t); });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  require(waited >= 1.5 && waited < 15, "the timeout of 2 s fired after ", waited, " s");
  return 0;
}

}  // namespace
}  // namespace distgrad::ddp::testing

int main(int argc, char** argv) {
  using namespace distgrad::ddp::testing;
  return run_scenario(
      argc, argv,
      {{"collectives", collectives}, {"subgroups", subgroups}, {"rank_dies", rank_dies}, {"rank_stalls", rank_stalls}});
}
