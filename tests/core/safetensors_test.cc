// Tests of safetensors checkpoints: round trips through files and memory, the exact bytes the
// format prescribes, a file written by the reference implementation, every kind of corrupt
// input (each rejected with a message naming the file), and atomic writes.
#include "core/safetensors.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>

#include "core/cuda.h"
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::values;
using namespace std::string_literals;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The 8-byte little-endian size field.
std::string size_field(uint64_t size) {
  std::string field;
  for (int i = 0; i < 8; ++i) field.push_back(static_cast<char>((size >> (8 * i)) & 0xff));
  return field;
}

// A safetensors file made of `header` (JSON text, unpadded) and `data`.
std::string file_of(std::string_view header, std::string_view data = {}) {
  return size_field(header.size()) + std::string(header) + std::string(data);
}

// The bytes of `t`'s values, row-major, as the format stores them.
std::string raw_bytes(const Tensor& t) {
  const Tensor host = untracked::contiguous(untracked::to(t, Device::cpu()));
  return std::string(static_cast<const char*>(host.data_ptr()), host.nbytes());
}

void expect_same_tensors(const NamedTensors& actual, const NamedTensors& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    SCOPED_TRACE("tensor " + expected[i].first);
    EXPECT_EQ(actual[i].first, expected[i].first);
    const Tensor& a = actual[i].second;
    const Tensor& e = expected[i].second;
    EXPECT_EQ(a.dtype(), e.dtype());
    EXPECT_EQ(a.sizes(), e.sizes());
    EXPECT_TRUE(a.is_contiguous());
    EXPECT_EQ(raw_bytes(a), raw_bytes(e));  // bit for bit: -0.0, NaN and int64 extremes included
  }
}

// One tensor of every dtype, 0-dim and empty tensors, and floats that a lossy path would alter.
NamedTensors every_kind_of_tensor() {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {
      {"layer.weight", from_vector<float>({1.5f, -0.0f, 3.25e-8f, 1e30f, -7.0f, 0.1f}, {2, 3})},
      {"layer.bias", from_vector<double>({inf, -inf, nan, 0.1, -2.5e-300})},
      {"ids", from_vector<int64_t>(
                  {std::numeric_limits<int64_t>::min(), -1, 0, 9007199254740993, std::numeric_limits<int64_t>::max()})},
      {"mask", from_vector<bool>({true, false, false, true, true, false, true, false}, {2, 2, 2})},
      {"half", untracked::to(from_vector<float>({1.5f, -0.0f, 65504.0f, static_cast<float>(inf), 6e-8f, 0.1f}, {3, 2}),
                             kFloat16)},
      {"brain", untracked::to(from_vector<float>({1.5f, -0.0f, 3e38f, static_cast<float>(-inf), 1e-30f}), kBFloat16)},
      {"scale", scalar_tensor(0.5)},
      {"step", scalar_tensor(1234, {.dtype = kInt64})},
      {"done", scalar_tensor(1, {.dtype = kBool})},
      {"unused", zeros({0, 3}, {.dtype = kFloat64})},
      {"none", zeros({0}, {.dtype = kBool})},
      {"nothing", zeros({4, 0, 2}, {.dtype = kInt64})},
  };
}

const std::map<std::string, std::string> kMetadata = {
    {"format", "pt"},
    {"quotes \"and\" \\backslashes\\", "line\nbreak\ttab"},
    {"unicode", "\xc3\xbc \xe2\x86\x92 \xf0\x9f\x98\x80"},
    {"empty", ""},
};

TEST(Safetensors, RoundTripsEveryDtypeThroughAFile) {
  testing::ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  const NamedTensors tensors = every_kind_of_tensor();
  save_safetensors(path, tensors, kMetadata);
  const SafetensorsContents loaded = load_safetensors(path);
  expect_same_tensors(loaded.tensors, tensors);
  EXPECT_EQ(loaded.metadata, kMetadata);
  for (const auto& [name, tensor] : loaded.tensors) EXPECT_EQ(tensor.device(), Device::cpu()) << name;
}

