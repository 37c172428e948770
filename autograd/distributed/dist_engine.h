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
// the engine's own) is the pass's error. Gradients a worker's pass owes to the worker whose
// message started it travel back in the reply to that message rather than as a message of
// their own, and the caller's pass goes on from them when the reply arrives: a remote call's
// backward costs one round trip, not two (a task's query loss goes back to the worker that
// adapted it; the gradient of the parameters it was sent comes back with the reply).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "autograd/distributed/context.h"
#include "autograd/node.h"

namespace distgrad::autograd::distributed {

// Gradients for send functions of one worker: (message id, one gradient per tensor of the
// message).
using ReturnedGradients = std::vector<std::pair<int64_t, std::vector<Tensor>>>;

// Runs this worker's part of a pass: the local engine from `roots` (edges) with `grads`,
// accumulating leaves into `context`, and then the messages it sent. Returns the gradients for
// `caller`'s send functions (-1: none; everything is sent).
ReturnedGradients run_local_pass(DistAutogradContext& context, const std::vector<Edge>& roots, TensorList grads,
                                 bool retain_graph, int caller);

// RecvBackward's transport: sends `grads` (one per tensor of the message) to the SendBackward of
// `message_id` on `worker`. Inside run_local_pass the call is awaited by the pass, or the
// gradients wait for the reply when `worker` is its caller; elsewhere it returns once that
// worker's part of the pass (and everything it started) has finished.
void send_gradients(int worker, int64_t context_id, int64_t message_id, std::vector<Tensor> grads);

}  // namespace distgrad::autograd::distributed
