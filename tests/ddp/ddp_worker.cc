// The ranks of the ddp multi-process tests (tests/ddp/ddp_test.cc runs one scenario of this
// binary as every rank of a world). Each rank checks what it can see and exits non-zero,
// naming the failed check, when something is wrong.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <thread>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/copy.h"
#include "core/creation.h"
#include "core/cuda.h"
#include "core/random.h"
#include "core/views.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/process_group.h"
#include "ddp/sync_batch_norm.h"
#include "dist_autograd/init_rpc.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "rpc/rpc.h"
#include "tests/ddp/worker_util.h"

namespace distgrad::ddp::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Rank r's all_reduce input of `n` elements: element i is (r + 1) * (i + 1), exact in every dtype.
Tensor rank_values(int rank, int64_t n, DType dtype) {
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<double>((rank + 1) * (i + 1));
  return untracked::to(from_vector(values), dtype);
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
  const std::vector<double> found = untracked::to(tensor, kFloat64).to_vector<double>();
  require(found.size() == expected.size(), what, ": expected ", expected.size(), " elements, found ", found.size());
  for (size_t i = 0; i < found.size(); ++i) {
    const double tolerance = 1e-6 * std::max(1.0, std::abs(expected[i]));
    if (std::abs(found[i] - expected[i]) > tolerance)
      require_near(found[i], expected[i], tolerance, str(what, "[", i, "]"));
  }
}

void check_all_reduce(ProcessGroup& pg, DType dtype, ReduceOp op, int64_t n) {
  Tensor tensor = rank_values(pg.rank(), n, dtype);
  pg.all_reduce(tensor, op);
  std::vector<double> expected(n);
  for (int64_t i = 0; i < n; ++i) expected[i] = reduced(op, pg.size(), i);
  check_values(tensor, expected, str("all_reduce(", to_string(op), ") of ", dtype_name(dtype), "[", n, "]"));
}

// Every rank holds the same bits of `tensor` (float32): all-gathered and compared with rank 0's.
void check_same_bits_everywhere(ProcessGroup& pg, const Tensor& tensor, const std::string& what) {
  std::vector<Tensor> everyone;
  for (int r = 0; r < pg.size(); ++r) everyone.push_back(zeros(tensor.sizes()));
  pg.all_gather(everyone, tensor);
  const std::vector<float> first = everyone[0].to_vector<float>();
  for (int r = 1; r < pg.size(); ++r) {
    require(everyone[r].to_vector<float>() == first, what, ": rank ", r, " holds other bits than rank 0");
  }
}

// broadcast of 5 elements of `dtype` from the last rank.
void check_broadcast(ProcessGroup& pg, DType dtype) {
  Tensor tensor = rank_values(pg.rank(), 5, dtype);
  pg.broadcast(tensor, pg.size() - 1);
  check_values(tensor, rank_values(pg.size() - 1, 5, kFloat64).to_vector<double>(),
               str("broadcast of ", dtype_name(dtype), " from the last rank"));
}

// all_gather with uneven sizes: rank r sends r + 1 elements of `dtype` (rank 0 of a world of 1 too).
void check_uneven_all_gather(ProcessGroup& pg, DType dtype) {
  std::vector<Tensor> gathered;
  for (int r = 0; r < pg.size(); ++r) gathered.push_back(zeros({r + 1}, {.dtype = dtype}));
  pg.all_gather(gathered, rank_values(pg.rank(), pg.rank() + 1, dtype));
  for (int r = 0; r < pg.size(); ++r) {
    check_values(gathered[r], rank_values(r, r + 1, kFloat64).to_vector<double>(),
                 str("all_gather of ", dtype_name(dtype), ", output ", r));
  }
}

// reduce_scatter with uneven shares of `dtype`: share j has j + 2 elements.
void check_uneven_reduce_scatter(ProcessGroup& pg, DType dtype, ReduceOp op) {
  const int rank = pg.rank();
  std::vector<Tensor> shares;
  for (int j = 0; j < pg.size(); ++j) shares.push_back(rank_values(rank, j + 2, dtype));
  Tensor mine = zeros({rank + 2}, {.dtype = dtype});
  pg.reduce_scatter(mine, shares, op);
  std::vector<double> expected(rank + 2);
  for (int64_t i = 0; i < rank + 2; ++i) expected[i] = reduced(op, pg.size(), i);
  check_values(mine, expected, str("reduce_scatter(", to_string(op), ") of ", dtype_name(dtype)));
}

