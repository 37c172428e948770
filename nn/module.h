// Module: the base of every layer and model (torch.nn.Module).
//
// A module owns named parameters (leaf tensors that require grad), named buffers (state that
// is saved but not trained, such as BatchNorm's running statistics) and named child modules,
// all registered in its constructor. Parameters and buffers live in the module's own Tensor
// members; registration records where they are, so that functional_call can run the module
// with other tensors in their place (Note [Parameter slots]). Names of nested entries join
// with dots: "encoder.fc1.weight".
//
//   struct Net : dg::nn::Module {
//     Net() {
//       fc1 = register_module("fc1", std::make_shared<dg::nn::Linear>(1, 40));
//       fc2 = register_module("fc2", std::make_shared<dg::nn::Linear>(40, 1));
//     }
//     dg::Tensor forward(const dg::Tensor& x) override { return fc2->forward(dg::relu(fc1->forward(x))); }
//     std::shared_ptr<dg::nn::Linear> fc1, fc2;
//   };
//
// Note [Parameter slots]
// register_parameter(name, member) keeps a pointer to the member Tensor. Everything that
// reads or replaces parameters (named_parameters, to(), load_state_dict, functional_call)
// goes through those pointers, so layers simply use their members in forward(). A module is
// therefore neither copyable nor movable (the pointers would dangle): hold it by value in
// place or by shared_ptr, as children are.
//
// Note [Slot locking]
// functional_call puts other tensors into a module's slots while its forward runs. So that many
// threads may run functional_call on one module at once (the worker threads of an RPC server
// serving one model, TorchOpt style), each module has a recursive mutex over its slots, and
// functional_call holds those of the whole subtree from the swap until the module's own tensors
// are back: concurrent functional_calls on one module run their forwards one at a time, and what
// they compute from the forward (gradients, inner steps) runs in parallel. Everything else that
// reads or writes slots holds them too (named_parameters, named_buffers, state_dict, to,
// load_state_dict, zero_grad, module_clone), so it sees the module's own tensors. Locks are taken
// parents before children, so callers on overlapping subtrees never wait on each other in a
// cycle; the mutex is recursive, so a forward may call functional_call on its own module or a
// child. A plain forward() on another thread is not guarded: it reads the slots as they are.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/param_dict.h"
#include "core/tensor.h"

namespace distgrad::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation of single-input modules (layers, Sequential). Modules with other inputs
  // define their own forward and are called directly (functional_call forwards any arguments).
  virtual Tensor forward(const Tensor& input);
  // "Linear(in_features=1, out_features=40, bias=true)", used by printing and errors.
  virtual std::string name() const { return "Module"; }

  // Parameters and buffers of this module and (with recurse) of its descendants, in
  // registration order, under their dotted names.
  ParamDict named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  ParamDict named_buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }

  // Training mode (the default) or evaluation mode, for this module and its descendants.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves (or converts) every parameter and buffer; parameters stay leaves that require grad.
  // Optimizers made before hold the old tensors: make them after moving, as in PyTorch.
  void to(Device device);
  void to(DType dtype);

  // Every parameter and buffer, detached, under its dotted name.
  ParamDict state_dict() const;
  // Copies `state` into the parameters and buffers (shapes must match). With `strict`, keys
  // missing from `state` and keys the module does not have are errors naming them.
  void load_state_dict(const ParamDict& state, bool strict = true);
  // Resets every parameter's grad() to undefined.
  void zero_grad();

  // Every parameter and buffer slot under its dotted name (Note [Parameter slots]).
  struct Slot {
    std::string name;
    Tensor* tensor;
    bool is_parameter;
  };
  std::vector<Slot> slots() const;

  // Holds the slot locks of this module and its descendants (Note [Slot locking]) while it lives.
  class SlotLock {
   public:
    explicit SlotLock(const Module& module);

   private:
    void lock_subtree(const Module& module);

    std::vector<std::unique_lock<std::recursive_mutex>> locks_;  // parents before children
  };

 protected:
  // Registers `slot` (a member of this module) as a parameter: it is made a leaf that
  // requires grad. Names must be unique within the module and contain no dot.
  void register_parameter(std::string name, Tensor& slot, bool requires_grad = true);
  void register_buffer(std::string name, Tensor& slot);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> child) {
    add_child(std::move(name), child);
    return child;
  }

 private:
  void check_new_name(const std::string& name) const;
  void add_child(std::string name, std::shared_ptr<Module> child);
  void collect_slots(const std::string& prefix, std::vector<Slot>& slots) const;

  bool training_ = true;
  // Guards the tensors that own_slots_ point to against functional_call's swaps (Note [Slot
  // locking]); registration, in the constructor, needs no lock.
  mutable std::recursive_mutex slots_mutex_;
  std::vector<Slot> own_slots_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// Saves the module's state_dict to a safetensors file (atomically), and loads it back.
void save(const Module& module, const std::string& path);
void load(Module& module, const std::string& path, bool strict = true);

}  // namespace distgrad::nn