TEST(Safetensors, RoundTripsThroughMemoryWithTheSameBytesAsAFile) {
  testing::ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  const NamedTensors tensors = every_kind_of_tensor();
  save_safetensors(path, tensors, kMetadata);
  const std::string bytes = serialize_safetensors(tensors, kMetadata);
  EXPECT_EQ(bytes, read_file(path));
  const SafetensorsContents loaded = deserialize_safetensors(bytes);
  expect_same_tensors(loaded.tensors, tensors);
  EXPECT_EQ(loaded.metadata, kMetadata);
}

TEST(Safetensors, StartsTheDataEightByteAligned) {
  for (const char* name : {"a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "abcdefgh"}) {
    const std::string bytes = serialize_safetensors({{name, zeros({1})}});
    uint64_t header_size = 0;
    std::memcpy(&header_size, bytes.data(), 8);
    EXPECT_EQ(header_size % 8, 0u) << name;
    EXPECT_EQ(bytes.size(), 8 + header_size + 4) << name;
  }
}

TEST(Safetensors, KeepsTheSavedOrder) {
  const NamedTensors tensors = {{"z", zeros({1})}, {"a", ones({2})}, {"m", zeros({0})}, {"b", ones({1})}};
  const SafetensorsContents loaded = deserialize_safetensors(serialize_safetensors(tensors));
  expect_same_tensors(loaded.tensors, tensors);
  EXPECT_THAT(loaded.metadata, IsEmpty());
}

TEST(Safetensors, SavesNonContiguousTensorsAsTheirValues) {
  const Tensor matrix = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  const NamedTensors tensors = {
      {"transposed", testing::transposed_copy_of({1, 2, 3, 4, 5, 6}, 2, 3)},
      {"strided", untracked::slice(arange(10), 0, 1, 10, 3)},
      {"column", untracked::select(matrix, 1, 2)},
      {"expanded", untracked::expand(from_vector<bool>({true, false}, {2, 1}), {2, 3})},
      {"permuted", untracked::permute(untracked::reshape(arange(24, {.dtype = kFloat32}), {2, 3, 4}), {2, 0, 1})},
  };
  for (const auto& [name, tensor] : tensors) ASSERT_FALSE(tensor.is_contiguous()) << name;

  const SafetensorsContents loaded = deserialize_safetensors(serialize_safetensors(tensors));
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  EXPECT_THAT(values(loaded.tensors[0].second), ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_THAT(values(loaded.tensors[1].second), ElementsAre(1, 4, 7));
  EXPECT_THAT(values(loaded.tensors[2].second), ElementsAre(3, 6));
  EXPECT_THAT(values(loaded.tensors[3].second), ElementsAre(1, 1, 1, 0, 0, 0));
  EXPECT_EQ(loaded.tensors[4].second.sizes(), (Shape{4, 2, 3}));
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(values(loaded.tensors[i].second), values(tensors[i].second)) << tensors[i].first;
    EXPECT_EQ(loaded.tensors[i].second.sizes(), tensors[i].second.sizes()) << tensors[i].first;
  }
}

TEST(Safetensors, WritesTheBytesTheFormatPrescribes) {
  // Header: 135 bytes of JSON plus 1 space, so the data starts at 8 + 136 = 144, a multiple of 8.
  // Data: 1.0f = 0x3f800000 and -2.0f = 0xc0000000, little-endian, then the bool as one byte.
  const std::string expected =
      "\x88\x00\x00\x00\x00\x00\x00\x00"s
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("flag":{"dtype":"BOOL","shape":[],"data_offsets":[8,9]}} )"
      "\x00\x00\x80\x3f\x00\x00\x00\xc0\x01"s;
  ASSERT_EQ(expected.size(), 8u + 136u + 9u);
  EXPECT_EQ(serialize_safetensors({{"a", from_vector<float>({1, -2})}, {"flag", scalar_tensor(1, {.dtype = kBool})}},
                                  {{"k", "v"}}),
            expected);

  // Without metadata there is no "__metadata__" key: 53 bytes of JSON plus 3 spaces.
  const std::string expected_int =
      "\x38\x00\x00\x00\x00\x00\x00\x00"s
      R"({"x":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}   )"
      "\xfd\xff\xff\xff\xff\xff\xff\xff"s;
  EXPECT_EQ(serialize_safetensors({{"x", scalar_tensor(-3, {.dtype = kInt64})}}), expected_int);

  // F64 [1, 1] = 0.5 (0x3fe0000000000000): 56 bytes of JSON, already a multiple of 8, so no padding.
  const std::string expected_double =
      "\x38\x00\x00\x00\x00\x00\x00\x00"s
      R"({"d":{"dtype":"F64","shape":[1,1],"data_offsets":[0,8]}})"
      "\x00\x00\x00\x00\x00\x00\xe0\x3f"s;
  EXPECT_EQ(serialize_safetensors({{"d", full({1, 1}, 0.5, {.dtype = kFloat64})}}), expected_double);
}

