// Reducers: how the results of a partitioned call are folded into one value.
//
// mean_reducer and sum_reducer fold a std::vector of results: tensors by stacking them (a new
// leading dim) and taking the mean or sum over it, differentiably, so gradients flow back to
// each partition; numbers arithmetically (the mean of integers is a double); and, unlike
// TorchOpt, tuples, pairs and DISTGRAD_CODEC structs field by field (a remote function returning
// (loss, accuracy) needs no hand-written reducer). Any callable from std::vector<R> is a
// reducer too.
//
//   auto [loss, accuracy] = dg::mean_reducer(std::vector<std::tuple<dg::Tensor, double>>{...});
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "partition/tree.h"

namespace distgrad {
namespace partition_detail {

enum class Fold { kMean, kSum };

// The type a fold of R's gives: R, but double for integers.
template <typename R>
struct Folded {
  using type = std::conditional_t<std::is_integral_v<R> && !std::is_same_v<R, bool>, double, R>;
};
template <typename... Ts>
struct Folded<std::tuple<Ts...>> {
  using type = std::tuple<typename Folded<Ts>::type...>;
};
template <typename A, typename B>
struct Folded<std::pair<A, B>> {
  using type = std::pair<typename Folded<A>::type, typename Folded<B>::type>;
};

template <Fold kFold, typename R>
typename Folded<R>::type fold(const std::vector<R>& values);

// The kIndex-th element of every tuple-like value.
template <size_t kIndex, typename R>
auto element_column(const std::vector<R>& values) {
  std::vector<std::decay_t<std::tuple_element_t<kIndex, R>>> column;
  column.reserve(values.size());
  for (const R& value : values) column.push_back(std::get<kIndex>(value));
  return column;
}

template <Fold kFold, typename R, size_t... kIndex>
auto fold_elements(const std::vector<R>& values, std::index_sequence<kIndex...>) {
  return typename Folded<R>::type(fold<kFold>(element_column<kIndex>(values))...);
}

template <Fold kFold, typename R, typename Target, size_t... kIndex>
void fold_fields(const std::vector<R>& values, Target& target, std::index_sequence<kIndex...>) {
  auto column = [&]<size_t kField>() {
    std::vector<std::decay_t<std::tuple_element_t<kField, Target>>> column;
    for (const R& value : values) column.push_back(std::get<kField>(distgrad_codec_fields(const_cast<R&>(value))));
    return column;
  };
  ((std::get<kIndex>(target) = fold<kFold>(column.template operator()<kIndex>())), ...);
}

template <Fold kFold, typename R>
typename Folded<R>::type fold(const std::vector<R>& values) {
  DISTGRAD_CHECK(!values.empty(), kFold == Fold::kMean ? "mean_reducer" : "sum_reducer", ": no results to reduce");
  if constexpr (std::is_same_v<R, Tensor>) {
    const Tensor stacked = stack(values, 0);
    return kFold == Fold::kMean ? mean(stacked, {0}) : sum(stacked, {0});
  } else if constexpr (std::is_arithmetic_v<R> && !std::is_same_v<R, bool>) {
    typename Folded<R>::type total = 0;
    for (R value : values) total += value;
    if constexpr (kFold == Fold::kMean) total /= static_cast<typename Folded<R>::type>(values.size());
    return total;
  } else if constexpr (IsTupleLike<R>::value) {
    return fold_elements<kFold>(values, std::make_index_sequence<std::tuple_size_v<R>>{});
  } else if constexpr (rpc::CodecStruct<R>) {
    R result = values.front();
    auto target = distgrad_codec_fields(result);
    fold_fields<kFold>(values, target, std::make_index_sequence<std::tuple_size_v<decltype(target)>>{});
    return result;
  } else {
    static_assert(sizeof(R) == 0,
                  "mean_reducer / sum_reducer fold Tensors, numbers, tuples, pairs and DISTGRAD_CODEC structs; "
                  "pass your own reducer for other results");
  }
}

}  // namespace partition_detail

struct MeanReducer {
  template <typename R>
  auto operator()(const std::vector<R>& results) const {
    return partition_detail::fold<partition_detail::Fold::kMean>(results);
  }
};
struct SumReducer {
  template <typename R>
  auto operator()(const std::vector<R>& results) const {
    return partition_detail::fold<partition_detail::Fold::kSum>(results);
  }
};

inline constexpr MeanReducer mean_reducer{};
inline constexpr SumReducer sum_reducer{};

}  // namespace distgrad
