// IDX reading from synthetic files written here, raw and gzip-compressed: the payload and
// shape come back exactly, and every malformed file is an error that names it and says what
// was expected and what was found.
#include "data/idx.h"

#include <cstdint>
#include <filesystem>

#include "tests/core/test_util.h"
#include "tests/data/test_files.h"

namespace distgrad::data {
namespace {

using ::distgrad::testing::Bytes;
using ::distgrad::testing::idx_file;
using ::distgrad::testing::idx_header;
using ::distgrad::testing::read_raw;
using ::distgrad::testing::ScratchDir;
using ::distgrad::testing::write_gzip;
using ::distgrad::testing::write_raw;

TEST(Idx, ReadsRawFileAsInt64OfTheFileShape) {
  ScratchDir dir;
  write_raw(dir.file("a.idx"), idx_file({2, 3}, {0, 1, 2, 127, 128, 255}));
  const Tensor t = read_idx(dir.file("a.idx"));
  EXPECT_EQ(t.dtype(), kInt64);
  EXPECT_EQ(t.sizes(), Shape({2, 3}));
  EXPECT_EQ(t.to_vector<int64_t>(), std::vector<int64_t>({0, 1, 2, 127, 128, 255}));
}

TEST(Idx, ReadsGzipFileLikeTheRawOne) {
  ScratchDir dir;
  const Bytes file = idx_file({3, 2, 2}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 200, 255});
  write_raw(dir.file("a.idx"), file);
  write_gzip(dir.file("a.idx.gz"), file);
  ASSERT_NE(read_raw(dir.file("a.idx.gz")), file);  // really compressed
  const Tensor raw = read_idx(dir.file("a.idx"));
  const Tensor gzip = read_idx(dir.file("a.idx.gz"));
  EXPECT_EQ(gzip.sizes(), Shape({3, 2, 2}));
  EXPECT_EQ(gzip.to_vector<int64_t>(), raw.to_vector<int64_t>());
}

TEST(Idx, ReadIdxBytesKeepsSizesAndBytes) {
  ScratchDir dir;
  write_gzip(dir.file("labels.gz"), idx_file({4}, {3, 1, 4, 1}));
  const IdxBytes idx = read_idx_bytes(dir.file("labels.gz"));
  EXPECT_EQ(idx.sizes, Shape({4}));
  EXPECT_EQ(idx.bytes, Bytes({3, 1, 4, 1}));
}

TEST(Idx, ReadsFilesLargerThanOneReadChunk) {
  // 3 MiB and a bit: the reader fetches 1 MiB at a time, so chunk boundaries fall mid-file.
  ScratchDir dir;
  Bytes data(3 * 1024 * 1025);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 % 251);
  write_gzip(dir.file("big.gz"), idx_file({3, 1024, 1025}, data));
  write_raw(dir.file("big"), idx_file({3, 1024, 1025}, data));
  EXPECT_EQ(read_idx_bytes(dir.file("big.gz")).bytes, data);
  const Tensor t = read_idx(dir.file("big"));
  EXPECT_EQ(t.sizes(), Shape({3, 1024, 1025}));
  EXPECT_EQ(t.at<int64_t>({2, 1023, 1024}), data.back());
}

TEST(Idx, ZeroSizeGivesAnEmptyTensor) {
  ScratchDir dir;
  write_raw(dir.file("empty"), idx_file({0, 28, 28}, {}));
  const Tensor t = read_idx(dir.file("empty"));
  EXPECT_EQ(t.sizes(), Shape({0, 28, 28}));
  EXPECT_EQ(t.numel(), 0);
}

TEST(Idx, MissingFileNamesTheFileAndTheReason) {
  ScratchDir dir;
  const std::string path = dir.file("absent.gz");
  EXPECT_ERROR_CONTAINS(read_idx(path), "read_idx: cannot open '", path.c_str(), "No such file or directory");
}

TEST(Idx, DirectoryIsUnreadable) {
  ScratchDir dir;
  const std::string path = dir.path();
  EXPECT_ERROR_CONTAINS(read_idx(path), "read_idx: cannot read '", path.c_str(), "Is a directory");
}

TEST(Idx, BadMagicIsNotAnIdxFile) {
  ScratchDir dir;
  write_raw(dir.file("a.zip"), {'P', 'K', 3, 4, 0, 0, 0, 0});
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("a.zip")), dir.file("a.zip").c_str(), "is not an IDX file",
                        "expected a magic number starting with two zero bytes, found 0x50 0x4b");
}

