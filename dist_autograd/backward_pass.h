// BackwardPass: one distributed backward pass as one worker takes part in it. The driver begins
// it in its context (DistAutogradContext::begin_pass); each worker its gradient messages reach
// joins it under the same id; the RecvBackward nodes the local engine meets hand their gradients
// to it through their context (send_gradients). The pass holds its runs of the local engine,
// each known by the thread that runs it (the engine runs a graph on the calling thread), so a
// RecvBackward's gradients go to the run that reached it. Nothing of a pass lives in
// thread-locals.
//
// Note [Graphs kept through a pass]
// Gradients reach a worker's graph from several places in one backward pass: the driver's
// roots, and each message whose SendBackward receives gradients from a peer; these arrive as
// separate local runs of the engine, possibly on different threads, and their subgraphs may
// overlap. Each run therefore keeps its graph (backward is linear, so running overlapping parts
// separately sums the right gradients), and the saved tensors are released once, after the
// whole pass, on every worker that took part, unless retain_graph asked to keep them. The next
// pass of the context waits until every worker has released them: one that ran meanwhile would
// read saved tensors while they are being freed, or miss the "second time" error.
//
// Note [Gradient messages in flight]
// A RecvBackward does not wait for its message: the local engine goes on with the rest of the
// graph, so the gradients of every remote call of a pass travel, and the workers run their
// parts, at the same time (a meta-batch of 16 tasks over 3 workers would otherwise run one task
// after the other). A run awaits every message it sent before it ends (continuing from the
// gradients their replies bring, which may send more), so a pass still ends when every hop it
// started has ended, and the first failure among them (or the engine's own) is the run's error.
// Gradients a run owes to the worker whose message started it travel back in the reply to that
// message rather than as a message of their own, and the caller's pass goes on from them when the
// reply arrives: a remote call's backward costs one round trip, not two (a task's query loss goes
// back to the worker that adapted it; the gradient of the parameters it was sent comes back with
// the reply). A run awaits its messages, and goes on from their replies, in the order of the
// calls, not of their arrival (Note [Call order], dist_autograd/call_order.h).
//
// Note [Gradient waves]
// A run goes on from its replies in waves: it awaits every message it has sent so far, then runs
// the local engine once from all the sends those replies bring gradients for (in call order),
// which may send the next wave. The local graph below several sends (one tensor sent to every
// worker, as a data-parallel step sends its weights) then runs once, with the gradients summed,
// where one engine run per reply ran it once per reply: through a MAML inner loop whose every
// step sent its weights to W workers, that was W runs of each step's history, each reaching the
// earlier steps' messages again, W^k runs for k steps (5 steps over 4 workers: 0.58 s for a
// backward pass that takes 1 ms in one process). The engine runs the wave's sends first, in call
// order (ExecuteOptions::roots_in_order), so a leaf that several calls sent sums its gradients in
// call order, as the runs did.
//
// Note [Differentiable gradient messages]
// With create_graph, a pass records itself, across workers too: every run of the local engine
// records its backward computation (the engine's create_graph), and every gradient message and
// reply is made inside the context, so distributed autograd's interceptor records it like a
// forward call: a SendBackward for the gradients that require grad on the sender, a RecvBackward
// as their grad_fn on the receiver, in the same context. The gradients a pass computes are then
// tensors whose graph crosses the workers the way the forward graph did, backwards: a further
// pass of the context from a function of them (a Hessian-vector product, a gradient penalty, the
// outer loss of a MAML whose inner gradients were distributed) runs over the recorded pass like
// over any distributed graph, and so does a third. Sums of gradients at a leaf are recorded too.
// The graphs stay until the context is released (retain_graph defaults to create_graph, as in
// PyTorch); the context's release frees them on every worker it reached.
//
// Note [Passes stop below the inputs]
// A grad whose inputs are not all leaves (a MAML inner step's adapted weights) captures on the
// driver the gradient arriving at their edges. The local engine would run only the nodes that
// lead to an input; here a RecvBackward may lead back to one through other workers, so the
// driver's runs cannot prune by the local graph. They skip instead every node made before the
// oldest input's node (Node::sequence_nr, one counter per process): gradients flow from later
// nodes to earlier ones, on every worker, because a node's edges and a message's SendBackward
// exist before the node, and before the reply that depends on the message, are made; so no path
// from such a node, through any worker, reaches an input. Without the cut each inner step's pass
// ran through every earlier step and its recorded pass, and the work doubled with each step (5
// steps over 2 workers: 46 ms where one process took 1 ms). The leaves below the inputs get no
// gradient in such a pass's context.
#pragma once

