// Walking the tensors inside a call's arguments (internal to partition/).
//
// for_each_tensor visits, and map_tensors rebuilds with a function applied to, every tensor
// nested in a value: directly, or inside std::vector, std::map, std::pair, std::tuple,
// std::optional, structs declared with DISTGRAD_CODEC, and ParamDicts wrapped in Split. A plain
// nn::ParamDict is left alone: it holds model parameters, which are broadcast, never split (as
// TorchOpt never splits module parameters). Every other type is left alone too.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/param_dict.h"
#include "core/tensor.h"
#include "rpc/codec.h"

namespace distgrad {

// A ParamDict whose tensors are split like the other arguments (a batch of per-sample tensors
// that happens to be keyed by name), unlike a plain ParamDict of model parameters.
struct Split {
  nn::ParamDict tensors;
};
DISTGRAD_CODEC(Split, tensors);

namespace partition_detail {

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};
template <typename T>
struct IsStringMap : std::false_type {};
template <typename T>
struct IsStringMap<std::map<std::string, T>> : std::true_type {};
template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <typename T>
struct IsTupleLike : std::false_type {};
template <typename... Ts>
struct IsTupleLike<std::tuple<Ts...>> : std::true_type {};
template <typename A, typename B>
struct IsTupleLike<std::pair<A, B>> : std::true_type {};

template <typename T, typename F>
void for_each_tensor(const T& value, F&& visit) {
  if constexpr (std::is_same_v<T, Tensor>) {
    if (value.defined()) visit(value);
  } else if constexpr (std::is_same_v<T, Split>) {
    for (const auto& [name, tensor] : value.tensors) for_each_tensor(tensor, visit);
  } else if constexpr (IsVector<T>::value) {
    for (const auto& element : value) for_each_tensor(element, visit);
  } else if constexpr (IsStringMap<T>::value) {
    for (const auto& [key, element] : value) for_each_tensor(element, visit);
  } else if constexpr (IsOptional<T>::value) {
    if (value) for_each_tensor(*value, visit);
  } else if constexpr (IsTupleLike<T>::value) {
    std::apply([&](const auto&... elements) { (for_each_tensor(elements, visit), ...); }, value);
  } else if constexpr (rpc::CodecStruct<T>) {
    std::apply([&](const auto&... fields) { (for_each_tensor(fields, visit), ...); },
               distgrad_codec_fields(const_cast<T&>(value)));
  }
}

template <typename T, typename F>
T map_tensors(const T& value, F&& map);

template <typename Source, typename Target, typename F, size_t... kIndex>
void map_fields(const Source& source, Target& target, F& map, std::index_sequence<kIndex...>) {
  ((std::get<kIndex>(target) = map_tensors(std::get<kIndex>(source), map)), ...);
}

template <typename T, typename F>
T map_tensors(const T& value, F&& map) {
  if constexpr (std::is_same_v<T, Tensor>) {
    return value.defined() ? map(value) : value;
  } else if constexpr (std::is_same_v<T, Split>) {
    Split result;
    for (const auto& [name, tensor] : value.tensors) result.tensors.insert(name, map_tensors(tensor, map));
    return result;
  } else if constexpr (IsVector<T>::value) {
    T result;
    result.reserve(value.size());
    for (const auto& element : value) result.push_back(map_tensors(element, map));
    return result;
  } else if constexpr (IsStringMap<T>::value) {
    T result;
    for (const auto& [key, element] : value) result.emplace(key, map_tensors(element, map));
    return result;
  } else if constexpr (IsOptional<T>::value) {
    return value ? T(map_tensors(*value, map)) : T();
  } else if constexpr (IsTupleLike<T>::value) {
    return std::apply([&](const auto&... elements) { return T(map_tensors(elements, map)...); }, value);
  } else if constexpr (rpc::CodecStruct<T>) {
    T result = value;
    auto source = distgrad_codec_fields(const_cast<T&>(value));
    auto target = distgrad_codec_fields(result);
    map_fields(source, target, map, std::make_index_sequence<std::tuple_size_v<decltype(source)>>{});
    return result;
  } else {
    return value;
  }
}

}  // namespace partition_detail
}  // namespace distgrad