// float16 and bfloat16: reduced in float and rounded back, moved as they are (the values are
// small integers and halves, exact in both).
void check_half_collectives(ProcessGroup& pg) {
  const int size = pg.size();
  for (DType dtype : {kFloat16, kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      check_all_reduce(pg, dtype, op, 7);
    }
    // Near float16's largest value: the sum must not overflow before the division.
    const double big = untracked::to(full({1}, 40000.0, {.dtype = dtype}), kFloat64).item<double>();
    Tensor average = full({3}, 40000.0, {.dtype = dtype});
    pg.all_reduce(average, ReduceOp::kAvg);
    check_values(average, {big, big, big}, str("all_reduce(avg) of ", dtype_name(dtype), " near 65504"));
    Tensor many = ones({300001}, {.dtype = dtype});  // several chunks
    pg.all_reduce(many);
    require(untracked::min(untracked::to(many, kFloat32)).item<double>() == size &&
                untracked::max(untracked::to(many, kFloat32)).item<double>() == size,
            "all_reduce of 300001 ones in ", dtype_name(dtype), ": not every element is ", size);
    check_broadcast(pg, dtype);
    check_uneven_all_gather(pg, dtype);
    check_uneven_reduce_scatter(pg, dtype, ReduceOp::kSum);
  }
}

// Tensors of several megabytes (many chunks of the shared-memory backend's slots, many Gloo
// segments), with sizes that differ between ranks where the collective allows it.
void check_large_collectives(ProcessGroup& pg) {
  const int rank = pg.rank(), size = pg.size();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) check_all_reduce(pg, kFloat64, op, 1000003);

  Tensor big = rank_values(rank, 700001, kFloat64);
  pg.broadcast(big, size - 1);
  check_values(big, rank_values(size - 1, 700001, kFloat64).to_vector<double>(), "broadcast of 5.6 MB");

  std::vector<Tensor> gathered;
  for (int r = 0; r < size; ++r) gathered.push_back(zeros({(r + 1) * 300007}));
  pg.all_gather(gathered, rank_values(rank, (rank + 1) * 300007, kFloat32));
  for (int r = 0; r < size; ++r) {
    check_values(gathered[r], rank_values(r, (r + 1) * 300007, kFloat64).to_vector<double>(),
                 str("all_gather of ", (r + 1) * 300007, " floats from rank ", r));
  }

  std::vector<Tensor> shares;
  for (int j = 0; j < size; ++j) shares.push_back(rank_values(rank, j * 150001 + 5, kFloat32));
  Tensor mine = zeros({rank * 150001 + 5});
  pg.reduce_scatter(mine, shares, ReduceOp::kSum);
  std::vector<double> expected(rank * 150001 + 5);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = reduced(ReduceOp::kSum, size, static_cast<int64_t>(i));
  check_values(mine, expected, "reduce_scatter of shares up to 2.4 MB");

  // Inexact sums: every rank must still end with the same bits (DDP's replicas stay identical).
  Generator generator(100 + rank);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    Tensor noise = randn({500000}, {}, generator);
    pg.all_reduce(noise, op);
    check_same_bits_everywhere(pg, noise, str("all_reduce(", to_string(op), ") of random floats"));
  }
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

  for (DType dtype : {kFloat64, kInt64}) check_broadcast(pg, dtype);
  Tensor nothing = zeros({0, 3});
  pg.broadcast(nothing, 0);
  check_uneven_all_gather(pg, kInt64);
  std::vector<Tensor> empty_gathered(size, zeros({0}));
  pg.all_gather(empty_gathered, zeros({0}));
  check_uneven_reduce_scatter(pg, kFloat64, ReduceOp::kSum);
  check_uneven_reduce_scatter(pg, kInt64, ReduceOp::kMax);

  check_half_collectives(pg);
  pg.barrier();
  check_large_collectives(pg);
  if (pg.backend_name() == "shm") {  // max and min propagate NaN from any rank (Gloo's keep the first operand's)
    Tensor with_nan = full({2}, rank);
    if (rank == size - 1) with_nan = from_vector<float>({NAN, 1.0f});
    pg.all_reduce(with_nan, ReduceOp::kMax);
    require(std::isnan(with_nan.at<float>({0})) && with_nan.at<float>({1}) == std::max(1, size - 2),
            "all_reduce(max) with a NaN from the last rank: ", with_nan);
  }

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
    check_values(untracked::narrow(tensors[k], 0, 999, 1), {expect}, str("async all_reduce ", k));
    require(works[k]->is_completed() && !works[k]->failed(), "async all_reduce ", k, " is not marked completed");
  }
}

