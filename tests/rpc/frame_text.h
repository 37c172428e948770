// Frames as text, for tests of what carries frames (the call socket, the loopback).
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace distgrad::rpc::testing {

// A frame of the bytes of `text`, in one slice.
inline grpc::ByteBuffer bytes_of(const std::string& text) {
  grpc::Slice slice(text);
  return grpc::ByteBuffer(&slice, 1);
}

// The bytes of `buffer` as text.
inline std::string text_of(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string text;
  for (const grpc::Slice& slice : slices) text.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return text;
}

}  // namespace distgrad::rpc::testing
