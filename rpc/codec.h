// Codecs: how values of C++ types travel in a call's payload.
//
// Every argument and result of a registered function is encoded by Codec<T> for its type:
// bool, integers, floating point, std::string, Tensor, std::vector, std::array,
// std::map<std::string, T>, std::pair, std::tuple, std::optional, nn::ParamDict, rpc::RRef
// (rpc/rref.h), and user structs declared with DISTGRAD_CODEC. Each value starts with a one-byte tag (WireTag), so a
// decoder expecting one type reports another clearly instead of misreading bytes; integers and floats travel as 64 bits
// and are range-checked into the parameter's type. Tensors are not copied into the payload: the payload holds an index
// into the call's tensor list, whose bytes travel out of band (rpc/frame.h). Decoding never trusts its input: counts
// are checked against the bytes left, and every failure is a CodecError saying what was expected and what was found.
//
//   struct Tasks { dg::Tensor x, y; int shots; };
//   DISTGRAD_CODEC(Tasks, x, y, shots);     // at namespace scope, after the struct
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/param_dict.h"
#include "core/tensor.h"

namespace distgrad::rpc {

// Bytes that do not decode as the expected type.
class CodecError : public Error {
 public:
  using Error::Error;
};

enum class WireTag : uint8_t {
  kBool = 1,
  kInt = 2,
  kUInt = 3,
  kFloat = 4,
  kString = 5,
  kTensor = 6,
  kList = 7,
  kMap = 8,
  kTuple = 9,
  kOptional = 10,
  kStruct = 11,
  kParamDict = 12,
  kRRef = 13,
};

// "int64", "list", ...; "tag 200" for bytes that are no tag.
std::string tag_name(uint8_t tag);

// Where encoded values travel: to `peer` (a rank; -1: not in a call), in its request or in the
// reply to it. An RRef (rpc/rref.h) registers a fork for the worker that receives it.
struct CallTarget {
  int peer = -1;
  bool is_reply = false;
};

// Something an encoded value needs done when the call that carries it fails (its callee may
// never have received it): an RRef's fork is released. Kept alive until the call is answered.
class CallAttachment {
 public:
  virtual ~CallAttachment() = default;
  virtual void call_failed() = 0;
};

// Encoded values: a payload, the tensors it refers to, and what the call keeps for them.
struct Encoded {
  std::string payload;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<CallAttachment>> attachments = {};
};

// Appends encoded values to a payload and collects the tensors they refer to.
class Encoder {
 public:
  explicit Encoder(CallTarget target = {}) : target_(target) {}

  const CallTarget& target() const { return target_; }
  void put_tag(WireTag tag) { bytes_.push_back(static_cast<char>(tag)); }
  void put_u8(uint8_t value) { bytes_.push_back(static_cast<char>(value)); }
  void put_u32(uint32_t value) { put_raw(&value, sizeof value); }
  void put_u64(uint64_t value) { put_raw(&value, sizeof value); }
  void put_i64(int64_t value) { put_raw(&value, sizeof value); }
  void put_f64(double value) { put_raw(&value, sizeof value); }
  void put_string(std::string_view value) {
    put_u64(value.size());
    bytes_.append(value);
  }
  // Adds `tensor` to the call's tensors and returns its index (undefined tensors get none).
  uint32_t add_tensor(const Tensor& tensor) {
    tensors_.push_back(tensor);
    return static_cast<uint32_t>(tensors_.size() - 1);
  }

  void attach(std::shared_ptr<CallAttachment> attachment) { attachments_.push_back(std::move(attachment)); }

  std::string& bytes() { return bytes_; }
  std::vector<Tensor>& tensors() { return tensors_; }
  // The payload, its tensors and attachments, leaving the encoder empty.
  Encoded finish() { return {std::move(bytes_), std::move(tensors_), std::move(attachments_)}; }

 private:
  void put_raw(const void* data, size_t size) { bytes_.append(static_cast<const char*>(data), size); }

