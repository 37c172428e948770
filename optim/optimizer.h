// Optimizer: the base of the in-place optimizers (torch.optim.Optimizer), and its checkpoints.
//
// An optimizer holds a list of leaf tensors that require grad (a module's parameters()) and
// per-parameter state (momentum buffers, moment estimates, step counts). step() updates each
// parameter in place from its grad(), with grad mode off; parameters whose grad() is undefined
// are skipped and their state left as it is. zero_grad() resets every grad() to undefined
// (torch's set_to_none=True), which is what makes the next backward pass start from zero.
//
//   dg::optim::Adam optimizer(net.parameters(), 1e-3);
//   for (const auto& [x, y] : batches) {
//     optimizer.zero_grad();
//     dg::nn::mse_loss(net.forward(x), y).backward();
//     optimizer.step();
//   }
//   optimizer.save("adam.safetensors");      // with dg::nn::save(net, ...) for the weights
//
// Note [Optimizer state dict]
// state_dict() flattens torch's {"state": {index: {name: tensor}}} into one ParamDict:
// "state.<index>.<name>" for each parameter that has state (index = position in
// parameters()), plus "parameter_count", an int64 0-dim tensor holding parameters().size().
// "step" entries are int64 0-dim step counts kept on the CPU; every other entry has its
// parameter's shape (and is converted to its dtype and device when loaded). Hyper-parameters
// are not part of it: they come from the constructor. load_state_dict() replaces the whole
// state (parameters absent from `state` start afresh, as after construction) and checks every
// key before changing anything. The dict holds copies, so it is a snapshot that later steps
// do not change.
#pragma once

#include <string>
#include <vector>

#include "core/param_dict.h"
#include "core/tensor.h"

namespace distgrad::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Not copyable: a copy would share the state tensors that step() updates in place.
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  Optimizer(Optimizer&&) = default;
  Optimizer& operator=(Optimizer&&) = default;

  // Updates every parameter that has a grad() in place (with grad mode off).
  void step();
  // Resets every parameter's grad() to undefined.
  void zero_grad();
  const std::vector<Tensor>& parameters() const { return parameters_; }
  // "SGD", "Adam", "AdamW": used in errors.
  const std::string& name() const { return name_; }

  // The per-parameter state (Note [Optimizer state dict]).
  nn::ParamDict state_dict() const;
  void load_state_dict(const nn::ParamDict& state);
  // state_dict() to a safetensors file (written atomically), and back.
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  // Checks that every parameter is a defined leaf that requires grad, and that none appears
  // twice; errors name the parameter's index.
  Optimizer(std::string name, std::vector<Tensor> parameters);

  // Updates `parameter` in place from `grad` (never undefined), creating `state` on the first
  // call (it starts empty). Runs with grad mode off.
  virtual void update(const Tensor& parameter, const Tensor& grad, nn::ParamDict& state) = 0;
  // The names a parameter's state holds once it has been updated, "step" included if used.
  virtual std::vector<std::string> state_names() const = 0;

 private:
  // load_state_dict and load; errors start with `context`.
  void load_state(const nn::ParamDict& state, const std::string& context);

  std::string name_;
  std::vector<Tensor> parameters_;
  std::vector<nn::ParamDict> state_;  // one per parameter, empty until its first update
};

namespace detail {

// Throws "<optimizer>: expected <what>, found <value>" unless `ok`: the check of every
// hyper-parameter, in-place and differentiable optimizers alike. Callers pass conditions such
// as `lr >= 0`, which NaN fails.
void check_hyperparameter(bool ok, const std::string& optimizer, const char* what, double value);

}  // namespace detail

}  // namespace distgrad::optim
