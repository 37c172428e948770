// The worker of the tracing tests: `trace_test_worker SCENARIO`, run as every rank of a world with
// DISTGRAD_TRACE set by tests/trace/trace_world_test.cc, which then reads the trace the world
// left. Rank 0 drives; the others serve.
//   chain:  rank 0 calls chain_middle on rank 1, which calls chain_end on rank 2, inside a user
//           range; one call fails on rank 1; one distributed backward pass through rank 1.
//   killed: rank 0 calls record_then_die on rank 1, which records a span, waits for its writer to
//           write it and is killed by SIGKILL; the call fails on rank 0.
//   ddp:    every rank runs one DistributedDataParallel step (no RPC): its bucket's all-reduce.
//   waves:  rank 0 sends one leaf to every other rank, sums what they return and runs one
//           distributed backward pass (Note [Gradient waves] in dist_autograd/backward_pass.h).
#include <signal.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "autograd/ops.h"
#include "core/creation.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/process_group.h"
#include "dist_autograd/dist_autograd.h"
#include "dist_autograd/init_rpc.h"
#include "nn/linear.h"
#include "tests/rpc/scenario.h"
#include "trace/trace.h"

namespace trace_test {

namespace dg = distgrad;
using dg::Tensor;
using namespace dg::rpc::testing;

constexpr int kChainCalls = 3;

int64_t chain_end(int64_t x) {
  DISTGRAD_TRACE_SCOPE("chain_end's work");
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return x + 1;
}
DISTGRAD_REMOTE(chain_end);

int64_t chain_middle(int64_t x) { return dg::rpc::rpc_sync(2, &chain_end, x * 10); }
DISTGRAD_REMOTE(chain_middle);

int64_t fail_here(int64_t x) { throw std::invalid_argument("fail_here refuses " + std::to_string(x)); }
DISTGRAD_REMOTE(fail_here);

Tensor square(const Tensor& x) { return x * x; }
DISTGRAD_REMOTE(square);

bool record_then_die() {
  { DISTGRAD_TRACE_SCOPE("before dying"); }
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // the writer writes every 200 ms
  ::raise(SIGKILL);
  return false;
}
DISTGRAD_REMOTE(record_then_die);

int chain() {
  return dg::auto_init_rpc(nullptr, dg::rpc::rank_zero_only([] {
                             require(dg::trace::enabled(), "DISTGRAD_TRACE is set, yet rank 0 does not record");
                             {
                               DISTGRAD_TRACE_SCOPE("driver");
                               for (int64_t i = 0; i < kChainCalls; ++i) {
                                 const int64_t got = dg::rpc::rpc_sync(1, &chain_middle, i);
                                 require(got == i * 10 + 1, "chain_middle(", i, ") returned ", got);
                               }
                             }
                             expect_error("fail_here on rank 1", [] { dg::rpc::rpc_sync(1, &fail_here, int64_t{7}); });
                             dg::autograd::Context ctx;
                             const Tensor x = dg::ones({4}).requires_grad_(true);
                             dg::autograd::backward(ctx, {dg::rpc::rpc_sync(1, &square, x).sum()});
                             say("chain passed");
                           }));
}

int killed() {
  return dg::auto_init_rpc(nullptr, [] {
    if (dg::rpc::get_rank() != 0) {
      std::this_thread::sleep_for(std::chrono::seconds(60));  // killed inside record_then_die first
      return;
    }
    expect_error("record_then_die on rank 1",
                 [] { dg::rpc::rpc_sync_with_timeout(1, std::chrono::seconds(20), &record_then_die); });
    dg::rpc::shutdown(/*graceful=*/false);
    say("killed passed");
  });
}

int waves() {
  return dg::auto_init_rpc(nullptr, dg::rpc::rank_zero_only([] {
                             dg::autograd::Context ctx;
                             const Tensor w = dg::ones({4}).requires_grad_(true);
                             Tensor loss = dg::zeros({});
                             for (int rank = 1; rank < dg::rpc::get_world_size(); ++rank) {
                               loss = loss + dg::rpc::rpc_sync(rank, &square, w).sum();
                             }
                             dg::autograd::backward(ctx, {loss});
                             say("waves passed");
                           }));
}

int ddp_step() {
  auto group = dg::ddp::init_process_group({.backend = dg::ddp::Backend::kCpu, .timeout = std::chrono::seconds(60)});
  require(dg::trace::enabled(), "DISTGRAD_TRACE is set, yet rank ", group->rank(), " does not record");
  auto net = std::make_shared<dg::nn::Linear>(4, 3);  // one bucket of 15 float32 values
  dg::ddp::DistributedDataParallel ddp(*net, group);
  dg::sum(ddp.forward(dg::ones({2, 4}))).backward();
  dg::ddp::destroy_process_group();
  return 0;  // the file is written at exit
}

}  // namespace trace_test

int main(int argc, char** argv) {
  return distgrad::rpc::testing::scenario_main(argc, argv,
                                               {{"chain", trace_test::chain},
                                                {"killed", trace_test::killed},
                                                {"ddp", trace_test::ddp_step},
                                                {"waves", trace_test::waves}});
}
