// Optimizer: the base of the in-place optimizers (torch.optim.Optimizer), and its checkpoints.
//
// An optimizer holds a list of leaf tensors that require grad (a module's parameters()) and
// per-parameter state (momentum buffers, moment estimates, step counts). The parameters come in
// one or more parameter groups (torch's param_groups), each with options of its own: a learning
// rate, a momentum, ... (see ParamGroup). step() updates each parameter in place from its
// grad(), with grad mode off; parameters whose grad() is undefined are skipped and their state
// left as it is. zero_grad() resets every grad() to undefined
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
//   dg::optim::SGD sgd({{.params = backbone, .options = {.lr = 1e-3, .momentum = 0.9}},
//                       {.params = head, .options = {.lr = 1e-2, .momentum = 0.9}}});
//
// Note [Optimizer state dict]
// state_dict() flattens torch's {"state": {index: {name: tensor}}} into one ParamDict:
// "state.<index>.<name>" for each parameter that has state (index = position in parameters(),
// which numbers the parameters of every group in order, as torch does), plus
// "parameter_count", an int64 0-dim tensor holding parameters().size(). "step" entries are
// int64 0-dim step counts kept on the CPU; every other entry has its parameter's shape (and is
// converted to its dtype and device when loaded). Hyper-parameters and groups are not part of
// it: they come from the constructor (and a scheduler). load_state_dict() replaces the whole
// state (parameters absent from `state` start afresh, as after construction) and checks every
// key before changing anything. The dict holds copies, so it is a snapshot that later steps
// do not change.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/param_dict.h"
#include "core/tensor.h"

namespace distgrad::optim {

// One parameter group (torch.optim's param_groups[i]): parameters and the options they are
// updated with. The options are a whole options struct (SGDOptions, AdamOptions, ...), so the
// defaults of a field a group does not set are the struct's, which are torch's:
//   SGDOptions base{.lr = 1e-2, .momentum = 0.9};
//   SGDOptions slow = base;
//   slow.lr = 1e-3;
//   SGD sgd({{.params = backbone, .options = slow}, {.params = head, .options = base}});
template <typename Options>
struct ParamGroup {
  std::vector<Tensor> params{};
  Options options = {};
};

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
  // Every parameter, group after group: the numbering of state_dict().
  const std::vector<Tensor>& parameters() const { return parameters_; }
  size_t num_param_groups() const { return num_groups_; }
  // The learning rate of `group` (torch: param_groups[group]['lr']), what schedulers
  // (optim/lr_scheduler.h) read and set. set_lr requires lr >= 0.
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  // "SGD", "Adam", "AdamW": used in errors.
  const std::string& name() const { return name_; }

  // The per-parameter state (Note [Optimizer state dict]).
  nn::ParamDict state_dict() const;
  void load_state_dict(const nn::ParamDict& state);
  // state_dict() to a safetensors file (written atomically), and back.
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  // `groups` holds each group's parameters. Checks that every parameter is a defined leaf that
  // requires grad, and that none appears twice (in one group or in two); errors name the
  // parameter's index and, when there are several groups, its group.
  Optimizer(std::string name, const std::vector<std::vector<Tensor>>& groups);

  // Updates `parameter`, of param group `group`, in place from `grad` (never undefined),
  // creating `state` on the first call (it starts empty). Runs with grad mode off.
  virtual void update(size_t group, const Tensor& parameter, const Tensor& grad, nn::ParamDict& state) = 0;
  // The names the state of a parameter of `group` holds once it has been updated, "step"
  // included if used.
  virtual std::vector<std::string> state_names(size_t group) const = 0;

  // What errors about `group`'s options start with: the name, and the group when there are
  // several ("SGD", "SGD (param group 1)").
  std::string group_context(size_t group) const;
  // Throws unless `group` < num_param_groups(); `function` ("lr", "set_lr") names the caller.
  void check_group(size_t group, const char* function) const;

 private:
  // load_state_dict and load; errors start with `context`.
  void load_state(const nn::ParamDict& state, const std::string& context);
  // "parameter 3", and " (param group 1)" after it when there are several groups.
  std::string describe_parameter(size_t index) const;

  std::string name_;
  std::vector<Tensor> parameters_;
  std::vector<size_t> group_of_;  // per parameter, the group it belongs to
  size_t num_groups_;
  std::vector<nn::ParamDict> state_;  // one per parameter, empty until its first update
};

namespace detail {

// Throws "<optimizer>: expected <what>, found <value>" unless `ok`: the check of every
// hyper-parameter, in-place and differentiable optimizers, schedulers and schedules alike. Callers pass conditions such
// as `lr >= 0`, which NaN fails.
void check_hyperparameter(bool ok, const std::string& optimizer, const char* what, double value);

}  // namespace detail

// An optimizer whose parameter groups each hold an `Options` struct with an `lr` (SGD, Adam): the
// groups, param_groups(), and lr / set_lr, written once.
template <typename Options>
class GroupedOptimizer : public Optimizer {
 public:
  using ParamGroup = optim::ParamGroup<Options>;

  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  double lr(size_t group) const override {
    check_group(group, "lr");
    return groups_[group].options.lr;
  }
  void set_lr(size_t group, double lr) override {
    check_group(group, "set_lr");
    detail::check_hyperparameter(lr >= 0, name() + ".set_lr(" + std::to_string(group) + ")", "lr >= 0", lr);
    groups_[group].options.lr = lr;
  }

 protected:
  GroupedOptimizer(std::string name, std::vector<ParamGroup> groups)
      : Optimizer(std::move(name), params_of(groups)), groups_(std::move(groups)) {}

  const Options& options_of(size_t group) const { return groups_[group].options; }

 private:
  static std::vector<std::vector<Tensor>> params_of(const std::vector<ParamGroup>& groups) {
    std::vector<std::vector<Tensor>> params;
    params.reserve(groups.size());
    for (const ParamGroup& group : groups) params.push_back(group.params);
    return params;
  }

  std::vector<ParamGroup> groups_;
};

}  // namespace distgrad::optim
