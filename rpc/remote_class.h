// Remote classes: objects that live on a worker and are used through an RRef (rpc/rref.h).
//
// DISTGRAD_REMOTE_CLASS(T, constructor parameter types...) registers the class T, constructed
// from those parameters, under the name "T"; DISTGRAD_REMOTE_METHOD(T, method) registers one of
// its methods under "T::method". Both go at namespace scope in the class's namespace, in its
// header (they register once per program, however many files include them; a name registered
// twice is reported by init_rpc). A method's parameters and result need codecs (rpc/codec.h);
// an overloaded method cannot be registered.
//
//   class Shard {
//    public:
//     Shard(std::string path, int index);
//     Batch sample(int64_t size);
//     int64_t size() const;
//   };
//   DISTGRAD_REMOTE_CLASS(Shard, std::string, int);
//   DISTGRAD_REMOTE_METHOD(Shard, sample);
//   DISTGRAD_REMOTE_METHOD(Shard, size);
//
//   dg::rpc::RRef<Shard> shard = dg::rpc::remote_object<Shard>("worker1", "/data/train", 1);
//   Batch batch = shard.rpc_sync(&Shard::sample, 32);
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "rpc/owned_value.h"
#include "rpc/registry.h"

namespace distgrad::rpc::detail {

template <typename M>
struct MethodTraits;
template <typename R, typename C, typename... Params>
struct MethodTraits<R (C::*)(Params...)> {
  using Result = R;
  using Class = C;
  using ParamTags = std::tuple<std::type_identity<Params>...>;
};
template <typename R, typename C, typename... Params>
struct MethodTraits<R (C::*)(Params...) const> : MethodTraits<R (C::*)(Params...)> {};

// The constructor parameters a remote class was registered with.
template <typename T>
struct ConstructorOf;
template <typename T>
requires requires { distgrad_remote_class_constructor(static_cast<const T*>(nullptr)); }
struct ConstructorOf<T> {
  template <typename Signature>
  struct Tags;
  template <typename... Params>
  struct Tags<std::type_identity<void(Params...)>> {
    using type = std::tuple<std::type_identity<Params>...>;
  };
  using ParamTags = typename Tags<decltype(distgrad_remote_class_constructor(static_cast<const T*>(nullptr)))>::type;
};

// A string literal as a template argument.
template <size_t N>
struct FixedName {
  char value[N];
  constexpr FixedName(const char (&name)[N]) {  // NOLINT(google-explicit-constructor)
    for (size_t i = 0; i < N; ++i) value[i] = name[i];
  }
};

// How a member function pointer is found in the registry: its class's name and its bytes.
template <typename M>
std::string method_key(const std::string& class_name, M method) {
  std::string key = class_name + '\0';
  key.append(reinterpret_cast<const char*>(&method), sizeof method);
  return key;
}

// The registered name of `method` of T; throws when it was not registered.
template <typename T, typename M>
const std::string& registered_method_name(M method) {
  const std::string* name = ClassRegistry::instance().method_name(method_key(owned_type_name<T>(), method));
  DISTGRAD_CHECK(name != nullptr, "rpc: a method of ", owned_type_name<T>(),
                 " called through an RRef is not registered; add DISTGRAD_REMOTE_METHOD(", owned_type_name<T>(),
                 ", method) next to DISTGRAD_REMOTE_CLASS");
  return *name;
}

template <typename T, typename... Params>
bool register_class(const char* name) {
  ClassRegistry::instance().add_class(name, [name = std::string(name)](const CallArguments& arguments) {
    return OwnedValue::of(invoke_decoded<Params...>(name, arguments, [](auto&&... values) {
      return std::make_shared<T>(std::forward<decltype(values)>(values)...);
    }));
  });
  return true;
}

template <typename T, typename Signature>
struct ClassRegistration;
template <typename T, typename... Params>
struct ClassRegistration<T, void(Params...)> {
  static inline const bool done =
      register_class<T, Params...>(distgrad_remote_class_name(static_cast<const T*>(nullptr)));
};

template <auto Method>
bool register_method(const char* name) {
  using Traits = MethodTraits<decltype(Method)>;
  using C = typename Traits::Class;
  using R = typename Traits::Result;
  auto invoke = [name = std::string(name)](void* object, const CallArguments& arguments) -> decltype(auto) {
    return std::apply(
        [&]<typename... Params>(std::type_identity<Params>...) -> R {
          return invoke_decoded<Params...>(name, arguments, [object](auto&&... values) -> R {
            return (static_cast<C*>(object)->*Method)(std::forward<decltype(values)>(values)...);
          });
        },
        typename Traits::ParamTags{});
  };
  MethodHandler handler = [invoke](void* object, const CallArguments& arguments) {
    return encode_result(arguments.reply_to, [&]() -> R { return invoke(object, arguments); });
  };
  MethodValueMaker make_value;
  if constexpr (!std::is_void_v<R>) {
    make_value = [invoke](void* object, const CallArguments& arguments) {
      return keep_result([&]() -> R { return invoke(object, arguments); });
    };
  }
  ClassRegistry::instance().add_method(name, owned_type_name<C>(), method_key(owned_type_name<C>(), Method),
                                       std::move(handler), std::move(make_value));
  return true;
}

template <auto Method, FixedName kName>
inline const bool kMethodRegistered = register_method<Method>(kName.value);

}  // namespace distgrad::rpc::detail

// The functions' bodies name the registrations, which makes the program run each one once.
#define DISTGRAD_REMOTE_CLASS(Type, ...)                                                                         \
  [[maybe_unused]] inline const char* distgrad_remote_class_name(const Type*) { return #Type; }                  \
  [[maybe_unused]] inline std::type_identity<void(__VA_ARGS__)> distgrad_remote_class_constructor(const Type*) { \
    static_cast<void>(::distgrad::rpc::detail::ClassRegistration<Type, void(__VA_ARGS__)>::done);                \
    return {};                                                                                                   \
  }                                                                                                              \
  static_assert(true)

#define DISTGRAD_REMOTE_METHOD(Type, method)                                              \
  [[maybe_unused]] inline bool distgrad_remote_method_##method(const Type*) {             \
    return ::distgrad::rpc::detail::kMethodRegistered<&Type::method, #Type "::" #method>; \
  }                                                                                       \
  static_assert(true)