// Written by the reference implementation (Python safetensors 0.8.0):
//   safetensors.numpy.save({
//       "weight": np.array([[1.5, -2.0, 0.25], [3.0, 1e-3, -0.0]], dtype=np.float32),
//       "bias": np.array([0.1, -7.25], dtype=np.float64),
//       "step": np.array(42, dtype=np.int64),
//       "ids": np.array([-1, 0, 9007199254740993], dtype=np.int64),
//       "mask": np.array([True, False, True]),
//       "empty": np.zeros((0, 3), dtype=np.float32),
//   }, metadata={"format": "np", "note": "distgrad interop"})
// It orders tensors by dtype alignment, so the data order differs from the name order.
const std::string kReferenceFile =
    "\xa0\x01\x00\x00\x00\x00\x00\x00"s
    R"({"__metadata__":{"note":"distgrad interop","format":"np"},)"
    R"("ids":{"dtype":"I64","shape":[3],"data_offsets":[0,24]},)"
    R"("step":{"dtype":"I64","shape":[],"data_offsets":[24,32]},)"
    R"("bias":{"dtype":"F64","shape":[2],"data_offsets":[32,48]},)"
    R"("empty":{"dtype":"F32","shape":[0,3],"data_offsets":[48,48]},)"
    R"("weight":{"dtype":"F32","shape":[2,3],"data_offsets":[48,72]},)"
    R"("mask":{"dtype":"BOOL","shape":[3],"data_offsets":[72,75]}}     )"
    "\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x01\x00\x00\x00\x00\x00\x20\x00\x2a\x00\x00\x00\x00\x00\x00\x00"
    "\x9a\x99\x99\x99\x99\x99\xb9\x3f\x00\x00\x00\x00\x00\x00\x1d\xc0"
    "\x00\x00\xc0\x3f\x00\x00\x00\xc0\x00\x00\x80\x3e\x00\x00\x40\x40"
    "\x6f\x12\x83\x3a\x00\x00\x00\x80\x01\x00\x01"s;

