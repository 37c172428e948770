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
// `message_id` on `worker` and waits until that worker's part of the pass (and everything it
// started) has finished.
void send_gradients(int worker, int64_t context_id, int64_t message_id, std::vector<Tensor> grads);

}  // namespace distgrad::autograd::distributed
