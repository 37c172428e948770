#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "absl/strings/str_format.h"
#include "core/creation.h"
#include "core/error.h"

namespace distgrad::data {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;
// Largest single gzread, and the step by which the data buffer grows: the buffer follows the
// bytes actually read, so a corrupt header cannot make us allocate what the file lacks.
constexpr size_t kChunkBytes = size_t{1} << 20;

std::string hex_byte(uint8_t byte) { return absl::StrFormat("0x%02x", byte); }

// The element types the IDX format defines, for the unsupported-type error.
const char* idx_type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type";
  }
}

// A file opened through zlib, which reads gzip-compressed and raw files alike. Every zlib call
// is made and checked here; errors name the file.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    DISTGRAD_CHECK(file_ != nullptr, "read_idx: cannot open '", path,
                   "': ", errno != 0 ? std::strerror(errno) : "zlib could not allocate its state");
    gzbuffer(file_, 1 << 17);  // before the first read; larger than zlib's 8 KiB default
  }
  ~GzReader() { gzclose_r(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to `count` bytes into `out`; fewer only where the file ends.
  size_t read(uint8_t* out, size_t count) {
    size_t total = 0;
    while (total < count) {
      const auto want = static_cast<unsigned>(std::min(count - total, kChunkBytes));
      const int got = gzread(file_, out + total, want);
      if (got > 0) total += static_cast<size_t>(got);
      if (got < static_cast<int>(want)) {
        // The end of the file, or an error: zlib returns the bytes decoded before an error
        // and reports it through gzerror.
        check_no_error(errno);
        break;
      }
    }
    return total;
  }

  // Reads to the end of the file and returns how many bytes there were.
  size_t skip_to_end() {
    std::vector<uint8_t> scratch(kChunkBytes);
    size_t total = 0;
    for (size_t got = read(scratch.data(), scratch.size()); got > 0; got = read(scratch.data(), scratch.size())) {
      total += got;
    }
    return total;
  }

 private:
  void check_no_error(int read_errno) const {
    int code = Z_OK;
    std::string_view message = gzerror(file_, &code);
    if (code == Z_OK) return;
    DISTGRAD_CHECK(code != Z_ERRNO, "read_idx: cannot read '", path_, "': ", std::strerror(read_errno));
    // zlib prefixes its messages with "path: ".
    if (message.starts_with(path_ + ": ")) message.remove_prefix(path_.size() + 2);
    DISTGRAD_CHECK(code != Z_BUF_ERROR, "read_idx: '", path_,
                   "' is a truncated gzip file: the compressed stream ends early (zlib: \"", message, "\")");
    DISTGRAD_FAIL("read_idx: '", path_, "' is a corrupt gzip file (zlib: \"", message, "\")");
  }

  std::string path_;
  gzFile file_ = nullptr;
};

}  // namespace

IdxBytes read_idx_bytes(const std::string& path) {
  GzReader file(path);

  std::array<uint8_t, 4> magic{};
  const size_t magic_read = file.read(magic.data(), magic.size());
  DISTGRAD_CHECK(magic_read == magic.size(), "read_idx: '", path,
                 "' is not an IDX file: expected a 4-byte magic number, found a file of ", magic_read, " bytes");
  DISTGRAD_CHECK(magic[0] == 0 && magic[1] == 0, "read_idx: '", path,
                 "' is not an IDX file: expected a magic number starting with two zero bytes, found ",
                 hex_byte(magic[0]), " ", hex_byte(magic[1]));
  DISTGRAD_CHECK(magic[2] == kUnsignedByte, "read_idx: '", path, "' holds elements of type ", hex_byte(magic[2]), " (",
                 idx_type_name(magic[2]), "); only type ", hex_byte(kUnsignedByte), " (unsigned byte) is supported");
  const int dims = magic[3];
  DISTGRAD_CHECK(dims > 0, "read_idx: '", path, "' has a corrupt header: expected at least 1 dimension, found 0");

  std::vector<uint8_t> header(4 * static_cast<size_t>(dims));
  const size_t header_read = file.read(header.data(), header.size());
  DISTGRAD_CHECK(header_read == header.size(), "read_idx: '", path, "' has a truncated header: expected ",
                 header.size(), " bytes of sizes for ", dims, " dimensions, found ", header_read);
  Shape sizes;
  // Sizes of zero make an empty array; the product of the others must stay within the limit.
  // It saturates just above the limit, so with sizes below 2^32 it cannot overflow.
  uint64_t nonzero_product = 1;
  bool has_zero_size = false;
  for (int d = 0; d < dims; ++d) {
    const uint8_t* size = &header[4 * static_cast<size_t>(d)];
    const uint64_t value = uint64_t{size[0]} << 24 | uint64_t{size[1]} << 16 | uint64_t{size[2]} << 8 | size[3];
    sizes.push_back(static_cast<int64_t>(value));
    if (value == 0) has_zero_size = true;
    else nonzero_product = std::min(nonzero_product * value, kMaxIdxElements + 1);
  }
  DISTGRAD_CHECK(nonzero_product <= kMaxIdxElements, "read_idx: '", path, "' has a corrupt header: sizes ",
                 shape_str(sizes), " give more than ", kMaxIdxElements, " elements");
  const uint64_t numel = has_zero_size ? 0 : nonzero_product;

  IdxBytes result{.sizes = sizes, .bytes = {}};
  std::vector<uint8_t>& bytes = result.bytes;
  bytes.reserve(std::min<uint64_t>(numel, 64 * kChunkBytes));
  while (bytes.size() < numel) {
    const size_t start = bytes.size();
    const size_t want = std::min<uint64_t>(numel - start, kChunkBytes);
    bytes.resize(start + want);
    const size_t got = file.read(bytes.data() + start, want);
    bytes.resize(start + got);
    if (got < want) break;
  }
  DISTGRAD_CHECK(bytes.size() == numel, "read_idx: '", path, "' is truncated: expected ", numel,
                 " bytes of data for shape ", shape_str(sizes), ", found ", bytes.size());
  const size_t trailing = file.skip_to_end();
  DISTGRAD_CHECK(trailing == 0, "read_idx: '", path, "' has trailing data: expected the file to end after the ", numel,
                 " bytes of data for shape ", shape_str(sizes), ", found ", trailing, " more bytes");
  return result;
}

Tensor read_idx(const std::string& path) {
  const IdxBytes idx = read_idx_bytes(path);
  Tensor out = empty(idx.sizes, {.dtype = kInt64});
  std::copy(idx.bytes.begin(), idx.bytes.end(), out.data<int64_t>());
  return out;
}

}  // namespace distgrad::data