void check_argument_errors(ProcessGroup& pg) {
  expect_error("a transposed tensor", "not contiguous", [&] { pg.all_reduce(untracked::t(zeros({2, 3}))); });
  expect_error("a bool tensor", "bool tensor", [&] { pg.all_reduce(zeros({2}, {.dtype = kBool})); });
  expect_error("avg of int64", "avg needs a floating-point tensor, found int64",
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
  const std::string expected_backend = std::getenv("DISTGRAD_SHM") != nullptr ? "gloo" : "shm";
  require(pg->backend_name() == expected_backend, "backend_name: expected ", expected_backend, ", found ",
          pg->backend_name());
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

// The ranks pass tensors of different sizes: an error on every rank within the timeout, never
// a hang or a crash.
int mismatched_sizes() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(3)});
  Tensor t = ones({1000 + 3 * pg->rank()});
  const auto start = std::chrono::steady_clock::now();
  expect_error("all_reduce of different sizes", "all_reduce(sum) of float32", [&] { pg->all_reduce(t); });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  require(waited < 15, "the mismatch was reported after ", waited, " s");
  expect_error("all_reduce of different dtypes", "the same dtype",
               [&] { pg->all_reduce(pg->rank() == 0 ? ones({4}, {.dtype = kFloat64}) : ones({4})); });
  expect_error("broadcast from different roots", "the same op or root",
               [&] { pg->broadcast(ones({4}), pg->rank() == 0 ? 0 : 1); });
  std::vector<Tensor> outputs;
  for (int r = 0; r < pg->size(); ++r) outputs.push_back(zeros({r == pg->rank() ? 2 : 2 + pg->rank()}));
  expect_error("all_gather with outputs of different sizes", "the same element counts",
               [&] { pg->all_gather(outputs, ones({2})); });
  Tensor same = ones({5});
  if (pg->backend_name() == "shm") {  // signatures are free here: every collective is checked, barriers too
    expect_error("a barrier against an all_reduce", "the ranks did not pass the same collective", [&] {
      if (pg->rank() == 0) {
        pg->barrier();
      } else {
        pg->all_reduce(same);
      }
    });
  }
  pg->all_reduce(same);  // the group is still usable
  check_values(same, std::vector<double>(5, pg->size()), "all_reduce after the mismatches");
  return 0;
}

// RPC and a process group in one program share the job's Store (rendezvous/job_store.h): rank 0
// hosts one Store, not two on the same port.
int with_rpc() {
  init_rpc();
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(30)});
  Tensor t = ones({3});
  pg->all_reduce(t);
  check_values(t, std::vector<double>(3, pg->size()), "all_reduce beside RPC");
  rpc::shutdown();
  pg->all_reduce(t);  // the Store outlives RPC while the group holds it
  check_values(t, std::vector<double>(3, pg->size() * pg->size()), "all_reduce after RPC shut down");
  destroy_process_group();
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

// A rank destroys its group while the others are about to all-reduce: they fail well before the
// timeout (shared memory: the rank's state says it left; Gloo: its connections close).
int rank_leaves() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(30)});
  pg->barrier();
  if (pg->rank() == 1) {
    pg.reset();
    destroy_process_group();
    std::this_thread::sleep_for(seconds(4));
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  Tensor t = ones({1000});
  const std::string message = expect_error("all_reduce after a rank destroyed its group", "all_reduce(sum) of float32",
                                           [&] { pg->all_reduce(t); });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  require(waited < 3, "the departed rank was noticed after ", waited, " s, expected well under the 30 s timeout");
  say("noticed after ", waited, " s: ", message);
  return 0;
}

// Shared memory only when every rank of a group offers it: the world, where odd ranks do not,
// runs on Gloo; a subgroup where all do runs on shared memory; both give the same sums.
int shm_agreement() {
  const int rank = rendezvous::world_info().rank;
  auto world = init_process_group({.timeout = seconds(60), .shared_memory = rank % 2 == 0});
  const bool alone = world->size() == 1;  // a world of one: nobody declines
  require(world->backend_name() == (alone ? "shm" : "gloo"),
          "backend of the world where odd ranks decline: ", world->backend_name());
  std::vector<int> all(world->size());
  std::iota(all.begin(), all.end(), 0);
  auto willing = new_group(all, {.timeout = seconds(60)});
  require(willing->backend_name() == "shm",
          "backend of a group where every rank offers shared memory: ", willing->backend_name());
  for (ProcessGroup* pg : {world.get(), willing.get()}) {
    Tensor t = rank_values(pg->rank(), 70000, kFloat32);
    pg->all_reduce(t);
    std::vector<double> expected(70000);
    for (int64_t i = 0; i < 70000; ++i) expected[i] = reduced(ReduceOp::kSum, pg->size(), i);
    check_values(t, expected, "all_reduce on " + pg->backend_name());
  }
  destroy_process_group();
  return 0;
}