void expect_reference_contents(const SafetensorsContents& loaded) {
  ASSERT_EQ(loaded.tensors.size(), 6u);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : loaded.tensors) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("ids", "step", "bias", "empty", "weight", "mask"));
  const Tensor& ids = loaded.tensors[0].second;
  EXPECT_EQ(ids.dtype(), kInt64);
  EXPECT_EQ(ids.to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 9007199254740993}));
  EXPECT_EQ(loaded.tensors[1].second.dtype(), kInt64);
  EXPECT_EQ(loaded.tensors[1].second.dim(), 0);
  EXPECT_EQ(loaded.tensors[1].second.item<int64_t>(), 42);
  EXPECT_EQ(loaded.tensors[2].second.dtype(), kFloat64);
  EXPECT_THAT(loaded.tensors[2].second.to_vector<double>(), ElementsAre(0.1, -7.25));
  EXPECT_EQ(loaded.tensors[3].second.dtype(), kFloat32);
  EXPECT_EQ(loaded.tensors[3].second.sizes(), (Shape{0, 3}));
  const Tensor& weight = loaded.tensors[4].second;
  EXPECT_EQ(weight.dtype(), kFloat32);
  EXPECT_EQ(weight.sizes(), (Shape{2, 3}));
  EXPECT_THAT(weight.to_vector<float>(), ElementsAre(1.5f, -2.0f, 0.25f, 3.0f, 1e-3f, 0.0f));
  EXPECT_TRUE(std::signbit(weight.at<float>({1, 2})));
  EXPECT_EQ(loaded.tensors[5].second.dtype(), kBool);
  EXPECT_THAT(loaded.tensors[5].second.to_vector<bool>(), ElementsAre(true, false, true));
  EXPECT_EQ(loaded.metadata, (std::map<std::string, std::string>{{"format", "np"}, {"note", "distgrad interop"}}));
}

TEST(Safetensors, LoadsAFileWrittenByTheReferenceImplementation) {
  ASSERT_EQ(kReferenceFile.size(), 499u);
  testing::ScratchDir dir;
  const std::string path = dir.file("reference.safetensors");
  write_file(path, kReferenceFile);
  expect_reference_contents(load_safetensors(path));
  expect_reference_contents(deserialize_safetensors(kReferenceFile));
}

TEST(Safetensors, LoadedTensorsOwnTheirMemory) {
  std::string bytes = kReferenceFile;
  const SafetensorsContents loaded = deserialize_safetensors(bytes);
  std::fill(bytes.begin(), bytes.end(), '\x55');
  bytes = std::string();
  expect_reference_contents(loaded);
}

TEST(Safetensors, AcceptsUnpaddedHeadersAndNullMetadata) {
  const std::string data = "\x00\x00\x80\x3f"s;
  const SafetensorsContents loaded = deserialize_safetensors(
      file_of(R"({"__metadata__":null,"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data));
  ASSERT_EQ(loaded.tensors.size(), 1u);
  EXPECT_THAT(values(loaded.tensors[0].second), ElementsAre(1.0));
  EXPECT_THAT(loaded.metadata, IsEmpty());
}

TEST(Safetensors, ReadsAnyNonZeroBoolByteAsTrue) {
  const SafetensorsContents loaded = deserialize_safetensors(
      file_of(R"({"b":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})", "\x00\x01\x02\xff"s));
  EXPECT_THAT(loaded.tensors[0].second.to_vector<bool>(), ElementsAre(false, true, true, true));
  EXPECT_THAT(values(untracked::sum(loaded.tensors[0].second)), ElementsAre(3));
}

TEST(Safetensors, LoadsAnEmptyCheckpoint) {
  const SafetensorsContents loaded = deserialize_safetensors(serialize_safetensors({}, {{"k", "v"}}));
  EXPECT_THAT(loaded.tensors, IsEmpty());
  EXPECT_EQ(loaded.metadata.at("k"), "v");
  EXPECT_THAT(deserialize_safetensors(file_of("{}")).tensors, IsEmpty());
}

// Asserts that load_safetensors (from a file) and deserialize_safetensors both reject `bytes`
// with a message that names the file (or the buffer's source) and contains every fragment.
template <typename... Fragments>
void expect_rejected(const std::string& bytes, const Fragments&... fragments) {
  testing::ScratchDir dir;
  const std::string path = dir.file("corrupt.safetensors");
  write_file(path, bytes);
  const std::string file_prefix = "load_safetensors: " + path + ": ";
  EXPECT_ERROR_CONTAINS(load_safetensors(path), file_prefix.c_str(), fragments...);
  EXPECT_ERROR_CONTAINS(deserialize_safetensors(bytes, Device::cpu(), "checkpoint from worker 3"),
                        "deserialize_safetensors: checkpoint from worker 3: ", fragments...);
}