#include <cstdint>
#include <exception>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "autograd/node.h"
#include "dist_autograd/call_order.h"
#include "rpc/codec.h"
#include "rpc/future.h"

namespace distgrad::dist_autograd {

class DistAutogradContext;

// Gradients for send functions of one worker: (message id, one gradient per tensor of the
// message).
using ReturnedGradients = std::vector<std::pair<int64_t, std::vector<Tensor>>>;

// How a pass runs on every worker it reaches: whether it keeps the saved tensors, and whether it
// records itself (Note [Differentiable gradient messages]).
struct PassOptions {
  bool retain_graph = false;
  bool create_graph = false;
};
DISTGRAD_CODEC(PassOptions, retain_graph, create_graph);  // gradient messages carry them

class BackwardPass {
 public:
  BackwardPass(int64_t id, PassOptions options) : id_(id), options_(options) {}
  BackwardPass(const BackwardPass&) = delete;
  BackwardPass& operator=(const BackwardPass&) = delete;

  int64_t id() const { return id_; }
  // The driver's inputs of grad() that are not leaves: every run of the pass here captures the
  // gradient arriving at their edges, and captured() returns the sums; those runs skip the nodes
  // made before `oldest_input`, the sequence number of the oldest input's node (leaves' included).
  // Set before the pass runs.
  void capture(std::vector<autograd::Edge> edges, uint64_t oldest_input) {
    capture_edges_ = std::move(edges);
    oldest_input_ = oldest_input;
  }
  autograd::TensorList captured() const;
  // The nodes this worker's runs of the pass started from (their graphs are the pass's here).
  std::vector<std::shared_ptr<autograd::Node>> roots() const;

  // Runs this worker's part of the pass from `roots` (edges) with `grads` on this thread,
  // accumulating leaves into `context` under `order`, then awaits every message the run sent
  // (Note [Gradient messages in flight]). Returns the gradients owed to `caller`, the worker
  // whose message started the run (-1: none; everything is sent).
  ReturnedGradients run(DistAutogradContext& context, const std::vector<autograd::Edge>& roots,
                        autograd::TensorList grads, int caller, RunOrder order);

  // Gradients for the SendBackward of `message_id` on `worker`, from the RecvBackward of that
  // message (at `order`) in the run on this thread: in its reply when `worker` started it, else
  // in a message the run awaits. Returns false, sending nothing, when no run of this pass is on
  // this thread (a local backward reached the node).
  bool send_gradients(int64_t context_id, int worker, int64_t message_id, const MessageOrder& order,
                      std::vector<Tensor>& grads);

 private:
  // A gradient message a run sent, and the place of its RecvBackward in the context's order.
  struct SentMessage {
    MessageOrder order;
    rpc::Future<ReturnedGradients> reply;
  };
  // A run of the local engine, from its start to its reply. Its fields belong to its thread.
  struct Run {
    std::thread::id thread;
    int caller;
    RunOrder order;
    ReturnedGradients for_caller;
    std::vector<SentMessage> sent;
  };

  // The run on this thread, or null.
  Run* run_on_this_thread();
  // Adds a run's captured gradients (capture()) to captured_.
  void add_captured(const autograd::TensorList& captured);
  // Runs the local engine for `run` from `roots`; records its failure, if any, in `failure`.
  void run_engine(DistAutogradContext& context, const Run& run, const std::vector<autograd::Edge>& roots,
                  autograd::TensorList grads, std::exception_ptr& failure);

  const int64_t id_;
  const PassOptions options_;
  std::vector<autograd::Edge> capture_edges_;  // set before the pass runs, then only read
  uint64_t oldest_input_ = 0;                  // likewise
  mutable std::mutex captured_mutex_;          // guards captured_ (runs on several threads add to it)
  autograd::TensorList captured_ ABSL_GUARDED_BY(captured_mutex_);
  mutable std::mutex runs_mutex_;  // guards the list runs_ (not the runs: each belongs to its thread) and roots_
  std::list<Run> runs_ ABSL_GUARDED_BY(runs_mutex_);
  std::vector<std::shared_ptr<autograd::Node>> roots_ ABSL_GUARDED_BY(runs_mutex_);
};

// RecvBackward's way out: sends `grads` (one per tensor of the message) to the SendBackward of
// `message_id` (at `order`) on `worker`, through the pass running in `context`; outside a pass
// (a local backward reached the node) as a pass of their own, which returns once `worker`'s
// part (and everything it started) has finished.
void send_gradients(DistAutogradContext& context, int worker, int64_t message_id, const MessageOrder& order,
                    std::vector<Tensor> grads);

}  // namespace distgrad::dist_autograd
