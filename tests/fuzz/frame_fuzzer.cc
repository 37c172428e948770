// libFuzzer target: a worker's decoding of received bytes (a frame, then a payload).
//
// Any input must decode or be refused with CodecError; a crash, a sanitizer report or any
// other exception is a bug. Built with clang by scripts/build_fuzzer.sh (ctest label "fuzz"
// runs it for a bounded time); the seed corpus is tests/fuzz/corpus/.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "rpc/codec.h"
#include "rpc/frame.h"

namespace fuzz {

struct Sample {
  distgrad::Tensor x;
  std::vector<std::optional<int32_t>> counts;
  std::map<std::string, double> weights;
};
DISTGRAD_CODEC(Sample, x, counts, weights);

using Arguments = std::tuple<Sample, distgrad::nn::ParamDict, std::pair<std::string, bool>, uint8_t>;

}  // namespace fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace distgrad::rpc;
  grpc::Slice slice(data, size);
  const grpc::ByteBuffer message(&slice, 1);
  wire::CallHeader header;
  try {
    const DecodedFrame frame = decode_frame(message, header);
    Decoder in(frame.payload, frame.tensors);
    Codec<fuzz::Arguments>::decode(in);
  } catch (const CodecError&) {
  }
  return 0;
}
