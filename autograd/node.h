// Node and Edge: the graph that autograd records and the engine runs backwards.
//
// A Node is the backward function of one recorded op. It receives the gradients of the op's
// outputs (its "inputs", in backward order) and returns the gradients of the op's inputs,
// which travel along its `next_edges` to the nodes that produced those inputs. An Edge names
// one input slot of one node. Leaves that require grad end in an AccumulateGrad node.
//
// Ownership points from outputs towards inputs: a tensor owns its grad_fn, a node owns the
// nodes of its next edges, so the graph lives as long as some output of it does. Nothing
// points back with a strong reference (see SavedVariable for saved outputs).
//
//   y = x * w                      y.grad_fn() -> MulBackward
//   MulBackward.next_edges()  ->   {AccumulateGrad(x), 0}, {AccumulateGrad(w), 0}
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/tensor.h"

namespace distgrad::autograd {

class Node;
using TensorList = std::vector<Tensor>;

// One input slot (`input_nr`) of a node; invalid (function == nullptr) where no gradient is needed.
struct Edge {
  std::shared_ptr<Node> function;
  uint32_t input_nr = 0;

  bool is_valid() const { return function != nullptr; }
};

// A node's next edges; most ops have one or two inputs, kept inline.
using EdgeList = absl::InlinedVector<Edge, 2>;

// What a gradient arriving at one input slot must look like: the forward output's shape,
// dtype and device.
struct InputMetadata {
  Shape sizes;
  DType dtype = kFloat32;
  Device device;

  std::string describe() const;
};

// A hook on the gradient of one input slot before the node runs; a defined result replaces it.
using GradientHook = std::function<Tensor(const Tensor&)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(EdgeList next_edges = {});
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Gradients of the op's inputs (one per next edge; undefined where none flows), given the
  // gradients of its outputs (one per input slot; undefined where none arrived).
  virtual TensorList apply(TensorList&& grads) = 0;
  // "MulBackward", for error messages and graph dumps.
  virtual std::string name() const = 0;
  // Frees what the node saved for backward; called after it ran unless the graph is retained.
  virtual void release_variables() {}

  const EdgeList& next_edges() const { return next_edges_; }
  const Edge& next_edge(size_t i) const { return next_edges_[i]; }
  size_t num_outputs() const { return next_edges_.size(); }
  // True when the gradient of the op's input `i` is wanted.
  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].is_valid(); }

  // Input slots: one per forward output, with the metadata a gradient must match.
  uint32_t add_input_metadata(const Tensor& output);
  size_t num_inputs() const { return input_metadata_.size(); }
  const InputMetadata& input_metadata(size_t i) const { return input_metadata_[i]; }
  // A zero gradient for input slot `i`, for ops that need every gradient defined.
  Tensor zeros_for_input(size_t i) const;

  // Order of creation.
  uint64_t sequence_nr() const { return sequence_nr_; }
  // The length of the longest path from this node to a node without next edges (0 for those):
  // a node reaches only nodes of smaller topological numbers, so the engine skips what lies
  // below every gradient it captures (as PyTorch's engine does). Fixed at construction, as the
  // edges are.
  uint64_t topological_nr() const { return topological_nr_; }
  // Among ready nodes the engine runs the highest priority first: by default the latest made.
  virtual uint64_t priority() const { return sequence_nr_; }

  // Hooks on the gradient of input slot `input_nr` (tensor hooks of non-leaf outputs).
  int64_t add_gradient_hook(uint32_t input_nr, GradientHook hook);
  bool remove_gradient_hook(int64_t id);
  // Runs the hooks of slot `input_nr` on `grad` and returns the (possibly replaced) gradient.
  Tensor run_gradient_hooks(uint32_t input_nr, Tensor grad) const;
  bool has_gradient_hooks() const { return !gradient_hooks_.empty(); }

 protected:
  EdgeList next_edges_;

 private:
  struct HookEntry {
    int64_t id;
    uint32_t input_nr;
    GradientHook hook;
  };

  uint64_t sequence_nr_;
  uint64_t topological_nr_ = 0;
  absl::InlinedVector<InputMetadata, 1> input_metadata_;
  std::vector<HookEntry> gradient_hooks_;
};

// Ids for hooks, unique in the process.
int64_t next_hook_id();

}  // namespace distgrad::autograd
