#include "nn/flatten.h"

#include "absl/strings/str_cat.h"
#include "autograd/ops.h"

namespace distgrad::nn {

std::string Flatten::name() const {
  return absl::StrCat("Flatten(start_dim=", start_dim_, ", end_dim=", end_dim_, ")");
}

Tensor Flatten::forward(const Tensor& input) {
  input.check_defined("Flatten");
  return distgrad::flatten(input, start_dim_, end_dim_);
}

}  // namespace distgrad::nn
