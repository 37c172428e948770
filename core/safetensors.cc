#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <system_error>
#include <tuple>

#include "core/copy.h"
#include "core/creation.h"

namespace distgrad {
namespace {

// Tensors are copied byte for byte between memory and the format, which is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;  // keeps our tensors in the caller's order

constexpr char kMetadataKey[] = "__metadata__";
constexpr uint64_t kSizeFieldBytes = 8;
// Readers (the reference implementation included) refuse larger headers.
constexpr uint64_t kMaxHeaderSize = 100'000'000;
// Longest piece of a header (a JSON value, a parser message) quoted in an error.
constexpr size_t kMaxQuotedChars = 200;

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "F32";
    case DType::kFloat64: return "F64";
    case DType::kInt64: return "I64";
    case DType::kBool: return "BOOL";
    case DType::kFloat16: return "F16";
    case DType::kBFloat16: return "BF16";
  }
  DISTGRAD_FAIL("safetensors: unknown dtype ", static_cast<int>(dtype));
}

std::optional<DType> dtype_from_safetensors_name(const std::string& name) {
  if (name == "F32") return kFloat32;
  if (name == "F64") return kFloat64;
  if (name == "I64") return kInt64;
  if (name == "BOOL") return kBool;
  if (name == "F16") return kFloat16;
  if (name == "BF16") return kBFloat16;
  return std::nullopt;
}

std::string errno_message(int error) { return std::error_code(error, std::generic_category()).message(); }

std::string shortened(std::string text) {
  if (text.size() > kMaxQuotedChars) text = text.substr(0, kMaxQuotedChars) + "...";
  return text;
}

// "array [1,2]", for errors about a header value of the wrong kind.
std::string describe_json(const Json& value) { return std::string(value.type_name()) + " " + shortened(value.dump()); }

// An owned file descriptor, closed on destruction.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }

  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  // Closes now; returns close()'s errno, or 0 on success. The descriptor is gone either way.
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

// ---------------------------------------------------------------------------------------------
// Writing

// Note [Atomic checkpoint writes]
// save_safetensors writes into a temporary file in the destination's directory (so on the same
// filesystem, where rename() is atomic), fsyncs it so its bytes are on disk before it takes the
// final name, renames it over the destination and then fsyncs the directory so the rename
// itself survives a crash. A reader sees the old file or the complete new one, never a partial
// file; a save that fails at any step removes the temporary file and leaves the old file alone.

// A new file beside `path` that replaces `path` on commit() and is removed if never committed.
// See Note [Atomic checkpoint writes].
class PendingFile {
 public:
  PendingFile(const std::string& path, const std::string& where) : path_(path), where_(where) {
    static std::atomic<uint64_t> counter{0};
    // The name is unique within this process; O_EXCL settles races with other processes.
    int error = 0;
    for (int attempt = 0; attempt < 100; ++attempt) {
      temp_path_ = detail::str_cat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
      const int fd = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd >= 0) {
        fd_.reset(fd);
        return;
      }
      error = errno;
      if (error != EEXIST) break;
    }
    DISTGRAD_FAIL(where_, ": cannot create the temporary file ", temp_path_, ": ", errno_message(error));
  }
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  ~PendingFile() {
    if (!committed_) ::unlink(temp_path_.c_str());
  }

  void write(const void* data, size_t nbytes) {
    const char* bytes = static_cast<const char*>(data);
    while (nbytes > 0) {
      const ssize_t written = ::write(fd_.get(), bytes, nbytes);
      if (written < 0 && errno == EINTR) continue;
      const int error = errno;
      DISTGRAD_CHECK(written > 0, where_, ": cannot write to the temporary file ", temp_path_, ": ",
                     errno_message(error));
      bytes += written;
      nbytes -= static_cast<size_t>(written);
    }
  }

  void commit() {
    const int sync_error = ::fsync(fd_.get()) == 0 ? 0 : errno;
    DISTGRAD_CHECK(sync_error == 0, where_, ": cannot fsync the temporary file ", temp_path_, ": ",
                   errno_message(sync_error));
    const int close_error = fd_.close();
    DISTGRAD_CHECK(close_error == 0, where_, ": cannot close the temporary file ", temp_path_, ": ",
                   errno_message(close_error));
    const int rename_error = ::rename(temp_path_.c_str(), path_.c_str()) == 0 ? 0 : errno;
    DISTGRAD_CHECK(rename_error == 0, where_, ": cannot rename the temporary file ", temp_path_, " to ", path_, ": ",
                   errno_message(rename_error));
    committed_ = true;
    // Best effort: the new file is already in place, so a directory that cannot be fsync'ed
    // (some filesystems refuse) must not turn a finished save into an error.
    std::string directory = std::filesystem::path(path_).parent_path().string();
    if (directory.empty()) directory = ".";
    const FileDescriptor directory_fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (directory_fd.get() >= 0) static_cast<void>(::fsync(directory_fd.get()));
  }

 private:
  std::string path_;
  std::string where_;  // "save_safetensors: <path>", to start errors
  std::string temp_path_;
  FileDescriptor fd_;
  bool committed_ = false;
};

