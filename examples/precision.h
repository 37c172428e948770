// --precision, for the examples that train in mixed precision (ddp_fashion_mnist, maml_fewshot):
// fp32, or the forward pass under autocast in bfloat16 (bf16) or float16 (fp16), matrix products
// and convolutions in that dtype and the losses in float32, as torch.autocast; fp16 also scales
// the loss (optim::GradScaler). Each program defines the flag with kPrecisionHelp.
#pragma once

#include <optional>
#include <string>

#include "distgrad.h"

namespace examples {

inline constexpr const char* kPrecisionHelp =
    "fp32, bf16 or fp16: the forward passes under autocast in bfloat16 or float16 (losses in float32); fp16 "
    "scales the loss";

// The autocast dtype of a --precision value: none for fp32; another value is an error naming it.
inline std::optional<distgrad::DType> autocast_dtype(const std::string& precision) {
  if (precision == "fp32") return std::nullopt;
  if (precision == "bf16") return distgrad::kBFloat16;
  DISTGRAD_CHECK(precision == "fp16", "--precision must be fp32, bf16 or fp16, found '", precision, "'");
  return distgrad::kFloat16;
}

// Autocast in `precision`'s dtype for `device`'s tensors while it lives; nothing for fp32.
class MixedPrecisionScope {
 public:
  MixedPrecisionScope(const std::string& precision, distgrad::Device device) {
    if (const std::optional<distgrad::DType> dtype = autocast_dtype(precision)) autocast_.emplace(device.type, *dtype);
  }

 private:
  std::optional<distgrad::autograd::AutocastGuard> autocast_;
};

// The loss scaler of `precision`: enabled for fp16 only, as torch.amp recommends.
inline distgrad::optim::GradScaler grad_scaler_for(const std::string& precision) {
  return distgrad::optim::GradScaler({.enabled = autocast_dtype(precision) == distgrad::kFloat16});
}

}  // namespace examples
