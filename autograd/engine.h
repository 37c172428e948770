// Engine: runs a recorded graph backwards.
//
// One call to Engine::execute is one graph task: it counts, for every node reachable from the
// roots, how many edges lead into it, then runs nodes as their count drops to zero (later
// nodes first among the ready ones; AccumulateGrad nodes as soon as they are ready, so a
// leaf's gradient is complete as early as possible, which DDP's buckets rely on). Gradients
// arriving at one input slot from several edges are summed in that node's input buffer.
// Everything runs on the calling thread, with grad mode equal to create_graph
// (Note [Higher order] in function.h).
//
// With capture edges (autograd::grad, backward with inputs), only the nodes that lead to one of
// them run (with ExecuteOptions::run_nodes_made_since, every node made since), and the gradient
// arriving at each is returned instead of being accumulated.
//
// The user-facing entry points are autograd::backward and autograd::grad (autograd/autograd.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "autograd/node.h"

namespace distgrad::autograd {

struct ExecuteOptions {
  bool keep_graph = false;    // keep saved tensors for another backward pass
  bool create_graph = false;  // record the backward pass itself
  // When set, a leaf's gradient (after its hooks) goes here instead of into its grad():
  // distributed autograd accumulates leaves into the backward pass's context.
  std::function<void(const Tensor& leaf, const Tensor& grad)> accumulate_leaf;
  // With capture edges, run every reachable node made at or after this sequence number
  // (Node::sequence_nr), not only those that lead to a capture: in distributed autograd a node
  // that sends gradients to another worker may lead back to a capture here through that worker,
  // but a node made before every capture's cannot (Note [Passes stop below the inputs] in
  // dist_autograd/backward_pass.h).
  std::optional<uint64_t> run_nodes_made_since;
  // Run the roots' nodes, once ready, before any other node and in the order of the roots, so
  // that the gradients several roots pass to one node are summed in that order: distributed
  // autograd runs one engine from many messages' sends and sums in the order of the calls.
  bool roots_in_order = false;
};

class Engine {
 public:
  // Runs the graph backwards from `roots`, the edges receiving `root_grads` (one each).
  // Returns the gradients that arrived at `capture_edges` (one each; undefined where none did).
  static TensorList execute(const std::vector<Edge>& roots, TensorList root_grads, const ExecuteOptions& options,
                            const std::vector<Edge>& capture_edges = {});

  // Queues `callback` to run on this thread once the backward pass running on it (the innermost
  // execute) has run every node, before execute returns; callbacks may queue more. They do not
  // run when the pass throws. DDP waits for its gradient all-reduces here (PyTorch's
  // Variable._execution_engine.queue_callback). Throws outside a backward pass.
  static void queue_callback(std::function<void()> callback);
};

}  // namespace distgrad::autograd
