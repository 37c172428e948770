// GradScaler: loss scaling for float16 training (torch.amp.GradScaler, same defaults and rules).
//
// float16 gradients of small magnitude underflow to zero. The scaler multiplies the loss by a
// large factor before backward, so that the gradients are computed scaled; unscale_ divides
// them back (in place) and checks them for infinities and NaNs; step runs the optimizer only
// when none was found (the step is skipped otherwise); update adapts the factor: halved
// (backoff_factor) after a step with non-finite gradients, doubled (growth_factor) after
// growth_interval steps in a row without.
//
//   dg::optim::GradScaler scaler;
//   for (const auto& [x, y] : batches) {
//     optimizer.zero_grad();
//     scaler.scale(loss_of(x, y)).backward();
//     scaler.unscale_(optimizer);                       // optional: to clip the true gradients
//     dg::nn::clip_grad_norm_(net.parameters(), 1.0);
//     scaler.step(optimizer);                           // skipped when a gradient is inf or NaN
//     scaler.update();
//   }
//
// Per optimizer and iteration, unscale_ may run once, before step; step once; update once after
// every step of the iteration (errors name what came out of order, as torch's). A disabled
// scaler (enabled = false) changes nothing: scale returns the loss, step is optimizer.step().
#pragma once

#include <cstdint>
#include <unordered_map>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace distgrad::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * the current scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of `optimizer`'s parameters by the scale, in place, and records
  // whether any was infinite or NaN.
  void unscale_(Optimizer& optimizer);
  // Unscales if unscale_ was not called, then runs optimizer.step() unless a gradient was
  // non-finite; returns whether it stepped.
  bool step(Optimizer& optimizer);
  // Adapts the scale from the steps since the last update (at least one optimizer must have
  // been unscaled or stepped).
  void update();
  // Sets the scale instead (torch's update(new_scale)).
  void update(double new_scale);

  double get_scale() const { return scale_; }
  bool is_enabled() const { return options_.enabled; }
  // Steps in a row without a non-finite gradient since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }

 private:
  struct Stage {
    bool unscaled = false;
    bool stepped = false;
    bool found_inf = false;
  };

  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  std::unordered_map<const Optimizer*, Stage> stages_;  // this iteration's, per optimizer
};

}  // namespace distgrad::optim