TEST(Idx, FileShorterThanTheMagicIsNotAnIdxFile) {
  ScratchDir dir;
  write_raw(dir.file("short"), {0, 0});
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("short")), dir.file("short").c_str(),
                        "is not an IDX file: expected a 4-byte magic number, found a file of 2 bytes");
  write_gzip(dir.file("empty.gz"), {});
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("empty.gz")), "found a file of 0 bytes");
}

TEST(Idx, UnsupportedTypeIsNamed) {
  ScratchDir dir;
  Bytes floats = idx_header(0x0D, {2});
  floats.resize(floats.size() + 8);
  write_gzip(dir.file("floats.gz"), floats);
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("floats.gz")), dir.file("floats.gz").c_str(),
                        "holds elements of type 0x0d (float32); only type 0x08 (unsigned byte) is supported");
  write_raw(dir.file("ints"), idx_header(0x0C, {1}));
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("ints")), "type 0x0c (int32)");
  write_raw(dir.file("odd"), idx_header(0x42, {1}));
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("odd")), "type 0x42 (not an IDX type)");
}

TEST(Idx, ZeroDimsIsCorrupt) {
  ScratchDir dir;
  write_raw(dir.file("a"), idx_header(0x08, {}));
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("a")), dir.file("a").c_str(),
                        "has a corrupt header: expected at least 1 dimension, found 0");
}

TEST(Idx, TruncatedSizesAreReported) {
  ScratchDir dir;
  Bytes header = idx_header(0x08, {60000, 28, 28});
  header.resize(4 + 5);
  write_gzip(dir.file("a.gz"), header);
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("a.gz")), dir.file("a.gz").c_str(),
                        "has a truncated header: expected 12 bytes of sizes for 3 dimensions, found 5");
}

TEST(Idx, AbsurdSizesAreCorruptRatherThanAllocated) {
  ScratchDir dir;
  write_raw(dir.file("a"), idx_header(0x08, {65536, 65536, 2}));
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("a")), dir.file("a").c_str(),
                        "has a corrupt header: sizes [65536, 65536, 2] give more than 4294967296 elements");
  write_raw(dir.file("b"), idx_header(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0}));
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("b")), "sizes [4294967295, 4294967295, 4294967295, 0] give more than");
}

TEST(Idx, TruncatedDataSaysHowManyBytesWereExpectedAndFound) {
  ScratchDir dir;
  const Bytes file = idx_file({2, 3}, {1, 2, 3, 4});
  write_raw(dir.file("a"), file);
  write_gzip(dir.file("a.gz"), file);
  for (const std::string& path : {dir.file("a"), dir.file("a.gz")}) {
    EXPECT_ERROR_CONTAINS(read_idx(path), path.c_str(),
                          "is truncated: expected 6 bytes of data for shape [2, 3], found 4");
  }
}

TEST(Idx, TrailingGarbageIsReported) {
  ScratchDir dir;
  const Bytes file = idx_file({2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  write_raw(dir.file("a"), file);
  write_gzip(dir.file("a.gz"), file);
  for (const std::string& path : {dir.file("a"), dir.file("a.gz")}) {
    EXPECT_ERROR_CONTAINS(
        read_idx(path), path.c_str(),
        "has trailing data: expected the file to end after the 6 bytes of data for shape [2, 3], found 3 more bytes");
  }
}

TEST(Idx, TruncatedGzipStreamIsReported) {
  ScratchDir dir;
  Bytes data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * i % 256);
  write_gzip(dir.file("whole.gz"), idx_file({100000}, data));
  Bytes compressed = read_raw(dir.file("whole.gz"));
  compressed.resize(compressed.size() / 2);
  write_raw(dir.file("half.gz"), compressed);
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("half.gz")), dir.file("half.gz").c_str(),
                        "is a truncated gzip file: the compressed stream ends early");
}

TEST(Idx, CorruptGzipStreamIsReported) {
  ScratchDir dir;
  // A gzip header followed by a deflate block of the reserved type 3.
  write_raw(dir.file("bad.gz"), {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff});
  EXPECT_ERROR_CONTAINS(read_idx(dir.file("bad.gz")), dir.file("bad.gz").c_str(),
                        "is a corrupt gzip file (zlib: \"invalid block type\")");
}

}  // namespace
}  // namespace distgrad::data
