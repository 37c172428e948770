// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors): named
// tensors plus string metadata, in a file or in memory.
//
// The format is an 8-byte little-endian header size N, then N bytes of JSON that map each
// tensor name to {"dtype", "shape", "data_offsets"} (with an optional "__metadata__" object of
// strings), then the tensors' bytes: row-major, little-endian, covering the buffer exactly.
// Files written here load with the reference implementation (safetensors.torch / .numpy) and
// the other way round, for the dtypes distgrad has: F32, F64, I64, BOOL, F16 and BF16.
//
//   save_safetensors("model.safetensors", {{"w", w}, {"b", b}}, {{"step", "1000"}});
//   SafetensorsContents checkpoint = load_safetensors("model.safetensors", Device::cuda());
//   Tensor w = checkpoint.tensors[0].second;
//
// Loading checks everything it reads (sizes, JSON, dtypes, shapes, offsets) and throws
// distgrad::Error naming the file, or the `source` of a buffer, and what was wrong.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace distgrad {

// Tensors by name. On save the order is kept in the file; on load it is the order of the
// tensors' data in the file.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsContents {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

// Writes `tensors` and `metadata` to `path` atomically: into a temporary file in the same
// directory, which is fsync'ed and then renamed over `path`. On any failure the temporary file
// is removed and an existing file at `path` is left as it was. CUDA tensors are copied to the
// host and non-contiguous tensors are written as their contiguous values. Names must be unique,
// non-empty, valid UTF-8 and not "__metadata__"; every tensor must be defined.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file and places its tensors on `device`. The tensors own their memory.
SafetensorsContents load_safetensors(const std::string& path, Device device = Device::cpu());

// The bytes of a safetensors file holding `tensors` and `metadata` (as save_safetensors writes).
std::string serialize_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata = {});

// Reads safetensors bytes, checked as load_safetensors checks a file; errors name `source`.
// The tensors are copies: they do not refer to `bytes`.
SafetensorsContents deserialize_safetensors(std::string_view bytes, Device device = Device::cpu(),
                                            std::string_view source = "buffer");

}  // namespace distgrad
