// Errors raised by distgrad inside a process.
//
// Every failed precondition throws `distgrad::Error` (never aborts) with a message that
// says what was expected and what was found:
//
//   DISTGRAD_CHECK(a.dim() == 2, "matmul: expected a 2-D matrix, found shape ", shape_str(a.sizes()));
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace distgrad {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

[[noreturn]] void throw_error(std::string message);

}  // namespace detail
}  // namespace distgrad

// Throws distgrad::Error with the streamed message when `condition` is false.
#define DISTGRAD_CHECK(condition, ...)                                           \
  do {                                                                           \
    if (!(condition)) [[unlikely]] {                                             \
      ::distgrad::detail::throw_error(::distgrad::detail::str_cat(__VA_ARGS__)); \
    }                                                                            \
  } while (0)

// Throws distgrad::Error with the streamed message.
#define DISTGRAD_FAIL(...) ::distgrad::detail::throw_error(::distgrad::detail::str_cat(__VA_ARGS__))