  CallTarget target_;
  std::string bytes_;  // little-endian, as every supported host
  std::vector<Tensor> tensors_;
  std::vector<std::shared_ptr<CallAttachment>> attachments_;
};

// Reads values from a payload; every read is bounds-checked.
class Decoder {
 public:
  Decoder(std::string_view bytes, const std::vector<Tensor>& tensors) : bytes_(bytes), tensors_(tensors) {}

  // Reads a tag and checks it is `expected`; `what` names the value for the error.
  void expect_tag(WireTag expected, std::string_view what);
  uint8_t get_u8() { return get_raw<uint8_t>(); }
  uint32_t get_u32() { return get_raw<uint32_t>(); }
  uint64_t get_u64() { return get_raw<uint64_t>(); }
  int64_t get_i64() { return get_raw<int64_t>(); }
  double get_f64() { return get_raw<double>(); }
  std::string_view get_string();
  // A count of elements that each take at least one byte: more than the bytes left is an error.
  uint64_t get_count(std::string_view what);
  const Tensor& tensor(uint32_t index) const;

  size_t remaining() const { return bytes_.size() - position_; }

 private:
  template <typename T>
  T get_raw() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }
  void need(size_t size) const;

  std::string_view bytes_;
  size_t position_ = 0;
  const std::vector<Tensor>& tensors_;
};

template <typename T>
inline constexpr bool kNoCodec = false;

// The codec of a type without one: naming it fails to compile, and HasCodec is false.
template <typename T, typename Enable = void>
struct Codec {
  using Missing = void;
  static std::string name() {
    static_assert(kNoCodec<T>,
                  "distgrad::rpc: no codec for this type; supported: bool, integers, floating point, std::string, "
                  "Tensor, std::vector, std::array, std::map<std::string, T>, std::pair, std::tuple, "
                  "std::optional, nn::ParamDict, rpc::RRef, and structs declared with DISTGRAD_CODEC");
    return {};
  }
  static void encode(Encoder& out, const T& value) { static_cast<void>(name()); }
  static T decode(Decoder& in) {
    static_cast<void>(name());
    throw CodecError("no codec");
  }
};

// Whether values of T can travel in calls.
template <typename T>
concept HasCodec = !requires {
  typename Codec<T>::Missing;
};

template <>
struct Codec<bool> {
  static std::string name() { return "bool"; }
  static void encode(Encoder& out, bool value) {
    out.put_tag(WireTag::kBool);
    out.put_u8(value ? 1 : 0);
  }
  static bool decode(Decoder& in) {
    in.expect_tag(WireTag::kBool, name());
    const uint8_t byte = in.get_u8();
    if (byte > 1) throw CodecError("expected a bool (0 or 1), found byte " + std::to_string(byte));
    return byte == 1;
  }
};

template <typename T>
struct Codec<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static std::string name() {
    return std::string(std::is_signed_v<T> ? "int" : "uint") + std::to_string(8 * sizeof(T));
  }
  static void encode(Encoder& out, T value) {
    if constexpr (std::is_signed_v<T>) {
      out.put_tag(WireTag::kInt);
      out.put_i64(value);
    } else {
      out.put_tag(WireTag::kUInt);
      out.put_u64(value);
    }
  }
  static T decode(Decoder& in) {
    in.expect_tag(std::is_signed_v<T> ? WireTag::kInt : WireTag::kUInt, name());
    if constexpr (std::is_signed_v<T>) {
      const int64_t value = in.get_i64();
      if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) {
        throw CodecError("value " + std::to_string(value) + " does not fit in " + name());
      }
      return static_cast<T>(value);
    } else {
      const uint64_t value = in.get_u64();
      if (value > std::numeric_limits<T>::max()) {
        throw CodecError("value " + std::to_string(value) + " does not fit in " + name());
      }
      return static_cast<T>(value);
    }
  }
};

template <typename T>
struct Codec<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static std::string name() { return sizeof(T) == 4 ? "float" : "double"; }
  static void encode(Encoder& out, T value) {
    out.put_tag(WireTag::kFloat);
    out.put_f64(static_cast<double>(value));
  }
  static T decode(Decoder& in) {
    in.expect_tag(WireTag::kFloat, name());
    return static_cast<T>(in.get_f64());
  }
};

