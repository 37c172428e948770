// Helpers shared by the core tests.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ops.h"

namespace distgrad::testing {

// Asserts that `statement` throws distgrad::Error whose message contains every fragment.
#define EXPECT_ERROR_CONTAINS(statement, ...)                                    \
  do {                                                                           \
    try {                                                                        \
      statement;                                                                 \
      ADD_FAILURE() << "expected distgrad::Error from: " #statement;             \
    } catch (const ::distgrad::Error& error) {                                   \
      for (const char* fragment : {__VA_ARGS__}) {                               \
        EXPECT_THAT(error.what(), ::testing::HasSubstr(fragment)) << #statement; \
      }                                                                          \
    }                                                                            \
  } while (0)

// The message of the `E` that `call` throws; "no such error" when it throws none.
template <typename E>
std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const E& error) {
    return error.what();
  }
  return "no such error";
}

// Values of `t` as doubles, row-major.
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// A non-contiguous float64 tensor with the given values and shape: the transpose of a
// contiguous tensor holding the transposed data (2-D shapes only).
inline Tensor transposed_copy_of(const std::vector<double>& data, int64_t rows, int64_t cols) {
  std::vector<double> transposed(data.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) transposed[j * rows + i] = data[i * cols + j];
  }
  return untracked::t(from_vector(transposed, {cols, rows}));
}

// A fresh directory under gtest's temporary directory, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "distgrad_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of `name` inside the directory. The string lives as long as the directory, so
  // its c_str() can be kept (as EXPECT_ERROR_CONTAINS's fragments are).
  const std::string& file(const std::string& name) const {
    return files_.try_emplace(name, path_ + "/" + name).first->second;
  }
  // Names of the directory's entries, sorted.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
  mutable std::map<std::string, std::string> files_;  // name -> path
};

}  // namespace distgrad::testing