// Two hosts of two ranks (tests/ddp/hosts_test.sh): groups within a host run on shared memory,
// groups that span hosts on Gloo, and all give the closed-form sums.
int hosts() {
  auto world = init_process_group({.backend = Backend::kCpu, .timeout = seconds(60)});
  require(world->size() == 4, "expected a world of 4 ranks on two hosts, found ", world->size());
  auto first_host = new_group({0, 1});
  auto second_host = new_group({2, 3});
  auto across = new_group({1, 2});
  const std::shared_ptr<ProcessGroup>& host = world->rank() < 2 ? first_host : second_host;
  require(world->backend_name() == "gloo", "the world spans two hosts, expected gloo, found ", world->backend_name());
  require(host->backend_name() == "shm", "a group within one host: expected shm, found ", host->backend_name());
  if (across)
    require(across->backend_name() == "gloo", "a group across hosts: expected gloo, found ", across->backend_name());
  for (ProcessGroup* pg : {world.get(), host.get(), across.get()}) {
    if (pg == nullptr) continue;
    Tensor t = rank_values(pg->rank(), 300001, kFloat32);
    pg->all_reduce(t);
    std::vector<double> expected(300001);
    for (int64_t i = 0; i < 300001; ++i) expected[i] = reduced(ReduceOp::kSum, pg->size(), i);
    check_values(t, expected, "all_reduce in group '" + pg->name() + "' on " + pg->backend_name());
  }
  world->barrier();
  if (world->rank() == 0) say("the world and the group across hosts ran on gloo, the groups within a host on shm");
  destroy_process_group();
  return 0;
}

// DISTGRAD_SAME_HOST=0 in the environment (tests/ddp/ddp_test.cc sets it): every rank is taken
// for another host, so the group runs on Gloo, and its all-reduce still sums.
int same_host_off() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(60)});
  require(pg->backend_name() == "gloo", "with DISTGRAD_SAME_HOST=0: expected gloo, found ", pg->backend_name());
  Tensor t = ones({3});
  pg->all_reduce(t);
  check_values(t, std::vector<double>(3, pg->size()), "all_reduce with DISTGRAD_SAME_HOST=0");
  destroy_process_group();
  return 0;
}

// DISTGRAD_SHM=yes in the environment (tests/ddp/ddp_test.cc sets it): init_process_group
// refuses it, naming the variable.
int bad_switch() {
  expect_error("DISTGRAD_SHM=yes", "process group: DISTGRAD_SHM=yes is not 0 or 1", [] { init_process_group(); });
  return 0;
}

// --- DistributedDataParallel -------------------------------------------------------------

constexpr int64_t kPerRank = 4;

// A float64 MLP made from `seed`, so every rank (and the single-process reference) builds the
// same one.
std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed, int64_t hidden = 16) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(5, hidden), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(hidden, 8),
      std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(8, 3)});
  net->to(kFloat64);
  return net;
}

// The whole batch of a step (the same on every rank) and this rank's rows of it.
struct Batch {
  Tensor x, y;
};
Batch full_batch(int size, uint64_t seed) {
  Generator generator(seed);
  return {randn({kPerRank * size, 5}, {.dtype = kFloat64}, generator),
          randn({kPerRank * size, 3}, {.dtype = kFloat64}, generator)};
}
Batch share(const Batch& batch, int rank) {
  return {untracked::narrow(batch.x, 0, rank * kPerRank, kPerRank),
          untracked::narrow(batch.y, 0, rank * kPerRank, kPerRank)};
}

void check_grads_equal(nn::Module& found, nn::Module& expected, double tolerance, const std::string& what) {
  const std::vector<Tensor> a = found.parameters(), b = expected.parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    require(a[i].grad().defined(), what, ": parameter ", i, " has no gradient");
    const std::vector<double> x = a[i].grad().to_vector<double>(), y = b[i].grad().to_vector<double>();
    for (size_t k = 0; k < x.size(); ++k)
      require_near(x[k], y[k], tolerance, str(what, ": parameter ", i, "[", k, "]"));
  }
}