template <>
struct Codec<std::string> {
  static std::string name() { return "string"; }
  static void encode(Encoder& out, const std::string& value) {
    out.put_tag(WireTag::kString);
    out.put_string(value);
  }
  static std::string decode(Decoder& in) {
    in.expect_tag(WireTag::kString, name());
    return std::string(in.get_string());
  }
};

template <>
struct Codec<Tensor> {
  static constexpr uint32_t kUndefined = std::numeric_limits<uint32_t>::max();
  static std::string name() { return "Tensor"; }
  static void encode(Encoder& out, const Tensor& value) {
    out.put_tag(WireTag::kTensor);
    out.put_u32(value.defined() ? out.add_tensor(value) : kUndefined);
  }
  static Tensor decode(Decoder& in) {
    in.expect_tag(WireTag::kTensor, name());
    const uint32_t index = in.get_u32();
    return index == kUndefined ? Tensor() : in.tensor(index);
  }
};

template <typename T>
struct Codec<std::vector<T>> {
  static std::string name() { return "vector<" + Codec<T>::name() + ">"; }
  static void encode(Encoder& out, const std::vector<T>& values) {
    out.put_tag(WireTag::kList);
    out.put_u64(values.size());
    for (const auto& value : values) Codec<T>::encode(out, value);
  }
  static std::vector<T> decode(Decoder& in) {
    in.expect_tag(WireTag::kList, name());
    const uint64_t count = in.get_count(name());
    std::vector<T> values;
    values.reserve(count);
    for (uint64_t i = 0; i < count; ++i) values.push_back(decode_element(in, i));
    return values;
  }

 private:
  static T decode_element(Decoder& in, uint64_t i) {
    try {
      return Codec<T>::decode(in);
    } catch (const CodecError& error) {
      throw CodecError("element " + std::to_string(i) + ": " + error.what());
    }
  }
};

template <typename T, size_t N>
struct Codec<std::array<T, N>> {
  static std::string name() { return "array<" + Codec<T>::name() + ", " + std::to_string(N) + ">"; }
  static void encode(Encoder& out, const std::array<T, N>& values) {
    Codec<std::vector<T>>::encode(out, std::vector<T>(values.begin(), values.end()));
  }
  static std::array<T, N> decode(Decoder& in) {
    const std::vector<T> values = Codec<std::vector<T>>::decode(in);
    if (values.size() != N) {
      throw CodecError("expected " + name() + ", found " + std::to_string(values.size()) + " elements");
    }
    std::array<T, N> result{};
    std::copy(values.begin(), values.end(), result.begin());
    return result;
  }
};

template <typename T>
struct Codec<std::map<std::string, T>> {
  static std::string name() { return "map<string, " + Codec<T>::name() + ">"; }
  static void encode(Encoder& out, const std::map<std::string, T>& values) {
    out.put_tag(WireTag::kMap);
    out.put_u64(values.size());
    for (const auto& [key, value] : values) {
      out.put_string(key);
      Codec<T>::encode(out, value);
    }
  }
  static std::map<std::string, T> decode(Decoder& in) {
    in.expect_tag(WireTag::kMap, name());
    const uint64_t count = in.get_count(name());
    std::map<std::string, T> values;
    for (uint64_t i = 0; i < count; ++i) {
      std::string key(in.get_string());
      try {
        values.emplace(key, Codec<T>::decode(in));
      } catch (const CodecError& error) {
        throw CodecError("key '" + key + "': " + error.what());
      }
    }
    return values;
  }
};

