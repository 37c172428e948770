// Registered functions: what a worker may be asked to run, by a stable name.
//
// DISTGRAD_REMOTE(fn), at namespace scope, registers the free function `fn` under the name
// "fn" in every process (all ranks run the same binary, so names agree); DISTGRAD_REMOTE_NAMED
// gives another name. Registration happens during static initialisation; a name registered
// twice is reported by init_rpc, which refuses to start. Only registered functions can be
// called remotely.
//
// The handler made for a function decodes its arguments with the codecs of its parameter
// types (rpc/codec.h), calls it, and encodes the result (or, for rpc::remote, keeps it on this
// worker as the value of an RRef: rpc/rref.h). Arguments that do not match (their
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
#include "rpc/owned_value.h"

namespace distgrad::rpc {

// A call's encoded arguments, and where its result goes.
struct CallArguments {
  std::string_view payload;
  const std::vector<Tensor>& tensors;
  uint32_t count;       // how many arguments the payload holds
  CallTarget reply_to;  // the caller (CallTarget::is_reply)
};

// Runs a registered function on encoded arguments and returns its encoded result; throws
// StatusError for arguments that do not decode.
using Handler = std::function<Encoded(const CallArguments& arguments)>;
// Runs a registered function and keeps its result as the value of an RRef (rpc::remote); also a
// registered class's constructor (rpc/remote_class.h).
using ValueMaker = std::function<OwnedValue(const CallArguments& arguments)>;

using FunctionAddress = void (*)();

class FunctionRegistry {
 public:
  static FunctionRegistry& instance();

  // Never throws (it runs during static initialisation): a second registration of a name is
  // remembered and reported by duplicate_names(). `make_value` is null for functions that
  // return void.
  void add(std::string name, FunctionAddress function, Handler handler, ValueMaker make_value);
  // The handler of `name`, or null.
  const Handler* find(std::string_view name) const;
  // What rpc::remote runs for `name`, or null (not registered, or returning void).
  const ValueMaker* find_value_maker(std::string_view name) const;
  // The name a function was registered under, or null.
  const std::string* name_of(FunctionAddress function) const;
  std::vector<std::string> duplicate_names() const;
  std::vector<std::string> names() const;

 private:
  struct Entry {
    Handler handler;
    ValueMaker make_value;
  };

  mutable std::mutex mutex_;  // guards the maps (registration can happen from several threads)
  std::map<std::string, Entry, std::less<>> entries_;
  std::map<FunctionAddress, std::string> names_;
  std::vector<std::string> duplicates_;
};

// Runs a registered method on `object` (rpc/remote_class.h), as Handler and ValueMaker do.
using MethodHandler = std::function<Encoded(void* object, const CallArguments& arguments)>;
using MethodValueMaker = std::function<OwnedValue(void* object, const CallArguments& arguments)>;

// The registered classes (their constructors) and methods of rpc/remote_class.h.
class ClassRegistry {
 public:
  struct Method {
    std::string class_name;
    MethodHandler handler;
    MethodValueMaker make_value;  // null for methods that return void
  };

  static ClassRegistry& instance();

  // Never throw, as FunctionRegistry::add. `key` identifies the member function pointer.
  void add_class(std::string name, ValueMaker construct);
  void add_method(std::string name, std::string class_name, std::string key, MethodHandler handler,
                  MethodValueMaker make_value);
  // The constructor of the class `name`, the method `name` ("Class::method"), the name of the
  // method with `key`; null when not registered.
  const ValueMaker* find_constructor(std::string_view name) const;
  const Method* find_method(std::string_view name) const;
  const std::string* method_name(const std::string& key) const;
  std::vector<std::string> duplicate_names() const;

 private:
  mutable std::mutex mutex_;  // guards the maps
  std::map<std::string, ValueMaker, std::less<>> constructors_;
  std::map<std::string, Method, std::less<>> methods_;
  std::map<std::string, std::string> method_names_;  // key -> name
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

// Decodes arguments for the parameters `Params` of `name` and returns fn(arguments...).
template <typename... Params, typename F>
decltype(auto) invoke_decoded(const std::string& name, const CallArguments& arguments, F&& fn) {
  if (arguments.count != sizeof...(Params)) {
    throw StatusError(StatusCode::kInvalidArgument, name + ": expected " + std::to_string(sizeof...(Params)) +
                                                        " arguments, the call has " + std::to_string(arguments.count));
  }
  Decoder in(arguments.payload, arguments.tensors);
  auto decoded = decode_arguments<Params...>(name, in, std::index_sequence_for<Params...>{});
  if (in.remaining() != 0) {
    throw StatusError(StatusCode::kInvalidArgument,
                      name + ": " + std::to_string(in.remaining()) + " bytes follow the last argument");
  }
  return std::apply(std::forward<F>(fn), std::move(decoded));
}

// Encodes fn()'s result (nothing for void) for `target`.
template <typename F>
Encoded encode_result(CallTarget target, F&& fn) {
  using R = std::invoke_result_t<F>;
  Encoder out(target);
  if constexpr (std::is_void_v<R>) {
    fn();
  } else {
    Codec<std::decay_t<R>>::encode(out, fn());
  }
  return out.finish();
}

// Keeps fn()'s result as an owned value.
template <typename F>
OwnedValue keep_result(F&& fn) {
  using R = std::decay_t<std::invoke_result_t<F>>;
  return OwnedValue::of(std::make_shared<R>(fn()));
}

template <typename R, typename... Params>
Handler make_handler(std::string name, R (*function)(Params...)) {
  return [name = std::move(name), function](const CallArguments& arguments) -> Encoded {
    return encode_result(arguments.reply_to,
                         [&]() -> R { return invoke_decoded<Params...>(name, arguments, function); });
  };
}

template <typename R, typename... Params>
ValueMaker make_value_maker(std::string name, R (*function)(Params...)) {
  if constexpr (std::is_void_v<R>) {
    return nullptr;
  } else {
    return [name = std::move(name), function](const CallArguments& arguments) {
      return keep_result([&]() -> R { return invoke_decoded<Params...>(name, arguments, function); });
    };
  }
}

template <typename R, typename... Params>
bool register_remote(const char* name, R (*function)(Params...)) {
  FunctionRegistry::instance().add(name, reinterpret_cast<FunctionAddress>(function), make_handler(name, function),
                                   make_value_maker(name, function));
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
