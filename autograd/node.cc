#include "autograd/node.h"

#include <algorithm>
#include <atomic>

#include "core/creation.h"

namespace distgrad::autograd {
namespace {

std::atomic<uint64_t> next_sequence_nr{0};
std::atomic<int64_t> next_hook{1};

}  // namespace

std::string InputMetadata::describe() const {
  return detail::str_cat(dtype_name(dtype), " of shape ", shape_str(sizes), " on ", device.str());
}

int64_t next_hook_id() { return next_hook.fetch_add(1, std::memory_order_relaxed); }

Node::Node(EdgeList next_edges)
    : next_edges_(std::move(next_edges)), sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {
  for (const Edge& edge : next_edges_) {
    if (edge.is_valid()) topological_nr_ = std::max(topological_nr_, edge.function->topological_nr() + 1);
  }
}

uint32_t Node::add_input_metadata(const Tensor& output) {
  input_metadata_.push_back({output.sizes(), output.dtype(), output.device()});
  return static_cast<uint32_t>(input_metadata_.size() - 1);
}

Tensor Node::zeros_for_input(size_t i) const {
  const InputMetadata& metadata = input_metadata_.at(i);
  return zeros(metadata.sizes, {.dtype = metadata.dtype, .device = metadata.device});
}

int64_t Node::add_gradient_hook(uint32_t input_nr, GradientHook hook) {
  const int64_t id = next_hook_id();
  gradient_hooks_.push_back({id, input_nr, std::move(hook)});
  return id;
}

bool Node::remove_gradient_hook(int64_t id) {
  return std::erase_if(gradient_hooks_, [id](const HookEntry& entry) { return entry.id == id; }) > 0;
}

Tensor Node::run_gradient_hooks(uint32_t input_nr, Tensor grad) const {
  for (const HookEntry& entry : gradient_hooks_) {
    if (entry.input_nr != input_nr) continue;
    Tensor replaced = entry.hook(grad);
    if (replaced.defined()) grad = std::move(replaced);
  }
  return grad;
}

}  // namespace distgrad::autograd
