// The distributed engine's internals, shared by the nodes and the public API (internal).
//
// Note [Graphs kept through a pass]
// Gradients reach a worker's graph from several places in one backward pass: the driver's
// roots, and each message whose SendBackward receives gradients from a peer; these arrive as
// separate local engine runs, possibly on different threads, and their subgraphs may overlap.
// Each run therefore keeps its graph (backward is linear, so running overlapping parts
// separately sums the right gradients), and the saved tensors are released once, after the
// whole pass, on every worker that took part, unless retain_graph asked to keep them. The next
// pass of the context waits until every worker has released them: one that ran meanwhile would
// read saved tensors while they are being freed, or miss the "second time" error.
//
// Note [Gradient messages in flight]
// A RecvBackward does not wait for its message: the local engine goes on with the rest of the
// graph, so the gradients of every remote call of a pass travel, and the workers run their
// parts, at the same time (a meta-batch of 16 tasks over 3 workers would otherwise run one task
// after the other). run_local_pass awaits every message its engine sent before it returns, so
// a pass still ends when every hop it started has ended, and the first failure among them (or
// the engine's own) is the pass's error.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "autograd/distributed/context.h"
#include "autograd/node.h"

namespace distgrad::autograd::distributed {

// Runs this worker's part of a pass: the local engine from `roots` (edges) with `grads`,
// accumulating leaves into `context`.
void run_local_pass(DistAutogradContext& context, const std::vector<Edge>& roots, TensorList grads, bool retain_graph);

// RecvBackward's transport: sends `grads` (one per tensor of the message) to the SendBackward of
// `message_id` on `worker`. Inside run_local_pass the call is awaited when the local engine is
// done (Note [Gradient messages in flight]); elsewhere it returns once that worker's part of the
// pass (and everything it started) has finished.
void send_gradients(int worker, int64_t context_id, int64_t message_id, std::vector<Tensor> grads);

}  // namespace distgrad::autograd::distributed