namespace detail {

// Encodes or decodes the elements of a tuple-like group (tuple, pair, struct fields) after a
// tag and a count, naming the element that fails.
template <typename... Ts>
void encode_elements(Encoder& out, WireTag tag, const std::tuple<const Ts&...>& elements) {
  out.put_tag(tag);
  out.put_u32(sizeof...(Ts));
  std::apply([&](const auto&... element) { (Codec<std::decay_t<decltype(element)>>::encode(out, element), ...); },
             elements);
}

template <typename T>
T decode_element(Decoder& in, size_t index, const char* kind) {
  try {
    return Codec<T>::decode(in);
  } catch (const CodecError& error) {
    throw CodecError(std::string(kind) + " " + std::to_string(index) + ": " + error.what());
  }
}

template <typename Tuple, size_t... kIndex>
Tuple decode_elements(Decoder& in, WireTag tag, const std::string& name, const char* kind,
                      std::index_sequence<kIndex...>) {
  in.expect_tag(tag, name);
  const uint32_t count = in.get_u32();
  if (count != sizeof...(kIndex)) {
    throw CodecError("expected " + name + " with " + std::to_string(sizeof...(kIndex)) + " " + kind + "s, found " +
                     std::to_string(count));
  }
  // Braced initialisation evaluates the elements left to right, in wire order.
  return Tuple{decode_element<std::tuple_element_t<kIndex, Tuple>>(in, kIndex, kind)...};
}

}  // namespace detail

template <typename... Ts>
struct Codec<std::tuple<Ts...>> {
  static std::string name() {
    std::string result = "tuple<";
    ((result += Codec<Ts>::name() + ", "), ...);
    if constexpr (sizeof...(Ts) > 0) result.resize(result.size() - 2);
    return result + ">";
  }
  static void encode(Encoder& out, const std::tuple<Ts...>& value) {
    detail::encode_elements<Ts...>(out, WireTag::kTuple,
                                   std::apply([](const auto&... e) { return std::tie(e...); }, value));
  }
  static std::tuple<Ts...> decode(Decoder& in) {
    return detail::decode_elements<std::tuple<Ts...>>(in, WireTag::kTuple, name(), "element",
                                                      std::index_sequence_for<Ts...>{});
  }
};

template <typename A, typename B>
struct Codec<std::pair<A, B>> {
  static std::string name() { return "pair<" + Codec<A>::name() + ", " + Codec<B>::name() + ">"; }
  static void encode(Encoder& out, const std::pair<A, B>& value) {
    detail::encode_elements<A, B>(out, WireTag::kTuple, std::tie(value.first, value.second));
  }
  static std::pair<A, B> decode(Decoder& in) {
    auto [first, second] = detail::decode_elements<std::tuple<A, B>>(in, WireTag::kTuple, name(), "element",
                                                                     std::index_sequence_for<A, B>{});
    return {std::move(first), std::move(second)};
  }
};

template <typename T>
struct Codec<std::optional<T>> {
  static std::string name() { return "optional<" + Codec<T>::name() + ">"; }
  static void encode(Encoder& out, const std::optional<T>& value) {
    out.put_tag(WireTag::kOptional);
    out.put_u8(value.has_value() ? 1 : 0);
    if (value) Codec<T>::encode(out, *value);
  }
  static std::optional<T> decode(Decoder& in) {
    in.expect_tag(WireTag::kOptional, name());
    const uint8_t present = in.get_u8();
    if (present > 1) throw CodecError("expected an optional's flag (0 or 1), found byte " + std::to_string(present));
    if (present == 0) return std::nullopt;
    return Codec<T>::decode(in);
  }
};

template <>
struct Codec<nn::ParamDict> {
  static std::string name() { return "ParamDict"; }
  static void encode(Encoder& out, const nn::ParamDict& value);
  static nn::ParamDict decode(Decoder& in);
};

// Structs declared with DISTGRAD_CODEC: the fields in declaration order.
template <typename T>
concept CodecStruct = requires(T& value) {
  distgrad_codec_fields(value);
  distgrad_codec_name(static_cast<const T*>(nullptr));
};