// A header holding one tensor "t" described by `info` (a JSON object's text), and `data`.
std::string file_with_entry(const std::string& info, std::string_view data = {}) {
  return file_of(R"({"t":)" + info + "}", data);
}

TEST(Safetensors, RejectsAMissingOrUnreadableFile) {
  testing::ScratchDir dir;
  const std::string missing = dir.file("missing.safetensors");
  const std::string missing_prefix = "load_safetensors: " + missing + ": ";
  const std::string directory_prefix = "load_safetensors: " + dir.path() + ": ";
  EXPECT_ERROR_CONTAINS(load_safetensors(missing), missing_prefix.c_str(), "cannot open the file",
                        "No such file or directory");
  EXPECT_ERROR_CONTAINS(load_safetensors(dir.path()), directory_prefix.c_str(),
                        "expected a regular file, found a directory");
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string fifo_prefix = "load_safetensors: " + fifo + ": ";
  EXPECT_ERROR_CONTAINS(load_safetensors(fifo), fifo_prefix.c_str(), "expected a regular file, found another kind");
}

TEST(Safetensors, RejectsAFileTooShortForItsHeader) {
  expect_rejected("", "expected at least 8 bytes (the header size), found 0");
  expect_rejected("\x10\x00\x00"s, "expected at least 8 bytes (the header size), found 3");
  expect_rejected(size_field(100) + "{}", "the header size is 100 bytes but only 2 bytes follow the 8-byte size field");
  expect_rejected(size_field(std::numeric_limits<uint64_t>::max()) + "{}",
                  "the header size is 18446744073709551615 bytes, more than the limit of 100000000");
  expect_rejected(size_field(100'000'001), "more than the limit of 100000000");
}

TEST(Safetensors, RejectsHeadersThatAreNotAJsonObject) {
  expect_rejected(file_of("{\"t\": "), "the header is not valid JSON", "parse error");
  expect_rejected(file_of(""), "the header is not valid JSON");
  expect_rejected(file_of("{} trailing"), "the header is not valid JSON");
  expect_rejected(file_of("{\"t\":\"\xff\"}"), "the header is not valid JSON", "UTF-8");
  expect_rejected(file_of("[1, 2]"), "expected the header to be a JSON object, found array [1,2]");
  expect_rejected(file_of("\"text\""), "expected the header to be a JSON object, found string");
  expect_rejected(file_of(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                          R"("t":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})"),
                  "the header has the key 't' more than once");
}

TEST(Safetensors, RejectsEntriesWithMissingOrMistypedFields) {
  expect_rejected(file_with_entry("[1]"),
                  "expected tensor 't' to be an object with \"dtype\", \"shape\" and \"data_offsets\", found array");
  expect_rejected(file_with_entry(R"({"shape":[1],"data_offsets":[0,4]})"), "tensor 't' has no \"dtype\"");
  expect_rejected(file_with_entry(R"({"dtype":"F32","data_offsets":[0,4]})"), "tensor 't' has no \"shape\"");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[1]})"), "tensor 't' has no \"data_offsets\"");
  expect_rejected(file_with_entry(R"({"dtype":32,"shape":[1],"data_offsets":[0,4]})"),
                  "expected the dtype of tensor 't' to be a string, found number 32");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})"),
                  "expected the shape of tensor 't' to be an array, found string \"1\"");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})"),
                  "expected size 0 of tensor 't' to be a non-negative integer, found number 1.5");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[2,"2"],"data_offsets":[0,4]})"),
                  "expected size 1 of tensor 't' to be a non-negative integer, found string \"2\"");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})"),
                  "expected the data_offsets of tensor 't' to be an array [begin, end], found array [0]");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[1],"data_offsets":{"begin":0}})"),
                  "expected the data_offsets of tensor 't' to be an array [begin, end], found object");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,"4"]})", "\x00\x00\x00\x00"s),
                  "expected the end offset of tensor 't' to be a non-negative integer, found string \"4\"");
}