// DDP gradients equal the single-process gradients of the whole batch (float64, 1e-6), with
// one bucket per parameter and with the default buckets; the first bucket (the last layer's
// bias) starts its all-reduce before the first layer's gradient exists.
int ddp_gradients() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(60)});
  const int rank = pg->rank(), size = pg->size();
  for (const double cap : {1e-9, 25.0}) {
    auto net = make_mlp(7);
    if (rank > 0) {  // construction must overwrite other ranks' weights with rank 0's
      autograd::NoGradGuard no_grad;
      for (const Tensor& p : net->parameters()) untracked::copy_(p, full_like(p, rank));
    }
    DistributedDataParallel ddp(*net, pg, {.bucket_cap_mb = cap, .first_bucket_cap_mb = cap});
    auto reference = make_mlp(7);
    const auto names = ddp.bucket_parameter_names();
    require(names.front().front() == "4.bias", "the first bucket starts with ", names.front().front(),
            ", expected the last registered parameter 4.bias");
    require(cap > 1 ? names.size() == 1 : names.size() == 6, "expected ", cap > 1 ? 1 : 6, " buckets, found ",
            names.size());
    for (int step = 0; step < 2; ++step) {
      const Batch batch = full_batch(size, 100 + step);
      const Batch mine = share(batch, rank);
      net->zero_grad();
      nn::mse_loss(ddp.forward(mine.x), mine.y).backward();
      reference->zero_grad();
      nn::mse_loss(reference->forward(batch.x), batch.y).backward();
      check_grads_equal(*net, *reference, 1e-6, str("DDP step ", step, " with bucket cap ", cap, " MB"));
    }
    if (cap < 1) {
      const auto& timeline = ddp.last_backward();
      require(timeline.bucket_launched.size() == 6, "expected 6 bucket launches, found ",
              timeline.bucket_launched.size());
      require(timeline.bucket_launched.front() < timeline.last_gradient,
              "the first bucket's all-reduce did not start before backward produced its last gradient");
      require(timeline.last_gradient <= timeline.finished, "the gradients were written back before the last one came");
    }
  }
  say("DDP gradients equal the single-process ones in a world of ", size);
  destroy_process_group();
  return 0;
}

// A model held in float16 or bfloat16 (its gradients too): DDP all-reduces the half gradients
// (summed in float, rounded once) and they equal the mean of the ranks' local gradients, each
// computed here from its share, within the half type's rounding; and a float32 model trained
// under autocast (bfloat16 compute, float32 gradients) averages as the float32 ones do.
int ddp_half() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(60)});
  const int rank = pg->rank(), size = pg->size();
  const Batch batch = full_batch(size, 5);
  for (const DType dtype : {kBFloat16, kFloat16}) {
    auto net = make_mlp(9);
    net->to(dtype);
    DistributedDataParallel ddp(*net, pg);
    const Batch mine = share(batch, rank);
    nn::mse_loss(ddp.forward(untracked::to(mine.x, dtype)), untracked::to(mine.y, dtype)).backward();
    // Per element: the mean of the ranks' local gradients, and of their magnitudes (what the
    // rounding of each is relative to).
    std::vector<std::vector<double>> mean_of_locals(net->parameters().size()), mean_magnitude(mean_of_locals.size());
    for (int other = 0; other < size; ++other) {
      auto local = make_mlp(9);
      local->to(dtype);
      const Batch theirs = share(batch, other);
      nn::mse_loss(local->forward(untracked::to(theirs.x, dtype)), untracked::to(theirs.y, dtype)).backward();
      const std::vector<Tensor> params = local->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        const std::vector<double> grad = params[i].grad().to_vector<double>();
        mean_of_locals[i].resize(grad.size());
        mean_magnitude[i].resize(grad.size());
        for (size_t k = 0; k < grad.size(); ++k) {
          mean_of_locals[i][k] += grad[k] / size;
          mean_magnitude[i][k] += std::abs(grad[k]) / size;
        }
      }
    }
    const double epsilon = dtype == kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    const std::vector<Tensor> params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& grad = params[i].grad();
      require(grad.defined() && grad.dtype() == dtype, "parameter ", i, ": expected a ", dtype_name(dtype),
              " gradient, found ", grad.defined() ? grad.describe() : "none");
      const std::vector<double> found = grad.to_vector<double>();
      for (size_t k = 0; k < found.size(); ++k) {
        const double expected = mean_of_locals[i][k];
        require_near(found[k], expected, 3 * epsilon * mean_magnitude[i][k] + 1e-30,
                     str(dtype_name(dtype), " DDP gradient of parameter ", i, "[", k, "]"));
      }
    }
  }
  {
    auto net = make_mlp(4);
    net->to(kFloat32);
    auto reference = make_mlp(4);
    reference->to(kFloat32);
    DistributedDataParallel ddp(*net, pg);
    const Batch mine = share(batch, rank);
    Tensor loss, reference_loss;
    {
      autograd::AutocastGuard autocast(DeviceType::kCPU);
      loss = nn::mse_loss(ddp.forward(untracked::to(mine.x, kFloat32)), untracked::to(mine.y, kFloat32));
      reference_loss =
          nn::mse_loss(reference->forward(untracked::to(batch.x, kFloat32)), untracked::to(batch.y, kFloat32));
    }
    require(loss.dtype() == kFloat32, "the loss under autocast: expected float32, found ", loss.describe());
    loss.backward();
    reference_loss.backward();
    // The shares' bfloat16 gradients and the whole batch's round differently: within 2^-5 of
    // the parameter's largest gradient.
    const std::vector<Tensor> a = net->parameters(), b = reference->parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      require(a[i].grad().dtype() == kFloat32, "autocast: parameter ", i, "'s gradient is a ", a[i].grad().describe());
      const std::vector<double> x = a[i].grad().to_vector<double>(), y = b[i].grad().to_vector<double>();
      double largest = 0;
      for (double value : y) largest = std::max(largest, std::abs(value));
      for (size_t k = 0; k < x.size(); ++k) {
        require_near(x[k], y[k], std::ldexp(largest, -5), str("autocast DDP gradient ", i, "[", k, "]"));
      }
    }
  }
  say("half-precision DDP gradients average as expected in a world of ", size);
  destroy_process_group();
  return 0;
}