std::string size_field(uint64_t header_size) {
  std::string field(kSizeFieldBytes, '\0');
  std::memcpy(field.data(), &header_size, kSizeFieldBytes);
  return field;
}

// Throws unless `text` is valid UTF-8 (JSON strings must be); `what` names it in the error.
void check_utf8(const std::string& text, const std::string& where, const std::string& what) {
  try {
    static_cast<void>(Json(text).dump());
  } catch (const Json::exception& error) {
    DISTGRAD_FAIL(where, ": expected ", what, " to be valid UTF-8 (", error.what(), ")");
  }
}

// The size field and the JSON header of a file holding `tensors` and `metadata`, padded with
// spaces so that the data starts 8-byte aligned. Checks the names and the tensors.
std::string make_header(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                        const std::string& where) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson& entries = header[kMetadataKey] = OrderedJson::object();
    for (const auto& [key, value] : metadata) {
      check_utf8(key, where, "metadata key '" + key + "'");
      check_utf8(value, where, "the value of metadata key '" + key + "'");
      entries[key] = value;
    }
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, tensor] = tensors[i];
    DISTGRAD_CHECK(!name.empty(), where, ": expected a non-empty name for tensor ", i, ", found an empty one");
    DISTGRAD_CHECK(name != kMetadataKey, where, ": tensor ", i, " is named \"", kMetadataKey,
                   "\", which the format reserves for metadata");
    DISTGRAD_CHECK(names.insert(name).second, where, ": expected unique tensor names, found '", name, "' twice");
    check_utf8(name, where, "the name of tensor " + std::to_string(i));
    DISTGRAD_CHECK(tensor.defined(), where, ": tensor '", name, "' is undefined");
    OrderedJson shape = OrderedJson::array();
    for (int64_t size : tensor.sizes()) shape.push_back(size);
    const uint64_t end = offset + static_cast<uint64_t>(tensor.nbytes());
    header[name] = {{"dtype", safetensors_dtype_name(tensor.dtype())},
                    {"shape", std::move(shape)},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  text.append((kSizeFieldBytes - (kSizeFieldBytes + text.size()) % kSizeFieldBytes) % kSizeFieldBytes, ' ');
  DISTGRAD_CHECK(text.size() <= kMaxHeaderSize, where, ": the header would take ", text.size(),
                 " bytes, more than the ", kMaxHeaderSize, " that readers accept");
  return size_field(text.size()) + text;
}

// Calls `write(data, nbytes)` with each tensor's bytes in order, copying one tensor at a time
// to the host and making it contiguous.
template <typename Write>
void write_tensor_data(const NamedTensors& tensors, Write&& write) {
  for (const auto& [name, tensor] : tensors) {
    const Tensor host = untracked::contiguous(untracked::to(tensor, Device::cpu()));
    const size_t nbytes = host.nbytes();
    if (nbytes > 0) write(host.data_ptr(), nbytes);
  }
}

// ---------------------------------------------------------------------------------------------
// Reading

// A tensor as the header describes it.
struct TensorEntry {
  std::string name;
  DType dtype = kFloat32;
  Shape shape;
  uint64_t begin = 0;  // data_offsets, in bytes from the start of the data buffer
  uint64_t end = 0;
};

