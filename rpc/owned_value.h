// OwnedValue: a value that an RRef's owner holds for it (rpc/rref.h).
//
// The owner keeps a C++ object of any type: a registered function's result (rpc::remote), or an
// object of a registered class (rpc::remote_object, rpc/remote_class.h). With it go the type's
// name, which every RRef to it carries and checks when it is decoded, and, for a type with a
// codec, how a copy is encoded for to_here. Remote objects have no codec: they stay where they are.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "rpc/codec.h"

namespace distgrad::rpc {

// Types declared with DISTGRAD_REMOTE_CLASS (rpc/remote_class.h).
template <typename T>
concept RemoteClass = requires {
  distgrad_remote_class_name(static_cast<const T*>(nullptr));
};

// The name RRefs to values of T carry: the class's registered name, or the codec's.
template <typename T>
std::string owned_type_name() {
  if constexpr (RemoteClass<T>) {
    return distgrad_remote_class_name(static_cast<const T*>(nullptr));
  } else {
    static_assert(HasCodec<T>,
                  "rpc::RRef<T>: T needs a codec (rpc/codec.h) or DISTGRAD_REMOTE_CLASS (rpc/remote_class.h)");
    return Codec<T>::name();
  }
}

struct OwnedValue {
  std::string type_name;
  std::shared_ptr<void> object;
  // Encodes a copy of *object for `target`; null when the type has no codec.
  Encoded (*encode)(const void* object, CallTarget target) = nullptr;

  template <typename T>
  static OwnedValue of(std::shared_ptr<T> object) {
    OwnedValue value{owned_type_name<T>(), std::move(object)};
    if constexpr (HasCodec<T> && !RemoteClass<T>) {
      value.encode = [](const void* object, CallTarget target) {
        Encoder out(target);
        Codec<T>::encode(out, *static_cast<const T*>(object));
        return out.finish();
      };
    }
    return value;
  }
};

}  // namespace distgrad::rpc