// Two micro-batches, the first under no_sync: the first leaves local gradients, the second
// averages the sum, as a single process accumulating both whole batches.
int ddp_no_sync() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(60)});
  const int rank = pg->rank(), size = pg->size();
  auto net = make_mlp(3);
  DistributedDataParallel ddp(*net, pg);
  auto reference = make_mlp(3), local = make_mlp(3);
  const Batch first = full_batch(size, 1), second = full_batch(size, 2);
  {
    auto guard = ddp.no_sync();
    nn::mse_loss(ddp.forward(share(first, rank).x), share(first, rank).y).backward();
  }
  nn::mse_loss(local->forward(share(first, rank).x), share(first, rank).y).backward();
  check_grads_equal(*net, *local, 1e-12, "gradients under no_sync (local only)");
  nn::mse_loss(ddp.forward(share(second, rank).x), share(second, rank).y).backward();
  nn::mse_loss(reference->forward(first.x), first.y).backward();
  nn::mse_loss(reference->forward(second.x), second.y).backward();
  check_grads_equal(*net, *reference, 1e-6, "accumulated gradients after the synchronized step");
  destroy_process_group();
  return 0;
}

// A module with a branch only rank 0 uses and a layer nobody uses.
struct Branchy : nn::Module {
  Branchy() {
    manual_seed(11);
    trunk = register_module("trunk", std::make_shared<nn::Linear>(5, 3));
    extra = register_module("extra", std::make_shared<nn::Linear>(3, 3));
    never = register_module("never", std::make_shared<nn::Linear>(3, 3));
    to(kFloat64);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = trunk->forward(x);
    return use_extra ? extra->forward(h) : h;
  }
  std::shared_ptr<nn::Linear> trunk, extra, never;
  bool use_extra = false;
};

int ddp_unused() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(20)});
  const int rank = pg->rank(), size = pg->size();
  const Batch mine = share(full_batch(size, 5), rank);
  {
    Branchy net;
    DistributedDataParallel ddp(net, pg);
    expect_error("a parameter without a gradient", "never.weight",
                 [&] { nn::mse_loss(ddp.forward(mine.x), mine.y).backward(); });
  }
  Branchy net;
  net.use_extra = rank == 0;
  Tensor extra_local;
  if (rank == 0) {  // rank 0's own gradient of `extra`, before DDP averages it
    nn::mse_loss(net.forward(mine.x), mine.y).backward();
    extra_local = net.extra->weight.grad().detach();
    net.zero_grad();
  }
  DistributedDataParallel ddp(net, pg, {.find_unused_parameters = true});
  nn::mse_loss(ddp.forward(mine.x), mine.y).backward();
  require(!net.never->weight.grad().defined(), "a parameter no rank used got a gradient");
  require(net.extra->weight.grad().defined(), "a parameter rank 0 used has no gradient on rank ", rank);
  Tensor expected = rank == 0 ? untracked::contiguous(extra_local) : zeros_like(net.extra->weight);
  pg->broadcast(expected, 0);
  const std::vector<double> found = net.extra->weight.grad().to_vector<double>(), local = expected.to_vector<double>();
  for (size_t k = 0; k < found.size(); ++k) require_near(found[k], local[k] / size, 1e-9, str("extra.weight[", k, "]"));
  say("find_unused_parameters passed");
  destroy_process_group();
  return 0;
}

