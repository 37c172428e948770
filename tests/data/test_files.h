// Helpers shared by the data tests: a scratch directory that removes itself, and writers of
// IDX files (raw or gzip-compressed through zlib) with any header and payload.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/core/test_util.h"

namespace distgrad::testing {

using Bytes = std::vector<uint8_t>;

// An IDX header: two zero bytes, the type byte, the dims byte, then big-endian uint32 sizes.
inline Bytes idx_header(uint8_t type, const std::vector<uint32_t>& sizes) {
  Bytes header = {0, 0, type, static_cast<uint8_t>(sizes.size())};
  for (uint32_t size : sizes) {
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<uint8_t>(size >> shift));
  }
  return header;
}

// A header for unsigned bytes followed by `data`.
inline Bytes idx_file(const std::vector<uint32_t>& sizes, const Bytes& data) {
  Bytes file = idx_header(0x08, sizes);
  file.insert(file.end(), data.begin(), data.end());
  return file;
}

inline void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << "cannot open " << path;
  const int written = bytes.empty() ? 0 : gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  const int closed = gzclose(file);
  ASSERT_EQ(written, static_cast<int>(bytes.size())) << path;
  ASSERT_EQ(closed, Z_OK) << path;
}

inline Bytes read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace distgrad::testing
