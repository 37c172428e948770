// libFuzzer target: the rendezvous Store's service (rendezvous/store.h) answering raw requests.
//
// Each input is one call to a Store hosted in this process: its first byte picks the method
// (one of the seven, or one the Store does not have), its second whether the call carries the
// right token, a wrong one or none, the rest is the request message. A call must be answered
// within its 2 s deadline or be cut off by it (a Get or Wait may ask to wait longer), and the
// server must then let go of it: no request is left waiting 5 s later. A crash or a sanitizer
// report is a bug.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <future>
#include <string>
#include <thread>

#include "rendezvous/store.h"

namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "fuzzing-token";
constexpr const char* kMethods[] = {
    "/distgrad.rendezvous.wire.Store/Set",        "/distgrad.rendezvous.wire.Store/Get",
    "/distgrad.rendezvous.wire.Store/Wait",       "/distgrad.rendezvous.wire.Store/Add",
    "/distgrad.rendezvous.wire.Store/CompareSet", "/distgrad.rendezvous.wire.Store/Delete",
    "/distgrad.rendezvous.wire.Store/NumKeys",    "/distgrad.rendezvous.wire.Store/Other",
};

struct Fixture {
  distgrad::rendezvous::StoreServer server{"127.0.0.1", 0, kToken};
  grpc::GenericStub stub{grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials())};
};

Fixture& fixture() {
  static Fixture* fixture = new Fixture;
  return *fixture;
}

[[noreturn]] void bug(const char* what) {
  std::fprintf(stderr, "store_fuzzer: %s\n", what);
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  Fixture& store = fixture();
  grpc::ClientContext context;
  if (data[1] % 3 == 0) context.AddMetadata("distgrad-token", kToken);
  if (data[1] % 3 == 1) context.AddMetadata("distgrad-token", "fuzzing-tokem");
  context.set_deadline(std::chrono::system_clock::now() + 2s);
  grpc::Slice slice(data + 2, size - 2);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  store.stub.UnaryCall(&context, kMethods[data[0] % std::size(kMethods)], grpc::StubOptions(), &request, &response,
                       [&done](grpc::Status status) { done.set_value(std::move(status)); });
  if (done.get_future().wait_for(10s) != std::future_status::ready) bug("a call outlived its deadline by 8 s");
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (store.server.num_waiting() > 0) {
    if (std::chrono::steady_clock::now() > deadline) bug("a request still waits 5 s after its call ended");
    std::this_thread::sleep_for(1ms);
  }
  return 0;
}