struct Header {
  std::vector<TensorEntry> entries;  // in the order of their data
  std::map<std::string, std::string> metadata;
};

// Reads the size field at the start of a file or buffer of `total_size` bytes and checks that
// the header it announces fits. `where` ("load_safetensors: <path>") starts every error.
uint64_t read_header_size(const char* field, uint64_t total_size, const std::string& where) {
  uint64_t header_size = 0;
  std::memcpy(&header_size, field, kSizeFieldBytes);
  DISTGRAD_CHECK(header_size <= kMaxHeaderSize, where, ": the header size is ", header_size,
                 " bytes, more than the limit of ", kMaxHeaderSize, " (is this a safetensors file?)");
  DISTGRAD_CHECK(header_size <= total_size - kSizeFieldBytes, where, ": the header size is ", header_size,
                 " bytes but only ", total_size - kSizeFieldBytes, " bytes follow the 8-byte size field");
  return header_size;
}

void check_has_size_field(uint64_t total_size, const std::string& where) {
  DISTGRAD_CHECK(total_size >= kSizeFieldBytes, where, ": expected at least ", kSizeFieldBytes,
                 " bytes (the header size), found ", total_size);
}

uint64_t non_negative_integer(const Json& value, const std::string& where, const std::string& what) {
  DISTGRAD_CHECK(value.is_number_unsigned(), where, ": expected ", what, " to be a non-negative integer, found ",
                 describe_json(value));
  return value.get<uint64_t>();
}

const Json& field(const Json& info, const char* key, const std::string& where, const std::string& tensor) {
  const auto it = info.find(key);
  DISTGRAD_CHECK(it != info.end(), where, ": ", tensor, " has no \"", key, "\"");
  return *it;
}

TensorEntry parse_entry(const std::string& name, const Json& info, uint64_t buffer_size, const std::string& where) {
  const std::string tensor = "tensor '" + name + "'";
  DISTGRAD_CHECK(info.is_object(), where, ": expected ", tensor,
                 " to be an object with \"dtype\", \"shape\" and \"data_offsets\", found ", describe_json(info));
  TensorEntry entry;
  entry.name = name;

  const Json& dtype = field(info, "dtype", where, tensor);
  DISTGRAD_CHECK(dtype.is_string(), where, ": expected the dtype of ", tensor, " to be a string, found ",
                 describe_json(dtype));
  const std::string& dtype_name = dtype.get_ref<const std::string&>();
  const std::optional<DType> parsed_dtype = dtype_from_safetensors_name(dtype_name);
  DISTGRAD_CHECK(parsed_dtype.has_value(), where, ": ", tensor, " has dtype ", shortened(dtype_name),
                 ", which distgrad does not support (supported: F32, F64, I64, BOOL, F16 and BF16)");
  entry.dtype = *parsed_dtype;

  const Json& shape = field(info, "shape", where, tensor);
  DISTGRAD_CHECK(shape.is_array(), where, ": expected the shape of ", tensor, " to be an array, found ",
                 describe_json(shape));
  // Product of the sizes with zeros counted as ones: the largest stride, which must fit in int64.
  uint64_t span = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t size = non_negative_integer(shape[i], where, "size " + std::to_string(i) + " of " + tensor);
    const uint64_t factor = std::max<uint64_t>(size, 1);
    DISTGRAD_CHECK(span <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / factor, where, ": the shape ",
                   shortened(shape.dump()), " of ", tensor, " overflows a 64-bit element count");
    span *= factor;
    entry.shape.push_back(static_cast<int64_t>(size));
  }

  const Json& offsets = field(info, "data_offsets", where, tensor);
  DISTGRAD_CHECK(offsets.is_array() && offsets.size() == 2, where, ": expected the data_offsets of ", tensor,
                 " to be an array [begin, end], found ", describe_json(offsets));
  entry.begin = non_negative_integer(offsets[0], where, "the begin offset of " + tensor);
  entry.end = non_negative_integer(offsets[1], where, "the end offset of " + tensor);
  const std::string range = detail::str_cat("data_offsets [", entry.begin, ", ", entry.end, "]");
  DISTGRAD_CHECK(entry.begin <= entry.end, where, ": ", tensor, " has ", range, ", which end before they begin");
  DISTGRAD_CHECK(entry.end <= buffer_size, where, ": ", tensor, " has ", range, ", beyond the data buffer of ",
                 buffer_size, " bytes");
  const uint64_t nbytes = entry.end - entry.begin;
  const uint64_t numel = static_cast<uint64_t>(shape_numel(entry.shape));
  const size_t item_size = element_size(entry.dtype);
  DISTGRAD_CHECK(nbytes % item_size == 0 && nbytes / item_size == numel, where, ": ", tensor, " of shape ",
                 shape_str(entry.shape), " and dtype ", dtype_name, " needs ", numel, " elements of ", item_size,
                 " bytes, but its ", range, " hold ", nbytes, " bytes");
  return entry;
}

