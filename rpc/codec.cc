#include "rpc/codec.h"

namespace distgrad::rpc {

std::string tag_name(uint8_t tag) {
  switch (static_cast<WireTag>(tag)) {
    case WireTag::kBool: return "bool";
    case WireTag::kInt: return "signed integer";
    case WireTag::kUInt: return "unsigned integer";
    case WireTag::kFloat: return "floating-point number";
    case WireTag::kString: return "string";
    case WireTag::kTensor: return "Tensor";
    case WireTag::kList: return "vector";
    case WireTag::kMap: return "map";
    case WireTag::kTuple: return "tuple";
    case WireTag::kOptional: return "optional";
    case WireTag::kStruct: return "struct";
    case WireTag::kParamDict: return "ParamDict";
    case WireTag::kRRef: return "RRef";
  }
  return "tag " + std::to_string(tag);
}

void Decoder::need(size_t size) const {
  if (size > remaining()) {
    throw CodecError("truncated payload: " + std::to_string(size) + " more bytes needed, " +
                     std::to_string(remaining()) + " left");
  }
}

void Decoder::expect_tag(WireTag expected, std::string_view what) {
  need(1);
  const auto found = static_cast<uint8_t>(bytes_[position_]);
  if (found != static_cast<uint8_t>(expected)) {
    throw CodecError("expected " + std::string(what) + ", found a " + tag_name(found));
  }
  ++position_;
}

std::string_view Decoder::get_string() {
  const uint64_t size = get_u64();
  need(size);
  const std::string_view value = bytes_.substr(position_, size);
  position_ += size;
  return value;
}

uint64_t Decoder::get_count(std::string_view what) {
  const uint64_t count = get_u64();
  if (count > remaining()) {
    throw CodecError(std::string(what) + " claims " + std::to_string(count) + " elements but only " +
                     std::to_string(remaining()) + " bytes are left");
  }
  return count;
}

const Tensor& Decoder::tensor(uint32_t index) const {
  if (index >= tensors_.size()) {
    throw CodecError("tensor index " + std::to_string(index) + " is out of range: the call carries " +
                     std::to_string(tensors_.size()) + " tensors");
  }
  return tensors_[index];
}

void Codec<nn::ParamDict>::encode(Encoder& out, const nn::ParamDict& value) {
  out.put_tag(WireTag::kParamDict);
  out.put_u64(value.size());
  for (const auto& [key, tensor] : value) {
    out.put_string(key);
    Codec<Tensor>::encode(out, tensor);
  }
}

nn::ParamDict Codec<nn::ParamDict>::decode(Decoder& in) {
  in.expect_tag(WireTag::kParamDict, name());
  const uint64_t count = in.get_count(name());
  nn::ParamDict value;
  for (uint64_t i = 0; i < count; ++i) {
    std::string key(in.get_string());
    if (value.contains(key)) throw CodecError("ParamDict: the key '" + key + "' appears twice");
    try {
      value.insert(key, Codec<Tensor>::decode(in));
    } catch (const CodecError& error) {
      throw CodecError("ParamDict key '" + key + "': " + error.what());
    }
  }
  return value;
}

}  // namespace distgrad::rpc