// Buffers follow rank 0 at every forward; a rank with another model is refused by name.
int ddp_buffers() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(20)});
  const int rank = pg->rank();
  nn::Sequential net({std::make_shared<nn::Linear>(5, 4), std::make_shared<nn::BatchNorm1d>(4)});
  DistributedDataParallel ddp(net, pg);
  net.eval();
  {
    autograd::NoGradGuard no_grad;
    for (const auto& [name, buffer] : net.named_buffers()) untracked::copy_(buffer, full_like(buffer, rank));
  }
  ddp.forward(randn({2, 5}));
  for (const auto& [name, buffer] : net.named_buffers()) {
    require(untracked::to(buffer, kFloat64).to_vector<double>() == std::vector<double>(buffer.numel(), 0.0), "buffer ",
            name, " does not hold rank 0's values after forward");
  }
  if (pg->size() > 1) {
    auto other = make_mlp(1, rank == 1 ? 17 : 16);
    expect_error("a rank with another model", "every rank must wrap the same model",
                 [&] { DistributedDataParallel mismatched(*other, pg); });
  }
  destroy_process_group();
  return 0;
}

// SyncBatchNorm in DDP: gradients and running statistics equal BatchNorm's on the whole batch.
int sync_batch_norm() {
  auto pg = init_process_group({.backend = Backend::kCpu, .timeout = seconds(60)});
  const int rank = pg->rank(), size = pg->size();
  manual_seed(21);
  nn::Sequential net({std::make_shared<nn::Linear>(5, 4, true, TensorOptions{.dtype = kFloat64}),
                      std::make_shared<SyncBatchNorm>(4, nn::BatchNormOptions{}, TensorOptions{.dtype = kFloat64}),
                      std::make_shared<nn::Tanh>(),
                      std::make_shared<nn::Linear>(4, 3, true, TensorOptions{.dtype = kFloat64})});
  manual_seed(21);
  nn::Sequential reference(
      {std::make_shared<nn::Linear>(5, 4, true, TensorOptions{.dtype = kFloat64}),
       std::make_shared<nn::BatchNorm1d>(4, nn::BatchNormOptions{}, TensorOptions{.dtype = kFloat64}),
       std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(4, 3, true, TensorOptions{.dtype = kFloat64})});
  DistributedDataParallel ddp(net, pg);
  for (int step = 0; step < 2; ++step) {
    const Batch batch = full_batch(size, 40 + step);
    const Batch mine = share(batch, rank);
    net.zero_grad();
    nn::mse_loss(ddp.forward(mine.x), mine.y).backward();
    reference.zero_grad();
    nn::mse_loss(reference.forward(batch.x), batch.y).backward();
    check_grads_equal(net, reference, 1e-6, str("SyncBatchNorm step ", step));
  }
  const nn::ParamDict buffers = net.named_buffers(), expected = reference.named_buffers();
  for (const auto& [name, buffer] : buffers) {
    check_values(buffer, untracked::to(expected.at(name), kFloat64).to_vector<double>(), "running statistic " + name);
  }
  say("SyncBatchNorm passed in a world of ", size);
  destroy_process_group();
  return 0;
}

