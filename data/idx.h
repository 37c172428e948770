// A reader for the IDX format, the container of the MNIST and Fashion-MNIST files.
//
// An IDX file is two zero bytes, a type byte, a dims byte, one big-endian uint32 size per
// dim, then the elements in row-major order. Only unsigned bytes (type 0x08, what every
// MNIST-style file holds) are supported. Files may be gzip-compressed or raw: zlib reads
// both. Every malformed file is an Error that names the file and says what was expected and
// what was found.
//
//   Tensor labels = distgrad::data::read_idx("/data/train-labels-idx1-ubyte.gz");  // int64 [60000]
//   IdxBytes images = distgrad::data::read_idx_bytes("/data/train-images-idx3-ubyte.gz");
//   // images.sizes == {60000, 28, 28}, images.bytes.size() == 47040000
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace distgrad::data {

// The most elements an IDX file may hold here (4 GiB of bytes); larger sizes in a header are
// taken for corruption rather than allocated.
inline constexpr uint64_t kMaxIdxElements = uint64_t{1} << 32;

// The raw contents of an IDX file of unsigned bytes.
struct IdxBytes {
  Shape sizes;                 // one entry per dim, from the header
  std::vector<uint8_t> bytes;  // shape_numel(sizes) elements, row-major
};

// Reads an IDX file of unsigned bytes (gzip-compressed or raw).
IdxBytes read_idx_bytes(const std::string& path);

// The same file as an int64 tensor of the file's shape, on the CPU.
//
// int64 rather than float32: IDX holds integers, and int64 is distgrad's integer dtype, which
// keeps them exact and is what labels must be (index_select, one_hot and the losses take
// int64 class indices). Pixels that should be scaled floats are better converted straight
// from read_idx_bytes (as load_fashion_mnist does) than through an 8-byte-per-pixel tensor.
Tensor read_idx(const std::string& path);

}  // namespace distgrad::data