TEST(Safetensors, RejectsUnsupportedDtypesNamingThem) {
  for (const char* dtype : {"I32", "U8", "I8", "F8_E4M3", "complex"}) {
    SCOPED_TRACE(dtype);
    const std::string message = "tensor 't' has dtype "s + dtype +
                                ", which distgrad does not support (supported: F32, F64, I64, BOOL, F16 and BF16)";
    expect_rejected(file_with_entry(R"({"dtype":")"s + dtype + R"(","shape":[2],"data_offsets":[0,4]})", "abcd"),
                    message.c_str());
  }
}

// Half-precision entries written by hand: their bytes are binary16 and bfloat16 as stored.
TEST(Safetensors, ReadsFloat16AndBFloat16Entries) {
  const std::string f16 = file_with_entry(R"({"dtype":"F16","shape":[2],"data_offsets":[0,4]})",
                                          std::string("\x00\x3c\x00\xc0", 4));  // 1.0, -2.0
  EXPECT_EQ(testing::values(deserialize_safetensors(f16).tensors.at(0).second), (std::vector<double>{1, -2}));
  const std::string bf16 = file_with_entry(R"({"dtype":"BF16","shape":[2],"data_offsets":[0,4]})",
                                           std::string("\x80\x3f\x40\xc0", 4));  // 1.0, -3.0
  EXPECT_EQ(testing::values(deserialize_safetensors(bf16).tensors.at(0).second), (std::vector<double>{1, -3}));
}

TEST(Safetensors, RejectsNegativeAndOverflowingShapes) {
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,0]})"),
                  "expected size 0 of tensor 't' to be a non-negative integer, found number -1");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]})"),
                  "the shape [4294967296,4294967296] of tensor 't' overflows a 64-bit element count");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]})"),
                  "overflows a 64-bit element count");
  // Zero elements, but strides of 2^62 * 2^62: still refused.
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],)"
                                  R"("data_offsets":[0,0]})"),
                  "overflows a 64-bit element count");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,0]})"),
                  "expected size 0 of tensor 't' to be a non-negative integer, found number");
}

TEST(Safetensors, RejectsOffsetsThatDoNotMatchTheData) {
  const std::string four_bytes = "\x00\x00\x80\x3f"s;
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,8]})", four_bytes),
                  "tensor 't' has data_offsets [0, 8], beyond the data buffer of 4 bytes");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[1],"data_offsets":[4,0]})", four_bytes),
                  "tensor 't' has data_offsets [4, 0], which end before they begin");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", four_bytes),
                  "expected the begin offset of tensor 't' to be a non-negative integer, found number -4");
  expect_rejected(file_with_entry(R"({"dtype":"F64","shape":[1],"data_offsets":[0,4]})", four_bytes),
                  "tensor 't' of shape [1] and dtype F64 needs 1 elements of 8 bytes, but its data_offsets [0, 4] "
                  "hold 4 bytes");
  expect_rejected(file_with_entry(R"({"dtype":"BOOL","shape":[2,3],"data_offsets":[0,4]})", four_bytes),
                  "needs 6 elements of 1 bytes, but its data_offsets [0, 4] hold 4 bytes");
  expect_rejected(file_with_entry(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]})", four_bytes),
                  "needs 4611686018427387904 elements of 4 bytes");
}

