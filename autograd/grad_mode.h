// Grad mode: whether ops record the graph autograd differentiates.
//
// Grad mode is per thread and on by default. Ops run with it off record nothing, even on
// tensors that require grad (optimizer updates, evaluation). The backward engine turns it on
// exactly when the caller asked for create_graph, so that backward formulas, which are built
// from differentiable ops, record a graph that can be differentiated again.
//
//   {
//     distgrad::autograd::NoGradGuard no_grad;   // nothing in this scope is recorded
//     distgrad::untracked::add_(weight, update);
//   }
#pragma once

namespace distgrad::autograd {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Sets grad mode for a scope and restores the previous mode when it ends.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~GradModeGuard() { GradMode::set_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// Turns recording off for a scope (torch.no_grad).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

// Turns recording on for a scope, also inside a NoGradGuard (torch.enable_grad).
class EnableGradGuard : public GradModeGuard {
 public:
  EnableGradGuard() : GradModeGuard(true) {}
};

}  // namespace distgrad::autograd
