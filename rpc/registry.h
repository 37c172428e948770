// Registered functions: what a worker may be asked to run, by a stable name.
//
// DISTGRAD_REMOTE(fn), at namespace scope, registers the free function `fn` under the name
// "fn" in every process (all ranks run the same binary, so names agree); DISTGRAD_REMOTE_NAMED
// gives another name. Registration happens during static initialisation; a name registered
// twice is reported by init_rpc, which refuses to start. Only registered functions can be
// called remotely.
//
// The handler made for a function decodes its arguments with the codecs of its parameter
// types (rpc/codec.h), calls it, and encodes the result. Arguments that do not match (their
// number or types) are answered with INVALID_ARGUMENT naming the function and the argument.
//
//   dg::Tensor my_add(dg::Tensor a, dg::Tensor b) { return a + b; }
//   DISTGRAD_REMOTE(my_add);
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "rpc/codec.h"
#include "rpc/errors.h"

namespace distgrad::rpc {

// Encoded values: a payload and the tensors it refers to.
struct Encoded {
  std::string payload;
  std::vector<Tensor> tensors;
};

// Runs a registered function on encoded arguments (`num_arguments` of them) and returns its
// encoded result; throws StatusError for arguments that do not decode.
using Handler =
    std::function<Encoded(std::string_view payload, const std::vector<Tensor>& tensors, uint32_t num_arguments)>;

using FunctionAddress = void (*)();

class FunctionRegistry {
 public:
  static FunctionRegistry& instance();

  // Never throws (it runs during static initialisation): a second registration of a name is
  // remembered and reported by duplicate_names().
  void add(std::string name, FunctionAddress function, Handler handler);
  // The handler of `name`, or null.
  const Handler* find(std::string_view name) const;
  // The name a function was registered under, or null.
  const std::string* name_of(FunctionAddress function) const;
  std::vector<std::string> duplicate_names() const;
  std::vector<std::string> names() const;

 private:
  mutable std::mutex mutex_;  // guards the maps (registration can happen from several threads)
  std::map<std::string, Handler, std::less<>> handlers_;
  std::map<FunctionAddress, std::string> names_;
  std::vector<std::string> duplicates_;
};

namespace detail {

// Decodes the arguments of `function`, naming the one that does not decode.
template <typename... Params, size_t... kIndex>
std::tuple<std::decay_t<Params>...> decode_arguments(const std::string& function, Decoder& in,
                                                     std::index_sequence<kIndex...>) {
  [[maybe_unused]] auto decode_one = [&]<typename P>(size_t index) -> P {
    try {
      return Codec<P>::decode(in);
    } catch (const CodecError& error) {
      throw StatusError(StatusCode::kInvalidArgument, function + ": argument " + std::to_string(index) + " (" +
                                                          Codec<P>::name() + "): " + error.what());
    }
  };
  return std::tuple<std::decay_t<Params>...>{decode_one.template operator()<std::decay_t<Params>>(kIndex)...};
}

template <typename R, typename... Params>
Handler make_handler(std::string name, R (*function)(Params...)) {
  return [name = std::move(name), function](std::string_view payload, const std::vector<Tensor>& tensors,
                                            uint32_t num_arguments) -> Encoded {
    if (num_arguments != sizeof...(Params)) {
      throw StatusError(StatusCode::kInvalidArgument, name + ": expected " + std::to_string(sizeof...(Params)) +
                                                          " arguments, the call has " + std::to_string(num_arguments));
    }
    Decoder in(payload, tensors);
    auto arguments = decode_arguments<Params...>(name, in, std::index_sequence_for<Params...>{});
    if (in.remaining() != 0) {
      throw StatusError(StatusCode::kInvalidArgument,
                        name + ": " + std::to_string(in.remaining()) + " bytes follow the last argument");
    }
    Encoder out;
    if constexpr (std::is_void_v<R>) {
      std::apply(function, std::move(arguments));
    } else {
      Codec<std::decay_t<R>>::encode(out, std::apply(function, std::move(arguments)));
    }
    return {std::move(out.bytes()), std::move(out.tensors())};
  };
}

template <typename R, typename... Params>
bool register_remote(const char* name, R (*function)(Params...)) {
  FunctionRegistry::instance().add(name, reinterpret_cast<FunctionAddress>(function), make_handler(name, function));
  return true;
}

}  // namespace detail
}  // namespace distgrad::rpc

#define DISTGRAD_REMOTE(fn) DISTGRAD_REMOTE_NAMED(fn, #fn)
#define DISTGRAD_REMOTE_NAMED(fn, name)                                                       \
  [[maybe_unused]] static const bool DISTGRAD_REMOTE_CONCAT_(distgrad_remote_, __COUNTER__) = \
      ::distgrad::rpc::detail::register_remote(name, fn)
#define DISTGRAD_REMOTE_CONCAT_(a, b) DISTGRAD_REMOTE_CONCAT2_(a, b)
#define DISTGRAD_REMOTE_CONCAT2_(a, b) a##b
