// Starting RPC with distributed autograd: init_rpc and auto_init_rpc, the entry points of a
// distributed program (distgrad.h includes this header).
//
// rpc knows nothing of autograd (docs/architecture.md): an agent runs the call interceptors it is
// started with (rpc/interceptor.h). init_rpc starts it with distributed autograd's
// (dist_autograd/interceptor.h) after those of RpcOptions::interceptors, as torch's
// rpc.init_rpc initialises torch.distributed.autograd; rpc::start_agent starts one without it.
// Stop with rpc::shutdown (rpc/rpc.h).
//
//   int main() {
//     return dg::auto_init_rpc([] { dg::manual_seed(dg::get_rank()); },   // worker_init_fn
//                              dg::rank_zero_only(train));                // others serve
//   }
#pragma once

#include <functional>

#include "rpc/options.h"

namespace distgrad::rpc {

// Starts this process's agent with distributed autograd's interceptor and waits for every
// worker (see rpc/agent.h). Once per process.
void init_rpc(const RpcOptions& options = {});

// Runs init_rpc, a barrier, worker_init_fn (if any) on every rank, a barrier, main, and a
// graceful shutdown (API.md §5). Returns 0, or 1 after printing "[workerN] error: ..." when
// something threw. An exception from main still ends in the graceful shutdown, so the other
// ranks finish cleanly (torch's `try: main() finally: rpc.shutdown()`); one from init, the
// barriers or worker_init_fn leaves at once (the others then see this worker as gone). A worker
// that rejoined a running world (Note [Rejoining workers] in rpc/agent.cc) skips the barriers.
int auto_init_rpc(const std::function<void()>& worker_init_fn, const std::function<void()>& main,
                  const RpcOptions& options = {});

}  // namespace distgrad::rpc

namespace distgrad {
// The user-facing names of API.md at the top level: dg::init_rpc, dg::auto_init_rpc.
using rpc::auto_init_rpc;
using rpc::init_rpc;
}  // namespace distgrad