template <CodecStruct T>
struct Codec<T> {
  static std::string name() { return distgrad_codec_name(static_cast<const T*>(nullptr)); }
  static void encode(Encoder& out, const T& value) {
    std::apply(
        [&](const auto&... fields) {
          detail::encode_elements<std::decay_t<decltype(fields)>...>(out, WireTag::kStruct, std::tie(fields...));
        },
        distgrad_codec_fields(const_cast<T&>(value)));
  }
  static T decode(Decoder& in) {
    T value{};
    auto fields = distgrad_codec_fields(value);
    using Fields = std::remove_reference_t<decltype(fields)>;
    auto decoded = decode_fields<Fields>(in, std::make_index_sequence<std::tuple_size_v<Fields>>{});
    fields = std::move(decoded);
    return value;
  }

 private:
  template <typename Fields, size_t... kIndex>
  static auto decode_fields(Decoder& in, std::index_sequence<kIndex...> indices) {
    using Values = std::tuple<std::decay_t<std::tuple_element_t<kIndex, Fields>>...>;
    return detail::decode_elements<Values>(in, WireTag::kStruct, name(), "field", indices);
  }
};

}  // namespace distgrad::rpc

// Declares a struct's fields for RPC (and for the partitioners, which split the tensors among
// them): DISTGRAD_CODEC(Tasks, x_support, y_support, x_query, y_query). Use it at namespace
// scope, in the struct's namespace, after the struct; up to 16 fields.
#define DISTGRAD_CODEC(Type, ...)                                            \
  [[maybe_unused]] inline auto distgrad_codec_fields(Type& distgrad_value) { \
    return std::tie(DISTGRAD_CODEC_FIELDS_(distgrad_value, __VA_ARGS__));    \
  }                                                                          \
  [[maybe_unused]] inline const char* distgrad_codec_name(const Type*) { return #Type; }

#define DISTGRAD_CODEC_FIELDS_(value, ...)                                                                            \
  DISTGRAD_CODEC_PICK_(__VA_ARGS__, DISTGRAD_CODEC_16_, DISTGRAD_CODEC_15_, DISTGRAD_CODEC_14_, DISTGRAD_CODEC_13_,   \
                       DISTGRAD_CODEC_12_, DISTGRAD_CODEC_11_, DISTGRAD_CODEC_10_, DISTGRAD_CODEC_9_,                 \
                       DISTGRAD_CODEC_8_, DISTGRAD_CODEC_7_, DISTGRAD_CODEC_6_, DISTGRAD_CODEC_5_, DISTGRAD_CODEC_4_, \
                       DISTGRAD_CODEC_3_, DISTGRAD_CODEC_2_, DISTGRAD_CODEC_1_)                                       \
  (value, __VA_ARGS__)
#define DISTGRAD_CODEC_PICK_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, NAME, ...) NAME
#define DISTGRAD_CODEC_1_(v, a) v.a
#define DISTGRAD_CODEC_2_(v, a, ...) v.a, DISTGRAD_CODEC_1_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_3_(v, a, ...) v.a, DISTGRAD_CODEC_2_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_4_(v, a, ...) v.a, DISTGRAD_CODEC_3_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_5_(v, a, ...) v.a, DISTGRAD_CODEC_4_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_6_(v, a, ...) v.a, DISTGRAD_CODEC_5_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_7_(v, a, ...) v.a, DISTGRAD_CODEC_6_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_8_(v, a, ...) v.a, DISTGRAD_CODEC_7_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_9_(v, a, ...) v.a, DISTGRAD_CODEC_8_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_10_(v, a, ...) v.a, DISTGRAD_CODEC_9_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_11_(v, a, ...) v.a, DISTGRAD_CODEC_10_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_12_(v, a, ...) v.a, DISTGRAD_CODEC_11_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_13_(v, a, ...) v.a, DISTGRAD_CODEC_12_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_14_(v, a, ...) v.a, DISTGRAD_CODEC_13_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_15_(v, a, ...) v.a, DISTGRAD_CODEC_14_(v, __VA_ARGS__)
#define DISTGRAD_CODEC_16_(v, a, ...) v.a, DISTGRAD_CODEC_15_(v, __VA_ARGS__)