TEST(Safetensors, RejectsHolesAndOverlapsInTheData) {
  const std::string eight_bytes(8, '\x01');
  expect_rejected(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                          eight_bytes),
                  "tensor 'b' (data_offsets [2, 6]) overlaps tensor 'a' (data_offsets [0, 4])");
  expect_rejected(file_of(R"({"a":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"BOOL","shape":[0],"data_offsets":[2,2]}})",
                          "\x01\x01\x01\x01"s),
                  "tensor 'b' (data_offsets [2, 2]) overlaps tensor 'a' (data_offsets [0, 4])");
  expect_rejected(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                          eight_bytes),
                  "tensor 'b' (data_offsets [0, 4]) overlaps tensor 'a' (data_offsets [0, 4])");
  expect_rejected(file_of(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]},)"
                          R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[6,8]}})",
                          eight_bytes),
                  "bytes [2, 6) of the data buffer belong to no tensor (a hole before tensor 'b')");
  expect_rejected(file_with_entry(R"({"dtype":"BOOL","shape":[2],"data_offsets":[6,8]})", eight_bytes),
                  "bytes [0, 6) of the data buffer belong to no tensor (a hole before tensor 't')");
  expect_rejected(file_with_entry(R"({"dtype":"BOOL","shape":[2],"data_offsets":[0,2]})", eight_bytes),
                  "bytes [2, 8) at the end of the data buffer belong to no tensor");
  expect_rejected(file_of("{}", "x"), "bytes [0, 1) at the end of the data buffer belong to no tensor");
}

TEST(Safetensors, RejectsMetadataThatIsNotStrings) {
  expect_rejected(file_of(R"({"__metadata__":{"epoch":3}})"),
                  "expected the value of metadata key 'epoch' to be a string, found number 3");
  expect_rejected(file_of(R"({"__metadata__":{"a":"b","c":["d"]}})"),
                  "expected the value of metadata key 'c' to be a string, found array [\"d\"]");
  expect_rejected(file_of(R"({"__metadata__":"pt"})"),
                  "expected \"__metadata__\" to be an object of strings, found string \"pt\"");
}

TEST(Safetensors, QuotesAtMostAShortPieceOfALongValue) {
  const std::string long_value(10000, 'x');
  try {
    deserialize_safetensors(file_of(R"({"__metadata__":{"k":[")" + long_value + R"("]}})"));
    ADD_FAILURE() << "expected distgrad::Error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("metadata key 'k'"));
    EXPECT_LT(std::strlen(error.what()), 400u);
  }
}

// Every truncation of a valid file is rejected, and every single-byte corruption either loads
// or is rejected with distgrad::Error: nothing crashes and nothing else is thrown.
TEST(Safetensors, SurvivesTruncatedAndCorruptedBytes) {
  for (size_t size = 0; size < kReferenceFile.size(); ++size) {
    EXPECT_THROW(deserialize_safetensors(kReferenceFile.substr(0, size)), Error) << "truncated to " << size;
  }
  int rejected = 0;
  for (size_t i = 0; i < kReferenceFile.size(); ++i) {
    for (const unsigned char flip : {0x01, 0x20, 0x80, 0xff}) {
      std::string bytes = kReferenceFile;
      bytes[i] = static_cast<char>(static_cast<unsigned char>(bytes[i]) ^ flip);
      try {
        deserialize_safetensors(bytes);
      } catch (const Error&) {
        ++rejected;
      } catch (const std::exception& error) {
        ADD_FAILURE() << "byte " << i << " ^ " << int{flip} << " threw something else: " << error.what();
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(Safetensors, RejectsTensorsThatCannotBeSaved) {
  testing::ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::string where = "save_safetensors: " + path + ": ";
  const Tensor t = zeros({2});
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"a", t}, {"b", Tensor()}}), where.c_str(), "tensor 'b' is undefined");
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"a", t}, {"a", t}}), where.c_str(),
                        "expected unique tensor names, found 'a' twice");
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"a", t}, {"", t}}), where.c_str(),
                        "expected a non-empty name for tensor 1, found an empty one");
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"__metadata__", t}}), where.c_str(),
                        "tensor 0 is named \"__metadata__\", which the format reserves for metadata");
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"bad\xff", t}}), where.c_str(),
                        "expected the name of tensor 0 to be valid UTF-8");
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"a", t}}, {{"k", "\xc3"}}), where.c_str(),
                        "expected the value of metadata key 'k' to be valid UTF-8");
  EXPECT_THAT(dir.listing(), IsEmpty());
  EXPECT_ERROR_CONTAINS(serialize_safetensors({{"a", t}, {"b", Tensor()}}),
                        "serialize_safetensors: tensor 'b' is undefined");
}

