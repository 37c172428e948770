#include "core/error.h"

namespace distgrad::detail {

void throw_error(std::string message) { throw Error(std::move(message)); }

}  // namespace distgrad::detail