void parse_metadata(const Json& value, std::map<std::string, std::string>& metadata, const std::string& where) {
  if (value.is_null()) return;  // the reference implementation reads null as no metadata
  DISTGRAD_CHECK(value.is_object(), where, ": expected \"", kMetadataKey, "\" to be an object of strings, found ",
                 describe_json(value));
  for (const auto& [key, item] : value.items()) {
    DISTGRAD_CHECK(item.is_string(), where, ": expected the value of metadata key '", key, "' to be a string, found ",
                   describe_json(item));
    metadata.emplace(key, item.get<std::string>());
  }
}

// Sorted by data_offsets, the tensors must tile the data buffer exactly, each beginning where
// the previous one ends, as the reference implementation requires.
void check_coverage(const std::vector<TensorEntry>& entries, uint64_t buffer_size, const std::string& where) {
  uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& entry : entries) {
    DISTGRAD_CHECK(entry.begin >= covered, where, ": tensor '", entry.name, "' (data_offsets [", entry.begin, ", ",
                   entry.end, "]) overlaps tensor '", previous->name, "' (data_offsets [", previous->begin, ", ",
                   previous->end, "])");
    DISTGRAD_CHECK(entry.begin == covered, where, ": bytes [", covered, ", ", entry.begin,
                   ") of the data buffer belong to no tensor (a hole before tensor '", entry.name, "')");
    covered = entry.end;
    previous = &entry;
  }
  DISTGRAD_CHECK(covered == buffer_size, where, ": bytes [", covered, ", ", buffer_size,
                 ") at the end of the data buffer belong to no tensor");
}

Header parse_header(std::string_view text, uint64_t buffer_size, const std::string& where) {
  // The parsed object is sorted by key and keeps only the last of repeated keys, so the parser
  // reports the top-level keys as it meets them: tensors whose data begin at one offset (empty
  // ones) then load in the order the header lists them, and repeated keys are caught.
  std::vector<std::string> keys;
  std::set<std::string> seen_keys;
  std::string repeated_key;
  const Json::parser_callback_t record_keys = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (seen_keys.insert(key).second) {
        keys.push_back(key);
      } else if (repeated_key.empty()) {
        repeated_key = key;
      }
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(text, record_keys);
  } catch (const Json::exception& error) {
    DISTGRAD_FAIL(where, ": the header is not valid JSON: ", shortened(error.what()));
  }
  DISTGRAD_CHECK(json.is_object(), where, ": expected the header to be a JSON object, found ", describe_json(json));
  DISTGRAD_CHECK(repeated_key.empty(), where, ": the header has the key '", repeated_key, "' more than once");

  Header header;
  for (const std::string& key : keys) {
    const Json& value = json.at(key);
    if (key == kMetadataKey) {
      parse_metadata(value, header.metadata, where);
    } else {
      header.entries.push_back(parse_entry(key, value, buffer_size, where));
    }
  }
  std::stable_sort(header.entries.begin(), header.entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  check_coverage(header.entries, buffer_size, where);
  return header;
}