TEST(Safetensors, SavingReplacesAnExistingFileAndLeavesNoTemporaryFiles) {
  testing::ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  write_file(path, "an older checkpoint");
  save_safetensors(path, {{"w", from_vector<double>({1, 2})}});
  EXPECT_THAT(dir.listing(), ElementsAre("model.safetensors"));
  save_safetensors(path, {{"w", from_vector<double>({3, 4, 5})}}, {{"step", "2"}});
  EXPECT_THAT(dir.listing(), ElementsAre("model.safetensors"));
  const SafetensorsContents loaded = load_safetensors(path);
  ASSERT_EQ(loaded.tensors.size(), 1u);
  EXPECT_THAT(values(loaded.tensors[0].second), ElementsAre(3, 4, 5));
  EXPECT_EQ(loaded.metadata.at("step"), "2");
}

TEST(Safetensors, SavingIntoAMissingDirectoryFailsAndCreatesNothing) {
  testing::ScratchDir dir;
  const std::string path = dir.file("missing/model.safetensors");
  const std::string where = "save_safetensors: " + path + ": ";
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"w", zeros({2})}}), where.c_str(), "cannot create the temporary file",
                        "No such file or directory");
  EXPECT_THAT(dir.listing(), IsEmpty());
}

TEST(Safetensors, AFailedSaveLeavesTheExistingFileUntouched) {
  testing::ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", from_vector<double>({1, 2})}});
  const std::string before = read_file(path);
  EXPECT_THROW(save_safetensors(path, {{"w", zeros({2})}, {"w", zeros({2})}}), Error);
  EXPECT_EQ(read_file(path), before);
  EXPECT_THAT(dir.listing(), ElementsAre("model.safetensors"));

  // The rename fails (the target is a directory) after the data was written: the temporary
  // file is removed and the directory is left as it was.
  const std::string target = dir.file("target");
  std::filesystem::create_directory(target);
  write_file(target + "/keep", "x");
  const std::string where = "save_safetensors: " + target + ": ";
  EXPECT_ERROR_CONTAINS(save_safetensors(target, {{"w", zeros({2})}}), where.c_str(),
                        "cannot rename the temporary file", "Is a directory");
  EXPECT_THAT(dir.listing(), ElementsAre("model.safetensors", "target"));
  EXPECT_EQ(read_file(target + "/keep"), "x");
}

TEST(Safetensors, CudaTensorsAreSavedThroughTheHostAndLoadedOntoADevice) {
  testing::ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  if (!cuda::is_available()) {
    save_safetensors(path, {{"w", zeros({2})}});
    EXPECT_ERROR_CONTAINS(load_safetensors(path, Device::cuda()), "CUDA");
    GTEST_SKIP() << "no CUDA device visible";
  }
  const Tensor matrix = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  NamedTensors on_host = every_kind_of_tensor();
  NamedTensors on_device;
  for (const auto& [name, tensor] : on_host) on_device.emplace_back(name, untracked::to(tensor, Device::cuda()));
  on_host.emplace_back("transposed", untracked::t(matrix));
  on_device.emplace_back("transposed", untracked::t(untracked::to(matrix, Device::cuda())));
  ASSERT_FALSE(on_device.back().second.is_contiguous());
  save_safetensors(path, on_device, kMetadata);
  EXPECT_EQ(read_file(path), serialize_safetensors(on_host, kMetadata));

  const SafetensorsContents loaded = load_safetensors(path, Device::cuda());
  expect_same_tensors(loaded.tensors, on_device);
  for (const auto& [name, tensor] : loaded.tensors) EXPECT_EQ(tensor.device(), Device::cuda()) << name;
  EXPECT_THAT(values(loaded.tensors.back().second), ElementsAre(1, 4, 2, 5, 3, 6));
  EXPECT_EQ(loaded.metadata, kMetadata);
}

}  // namespace
}  // namespace distgrad
