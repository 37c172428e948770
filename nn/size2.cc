#include "nn/size2.h"

#include "absl/strings/str_cat.h"

namespace distgrad::nn {

std::string Size2::str() const {
  if (values[0] == values[1]) return absl::StrCat(values[0]);
  return absl::StrCat("(", values[0], ", ", values[1], ")");
}

}  // namespace distgrad::nn