// Fills a CPU tensor per entry with `read(destination, begin, nbytes)` and moves it to `device`.
template <typename Read>
SafetensorsContents load_tensors(Header header, Device device, Read&& read) {
  SafetensorsContents contents;
  contents.metadata = std::move(header.metadata);
  for (TensorEntry& entry : header.entries) {
    const Tensor host = empty(entry.shape, {.dtype = entry.dtype});
    const uint64_t nbytes = entry.end - entry.begin;
    if (nbytes > 0) read(host.data_ptr(), entry.begin, nbytes);
    if (entry.dtype == kBool) {
      // A byte other than 0 or 1 is not a valid C++ bool: read any non-zero byte as true.
      auto* bytes = static_cast<unsigned char*>(host.data_ptr());
      for (uint64_t i = 0; i < nbytes; ++i) bytes[i] = bytes[i] != 0;
    }
    contents.tensors.emplace_back(std::move(entry.name), untracked::to(host, device));
  }
  return contents;
}

// Reads exactly `nbytes` at `offset` of `fd` into `out`.
void read_file_at(int fd, void* out, uint64_t offset, uint64_t nbytes, const std::string& where) {
  char* destination = static_cast<char*>(out);
  uint64_t done = 0;
  while (done < nbytes) {
    const ssize_t got = ::pread(fd, destination + done, nbytes - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    const int error = errno;
    DISTGRAD_CHECK(got >= 0, where, ": cannot read bytes [", offset, ", ", offset + nbytes,
                   ") of the file: ", errno_message(error));
    DISTGRAD_CHECK(got > 0, where, ": the file ended at byte ", offset + done, " while reading bytes [", offset, ", ",
                   offset + nbytes, ") (did it shrink while being read?)");
    done += static_cast<uint64_t>(got);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = "save_safetensors: " + path;
  const std::string header = make_header(tensors, metadata, where);
  PendingFile file(path, where);
  file.write(header.data(), header.size());
  write_tensor_data(tensors, [&](const void* data, size_t nbytes) { file.write(data, nbytes); });
  file.commit();
}

std::string serialize_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  std::string bytes = make_header(tensors, metadata, "serialize_safetensors");
  write_tensor_data(tensors,
                    [&](const void* data, size_t nbytes) { bytes.append(static_cast<const char*>(data), nbytes); });
  return bytes;
}

SafetensorsContents load_safetensors(const std::string& path, Device device) {
  const std::string where = "load_safetensors: " + path;
  // O_NONBLOCK so that a FIFO at `path` is refused below instead of blocking the open.
  const FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  const int open_error = errno;
  DISTGRAD_CHECK(file.get() >= 0, where, ": cannot open the file: ", errno_message(open_error));
  struct stat info {};
  const int stat_error = ::fstat(file.get(), &info) == 0 ? 0 : errno;
  DISTGRAD_CHECK(stat_error == 0, where, ": cannot stat the file: ", errno_message(stat_error));
  DISTGRAD_CHECK(S_ISREG(info.st_mode), where, ": expected a regular file, found ",
                 S_ISDIR(info.st_mode) ? "a directory" : "another kind of file");

  const auto file_size = static_cast<uint64_t>(info.st_size);
  check_has_size_field(file_size, where);
  char field[kSizeFieldBytes];
  read_file_at(file.get(), field, 0, kSizeFieldBytes, where);
  const uint64_t header_size = read_header_size(field, file_size, where);
  std::string text(header_size, '\0');
  read_file_at(file.get(), text.data(), kSizeFieldBytes, header_size, where);
  const uint64_t data_start = kSizeFieldBytes + header_size;
  Header header = parse_header(text, file_size - data_start, where);
  return load_tensors(std::move(header), device, [&](void* out, uint64_t begin, uint64_t nbytes) {
    read_file_at(file.get(), out, data_start + begin, nbytes, where);
  });
}

SafetensorsContents deserialize_safetensors(std::string_view bytes, Device device, std::string_view source) {
  const std::string where = detail::str_cat("deserialize_safetensors: ", source);
  check_has_size_field(bytes.size(), where);
  const uint64_t header_size = read_header_size(bytes.data(), bytes.size(), where);
  const std::string_view data = bytes.substr(kSizeFieldBytes + header_size);
  Header header = parse_header(bytes.substr(kSizeFieldBytes, header_size), data.size(), where);
  return load_tensors(std::move(header), device, [&](void* out, uint64_t begin, uint64_t nbytes) {
    std::memcpy(out, data.data() + begin, nbytes);
  });
}

}  // namespace distgrad