// NCCL on this rank's GPU (the device tool's machine has one GPU, so one rank): every
// collective on CUDA tensors against the CPU group's result, then a DDP step on CUDA against
// the CPU reference. Skips (exit 0 with a message) without a GPU.
int nccl() {
  if (!cuda::is_available()) {
    say("no CUDA device: skipped");
    return 0;
  }
  const Device gpu = Device::cuda(rendezvous::world_info().local_rank);
  auto pg = init_process_group({.timeout = seconds(60)});
  const int rank = pg->rank(), size = pg->size();
  for (DType dtype : {kFloat32, kFloat64, kInt64, kFloat16, kBFloat16}) {
    // Half precision: 7 elements, so every value is exact in both formats.
    const int64_t n = is_half(dtype) ? 7 : 1001;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
      if ((op == ReduceOp::kAvg && dtype == kInt64) || (op == ReduceOp::kProduct && is_half(dtype))) continue;
      Tensor tensor = untracked::to(rank_values(rank, n, dtype), gpu);
      pg->all_reduce(tensor, op);
      std::vector<double> expected(n);
      for (int64_t i = 0; i < n; ++i) expected[i] = reduced(op, size, i);
      check_values(tensor, expected, str("NCCL all_reduce(", to_string(op), ") of ", dtype_name(dtype)));
    }
  }
  const std::string expected_backend = std::string(std::getenv("DISTGRAD_SHM") != nullptr ? "gloo" : "shm") + "+nccl";
  require(pg->backend_name() == expected_backend, "backend_name: expected ", expected_backend, ", found ",
          pg->backend_name());
  Tensor broadcast = untracked::to(rank_values(rank, 5, kFloat64), gpu);
  pg->broadcast(broadcast, size - 1);
  check_values(broadcast, rank_values(size - 1, 5, kFloat64).to_vector<double>(), "NCCL broadcast");
  std::vector<Tensor> gathered;
  for (int r = 0; r < size; ++r) gathered.push_back(zeros({r + 1}, {.dtype = kInt64, .device = gpu}));
  pg->all_gather(gathered, untracked::to(rank_values(rank, rank + 1, kInt64), gpu));
  for (int r = 0; r < size; ++r) {
    check_values(gathered[r], rank_values(r, r + 1, kFloat64).to_vector<double>(), str("NCCL all_gather ", r));
  }
  std::vector<Tensor> shares;
  for (int j = 0; j < size; ++j) shares.push_back(untracked::to(rank_values(rank, j + 2, kFloat32), gpu));
  Tensor mine = zeros({rank + 2}, {.device = gpu});
  pg->reduce_scatter(mine, shares);
  std::vector<double> expected(rank + 2);
  for (int64_t i = 0; i < rank + 2; ++i) expected[i] = reduced(ReduceOp::kSum, size, i);
  check_values(mine, expected, "NCCL reduce_scatter");
  std::vector<std::shared_ptr<Work>> works;
  std::vector<Tensor> tensors;
  for (int k = 0; k < 16; ++k) {
    tensors.push_back(full({1 << 16}, k, {.device = gpu}));
    works.push_back(pg->all_reduce_async(tensors.back()));
  }
  works.push_back(pg->barrier_async());
  for (auto& work : works) work->wait();
  for (int k = 0; k < 16; ++k) check_values(untracked::narrow(tensors[k], 0, 7, 1), {double(k * size)}, "NCCL async");

  auto net = make_mlp(7);
  net->to(gpu);
  DistributedDataParallel ddp(*net, pg, {.bucket_cap_mb = 1e-9, .first_bucket_cap_mb = 1e-9});
  auto reference = make_mlp(7);
  const Batch batch = full_batch(size, 100);
  const Batch local = share(batch, rank);
  nn::mse_loss(ddp.forward(untracked::to(local.x, gpu)), untracked::to(local.y, gpu)).backward();
  nn::mse_loss(reference->forward(batch.x), batch.y).backward();
  check_grads_equal(*net, *reference, 1e-6, "DDP on CUDA against the CPU reference");
  say("NCCL passed in a world of ", size);
  destroy_process_group();
  return 0;
}

}  // namespace
}  // namespace distgrad::ddp::testing

int main(int argc, char** argv) {
  using namespace distgrad::ddp::testing;
  return run_scenario(argc, argv,
                      {{"collectives", collectives},
                       {"subgroups", subgroups},
                       {"rank_dies", rank_dies},
                       {"rank_leaves", rank_leaves},
                       {"shm_agreement", shm_agreement},
                       {"hosts", hosts},
                       {"bad_switch", bad_switch},
                       {"same_host_off", same_host_off},
                       {"rank_stalls", rank_stalls},
                       {"ddp_gradients", ddp_gradients},
                       {"ddp_half", ddp_half},
                       {"ddp_no_sync", ddp_no_sync},
                       {"ddp_unused", ddp_unused},
                       {"ddp_buffers", ddp_buffers},
                       {"nccl", nccl},
                       {"sync_batch_norm", sync_batch_norm},
                       {"mismatched_sizes", mismatched_sizes},
                       {"with_rpc", with_rpc}});
}
