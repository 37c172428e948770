// Codecs round-tripped for every supported type, and fed wrong and garbage bytes.
#include "rpc/codec.h"

#include <random>

#include "core/ops.h"
#include "rpc/rref.h"
#include "tests/core/test_util.h"

namespace codec_test {

struct Inner {
  int64_t count = 0;
  std::vector<double> weights;
};
DISTGRAD_CODEC(Inner, count, weights);

struct Tasks {
  distgrad::Tensor x, y;
  std::string name;
  Inner inner;
  std::optional<float> scale;
};
DISTGRAD_CODEC(Tasks, x, y, name, inner, scale);

}  // namespace codec_test

namespace distgrad::rpc {
namespace {

template <typename T>
T round_trip(const T& value, std::vector<Tensor>* tensors = nullptr) {
  Encoder out;
  Codec<T>::encode(out, value);
  Decoder in(out.bytes(), out.tensors());
  T decoded = Codec<T>::decode(in);
  EXPECT_EQ(in.remaining(), 0u);
  if (tensors != nullptr) *tensors = out.tensors();
  return decoded;
}

template <typename Expected, typename T>
void expect_decode_error(const T& value, const std::string& fragment) {
  Encoder out;
  Codec<T>::encode(out, value);
  Decoder in(out.bytes(), out.tensors());
  EXPECT_ERROR_CONTAINS(Codec<Expected>::decode(in), fragment.c_str());
}

TEST(Codec, ScalarsRoundTripAtTheirLimits) {
  EXPECT_EQ(round_trip(true), true);
  EXPECT_EQ(round_trip(false), false);
  EXPECT_EQ(round_trip(std::numeric_limits<int64_t>::min()), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(round_trip(std::numeric_limits<uint64_t>::max()), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(round_trip(int8_t{-128}), -128);
  EXPECT_EQ(round_trip(uint16_t{65535}), 65535);
  EXPECT_EQ(round_trip(0.1f), 0.1f);
  EXPECT_EQ(round_trip(-1e300), -1e300);
  EXPECT_TRUE(std::isnan(round_trip(std::nan(""))));
  EXPECT_EQ(round_trip(std::string()), "");
  EXPECT_EQ(round_trip(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Codec, ContainersRoundTrip) {
  const std::vector<std::vector<int>> nested = {{}, {1, 2}, {3}};
  EXPECT_EQ(round_trip(nested), nested);
  const std::vector<bool> flags = {true, false, true};
  EXPECT_EQ(round_trip(flags), flags);
  const std::map<std::string, double> scores = {{"a", 1.5}, {"", -2}};
  EXPECT_EQ(round_trip(scores), scores);
  const std::pair<std::string, int> pair = {"k", 7};
  EXPECT_EQ(round_trip(pair), pair);
  const std::tuple<int, std::string, bool> tuple = {1, "two", true};
  EXPECT_EQ(round_trip(tuple), tuple);
  EXPECT_EQ(round_trip(std::tuple<>()), std::tuple<>());
  EXPECT_EQ(round_trip(std::optional<int>()), std::nullopt);
  EXPECT_EQ(round_trip(std::optional<int>(5)), 5);
}

TEST(Codec, TensorsTravelOutOfBandByIndex) {
  const Tensor a = ones({2, 3}), b = zeros({0});
  std::vector<Tensor> tensors;
  const std::vector<Tensor> decoded = round_trip(std::vector<Tensor>{a, b, Tensor(), a}, &tensors);
  ASSERT_EQ(tensors.size(), 3u);  // the undefined tensor takes no slot
  EXPECT_TRUE(decoded[0].is_same(a));
  EXPECT_TRUE(decoded[1].is_same(b));
  EXPECT_FALSE(decoded[2].defined());
  EXPECT_TRUE(decoded[3].is_same(a));
}

TEST(Codec, ParamDictAndStructsRoundTrip) {
  const nn::ParamDict params({{"fc.weight", ones({2})}, {"fc.bias", zeros({1})}});
  const nn::ParamDict decoded = round_trip(params);
  EXPECT_EQ(decoded.keys(), params.keys());
  EXPECT_TRUE(decoded.at("fc.bias").is_same(params.at("fc.bias")));

  const codec_test::Tasks tasks{ones({3}), zeros({3}), "sine", {4, {0.5, 2}}, 2.5f};
  const codec_test::Tasks back = round_trip(tasks);
  EXPECT_TRUE(back.x.is_same(tasks.x));
  EXPECT_TRUE(back.y.is_same(tasks.y));
  EXPECT_EQ(back.name, "sine");
  EXPECT_EQ(back.inner.count, 4);
  EXPECT_EQ(back.inner.weights, (std::vector<double>{0.5, 2}));
  EXPECT_EQ(back.scale, 2.5f);
  EXPECT_EQ(Codec<codec_test::Tasks>::name(), "Tasks");
}

TEST(Codec, WrongTypesAreNamed) {
  expect_decode_error<int>(std::string("x"), "expected int32, found a string");
  expect_decode_error<uint32_t>(int64_t{-1}, "expected uint32, found a signed integer");
  expect_decode_error<int8_t>(int64_t{300}, "value 300 does not fit in int8");
  expect_decode_error<std::vector<int>>(std::vector<std::string>{"a"}, "element 0: expected int32, found a string");
  expect_decode_error<std::tuple<int, int>>(std::tuple<int>{1},
                                            "expected tuple<int32, int32> with 2 elements, found 1");
  expect_decode_error<codec_test::Inner>(codec_test::Tasks{}, "expected Inner with 2 fields, found 5");
  expect_decode_error<std::map<std::string, int>>(std::map<std::string, double>{{"k", 1}},
                                                  "key 'k': expected int32, found a floating-point number");
}

TEST(Codec, ArraysRoundTripAndCheckTheirLength) {
  EXPECT_EQ(round_trip(std::array<double, 2>{0.9, 0.999}), (std::array<double, 2>{0.9, 0.999}));
  expect_decode_error<std::array<double, 2>>(std::vector<double>{1, 2, 3},
                                             "expected array<double, 2>, found 3 elements");
}

struct NoCodec {};
static_assert(HasCodec<int> && HasCodec<std::vector<Tensor>> && HasCodec<rpc::RRef<Tensor>>);
static_assert(!HasCodec<NoCodec>);

TEST(Codec, RRefsTravelOnlyInCallsAndCheckTheirType) {
  // Encoding needs a call to travel in (and an RRef that refers to something).
  Encoder out;
  EXPECT_ERROR_CONTAINS(Codec<rpc::RRef<Tensor>>::encode(out, rpc::RRef<Tensor>()), "refers to nothing");
  // What a worker may receive: another type's RRef, another tag, cut bytes, all CodecErrors.
  Encoder wrong_type;
  wrong_type.put_tag(WireTag::kRRef);
  wrong_type.put_string("int64");
  Decoder wrong_type_in(wrong_type.bytes(), wrong_type.tensors());
  EXPECT_ERROR_CONTAINS(Codec<rpc::RRef<Tensor>>::decode(wrong_type_in), "expected RRef<Tensor>, found RRef<int64>");
  expect_decode_error<rpc::RRef<Tensor>>(std::string("x"), "expected RRef<Tensor>, found a string");
  Encoder cut;
  cut.put_tag(WireTag::kRRef);
  cut.put_string("Tensor");
  Codec<int32_t>::encode(cut, 1);
  for (size_t length = 0; length < cut.bytes().size(); ++length) {
    Decoder in(std::string_view(cut.bytes()).substr(0, length), cut.tensors());
    EXPECT_THROW(Codec<rpc::RRef<Tensor>>::decode(in), CodecError) << "cut at " << length;
  }
}

TEST(Codec, TruncatedAndLyingBytesAreErrors) {
  Encoder out;
  Codec<std::vector<int64_t>>::encode(out, {1, 2, 3});
  for (size_t cut = 0; cut < out.bytes().size(); ++cut) {
    Decoder in(std::string_view(out.bytes()).substr(0, cut), out.tensors());
    EXPECT_THROW(Codec<std::vector<int64_t>>::decode(in), CodecError) << "cut at " << cut;
  }
  Encoder huge;  // a count far beyond the bytes left must not allocate
  huge.put_tag(WireTag::kList);
  huge.put_u64(uint64_t{1} << 60);
  Decoder in(huge.bytes(), huge.tensors());
  EXPECT_ERROR_CONTAINS((Codec<std::vector<int>>::decode(in)), "claims 1152921504606846976 elements");
  Encoder index;
  index.put_tag(WireTag::kTensor);
  index.put_u32(4);
  Decoder tensor_in(index.bytes(), index.tensors());
  EXPECT_ERROR_CONTAINS(Codec<Tensor>::decode(tensor_in), "tensor index 4 is out of range: the call carries 0");
}

TEST(Codec, RandomBytesNeverCrash) {
  std::mt19937 random(42);
  const std::vector<Tensor> tensors = {ones({1})};
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes(random() % 64, '\0');
    for (char& byte : bytes) byte = static_cast<char>(random() % 16);  // mostly valid tags and small numbers
    Decoder in(bytes, tensors);
    try {
      Codec<std::tuple<codec_test::Tasks, std::map<std::string, std::vector<std::optional<int>>>,
                       nn::ParamDict>>::decode(in);
    } catch (const CodecError&) {
    }
  }
}

}  // namespace
}  // namespace distgrad::rpc
