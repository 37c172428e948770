// Tests of the rendezvous Store over real gRPC on loopback: every operation, waits that block
// until another thread sets a key, timeouts that name the missing keys (and do not overrun),
// concurrent counters, the job token, unreachable and shut-down servers, a 100 MB value, raw and
// garbage requests, and four processes that rendezvous through one server. Also the network
// helpers.
#include "rendezvous/store.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <thread>
#include <vector>

#include "proto/store.grpc.pb.h"
#include "rendezvous/world.h"
#include "tests/core/test_util.h"

extern char** environ;

namespace distgrad::rendezvous {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr char kToken[] = "s3cret-job-token";

milliseconds elapsed_since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

// A server on a free loopback port and a client of it with the right token.
struct LoopbackStore {
  StoreServer server{"127.0.0.1", 0, kToken};
  StoreClient client{server.address(), kToken, 10s};
};

TEST(Store, SetThenGetReturnsTheValue) {
  LoopbackStore store;
  store.client.set("answer", "42");
  EXPECT_EQ(store.client.get("answer"), "42");
  store.client.set("answer", "43");
  EXPECT_EQ(store.client.get("answer"), "43");
  store.client.set("empty", "");
  EXPECT_EQ(store.client.get("empty"), "");
  std::string binary("a\0b\xff\n", 5);
  store.client.set("binary", binary);
  EXPECT_EQ(store.client.get("binary"), binary);
  store.client.set("", "empty key");
  EXPECT_EQ(store.client.get(""), "empty key");
}

TEST(Store, AddressAndPort) {
  StoreServer server("127.0.0.1", 0, kToken);
  EXPECT_GT(server.port(), 0);
  EXPECT_EQ(server.address(), "127.0.0.1:" + std::to_string(server.port()));
  StoreClient client(server.address(), kToken, 5s);
  EXPECT_EQ(client.address(), server.address());
  EXPECT_EQ(client.timeout(), 5s);
}

TEST(Store, GetBlocksUntilAnotherThreadSetsTheKey) {
  LoopbackStore store;
  Clock::time_point start = Clock::now();
  auto setter = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    StoreClient other(store.server.address(), kToken);
    other.set("late", "value");
  });
  EXPECT_EQ(store.client.get("late"), "value");
  EXPECT_GE(elapsed_since(start), 250ms);
  setter.get();
}

TEST(Store, WaitBlocksUntilEveryKeyIsSet) {
  LoopbackStore store;
  auto setter = std::async(std::launch::async, [&] {
    for (const char* key : {"a", "b", "c"}) {
      std::this_thread::sleep_for(100ms);
      store.client.set(key, "x");
    }
  });
  Clock::time_point start = Clock::now();
  store.client.wait({"a", "b", "c"});
  EXPECT_GE(elapsed_since(start), 250ms);
  setter.get();
  EXPECT_THAT(store.client.wait_for({"a", "b", "c"}, 1ms), IsEmpty());
  store.client.wait({});
}

TEST(Store, AWaitCountsOnlyKeysSetWhenItEnds) {
  LoopbackStore store;
  auto waiting = std::async(std::launch::async, [&] { return store.client.wait_for({"a", "b", "a"}, 5s); });
  store.client.set("a", "1");
  store.client.delete_key("a");  // set, then gone again: the wait still misses it
  store.client.set("b", "2");
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
  EXPECT_EQ(store.server.num_waiting(), 1u);
  store.client.set("a", "3");
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready);
  EXPECT_THAT(waiting.get(), IsEmpty());
  EXPECT_EQ(store.server.num_waiting(), 0u);
}

TEST(Store, GetTimesOutNamingTheKeyAndTheAddress) {
  LoopbackStore store;
  std::string address = store.server.address();
  Clock::time_point start = Clock::now();
  EXPECT_ERROR_CONTAINS(store.client.get("never/set", 300ms), "timed out after 300 ms", address.c_str(),
                        "key \"never/set\"");
  milliseconds took = elapsed_since(start);
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 300ms + 1500ms);
}

TEST(Store, WaitTimesOutNamingOnlyTheMissingKeys) {
  LoopbackStore store;
  store.client.set("rank/0", "up");
  Clock::time_point start = Clock::now();
  try {
    store.client.wait({"rank/0", "rank/1", "rank/2"}, 400ms);
    ADD_FAILURE() << "expected a timeout";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("timed out after 400 ms"));
    EXPECT_THAT(error.what(), HasSubstr(store.server.address()));
    EXPECT_THAT(error.what(), HasSubstr("keys \"rank/1\", \"rank/2\" (2 of 3 missing)"));
    EXPECT_THAT(error.what(), Not(HasSubstr("rank/0")));
  }
  milliseconds took = elapsed_since(start);
  EXPECT_GE(took, 390ms);
  EXPECT_LT(took, 400ms + 1500ms);
}

TEST(Store, WaitForReturnsTheKeysStillMissing) {
  LoopbackStore store;
  store.client.set("b", "1");
  EXPECT_THAT(store.client.wait_for({"a", "b", "c"}, 100ms), ElementsAre("a", "c"));
  store.client.set("a", "1");
  store.client.set("c", "1");
  EXPECT_THAT(store.client.wait_for({"a", "b", "c"}, 100ms), IsEmpty());
}

TEST(Store, TheClientTimeoutBoundsCallsWithoutTheirOwn) {
  StoreServer server("127.0.0.1", 0, kToken);
  StoreClient client(server.address(), kToken, 200ms);
  // Connected first: a call fails fast on a failed connection attempt (seen once in CI under
  // load: "failed to connect to all addresses ... No such file or directory"), which is not the
  // timeout this test is about.
  client.wait_until_reachable(5000ms);
  Clock::time_point start = Clock::now();
  EXPECT_ERROR_CONTAINS(client.get("missing"), "timed out after 200 ms", "key \"missing\"");
  EXPECT_ERROR_CONTAINS(client.wait({"missing"}), "timed out after 200 ms", "key \"missing\"");
  EXPECT_LT(elapsed_since(start), 2 * 200ms + 2000ms);
}

TEST(Store, ManyMissingKeysAreCountedNotAllListed) {
  LoopbackStore store;
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) keys.push_back(detail::str_cat("k", i));
  EXPECT_ERROR_CONTAINS(store.client.wait(keys, 10ms), "\"k0\"", "\"k15\"", "and 24 more", "(40 of 40 missing)");
}

TEST(Store, AddFromEightThreadsCountsEveryIncrement) {
  LoopbackStore store;
  std::vector<std::future<void>> threads;
  for (int t = 0; t < 8; ++t) {
    threads.push_back(std::async(std::launch::async, [&] {
      for (int i = 0; i < 1000; ++i) store.client.add("counter", 1);
    }));
  }
  for (std::future<void>& thread : threads) thread.get();
  EXPECT_EQ(store.client.add("counter", 0), 8000);
  EXPECT_EQ(store.client.get("counter"), "8000");
}

TEST(Store, AddStartsAtZeroAndAcceptsNegativeAmounts) {
  LoopbackStore store;
  EXPECT_EQ(store.client.add("n", 5), 5);
  EXPECT_EQ(store.client.add("n", -7), -2);
  store.client.set("m", "40");
  EXPECT_EQ(store.client.add("m", 2), 42);
}

TEST(Store, AddWakesAWaiter) {
  LoopbackStore store;
  auto adder = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(100ms);
    store.client.add("arrived", 1);
  });
  EXPECT_EQ(store.client.get("arrived"), "1");
  adder.get();
}

TEST(Store, AddRejectsValuesThatAreNotIntegersAndOverflow) {
  LoopbackStore store;
  std::string address = store.server.address();
  store.client.set("text", "abc");
  EXPECT_ERROR_CONTAINS(store.client.add("text", 1), "the value at key \"text\" is not an integer: \"abc\"",
                        "FAILED_PRECONDITION", address.c_str());
  store.client.set("spaced", " 1");
  EXPECT_ERROR_CONTAINS(store.client.add("spaced", 1), "is not an integer");
  store.client.set("big", std::to_string(std::numeric_limits<int64_t>::max()));
  EXPECT_ERROR_CONTAINS(store.client.add("big", 1), "overflows");
  EXPECT_EQ(store.client.get("big"), std::to_string(std::numeric_limits<int64_t>::max()));
}

TEST(Store, CompareSetSwapsOnlyOnAMatch) {
  LoopbackStore store;
  // Absent key, empty expectation: created.
  EXPECT_EQ(store.client.compare_set("leader", "", "worker3"), "worker3");
  // Present key, wrong expectation: unchanged, the current value comes back.
  EXPECT_EQ(store.client.compare_set("leader", "", "worker5"), "worker3");
  EXPECT_EQ(store.client.compare_set("leader", "worker1", "worker5"), "worker3");
  // Present key, right expectation: swapped.
  EXPECT_EQ(store.client.compare_set("leader", "worker3", "worker5"), "worker5");
  EXPECT_EQ(store.client.get("leader"), "worker5");
  // Absent key, non-empty expectation: still absent.
  EXPECT_EQ(store.client.compare_set("other", "x", "y"), "");
  EXPECT_THAT(store.client.wait_for({"other"}, 1ms), ElementsAre("other"));
}

TEST(Store, CompareSetCreatingAKeyWakesAWaiter) {
  LoopbackStore store;
  auto setter = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(100ms);
    store.client.compare_set("once", "", "first");
  });
  EXPECT_EQ(store.client.get("once"), "first");
  setter.get();
}

TEST(Store, DeleteAndNumKeys) {
  LoopbackStore store;
  store.client.wait_until_reachable(5s);
  EXPECT_EQ(store.client.num_keys(), 0);  // the token is not stored as a key
  store.client.set("a", "1");
  store.client.set("b", "2");
  store.client.add("c", 3);
  EXPECT_EQ(store.client.num_keys(), 3);
  EXPECT_TRUE(store.client.delete_key("a"));
  EXPECT_FALSE(store.client.delete_key("a"));
  EXPECT_FALSE(store.client.delete_key("never"));
  EXPECT_EQ(store.client.num_keys(), 2);
  EXPECT_THAT(store.client.wait_for({"a", "b"}, 1ms), ElementsAre("a"));
}

TEST(Store, RequestsWithoutTheTokenAreRefused) {
  StoreServer server("127.0.0.1", 0, kToken);
  StoreClient no_token(server.address(), "", 5s);
  StoreClient wrong_token(server.address(), "s3cret-job-tokem", 5s);
  StoreClient longer_token(server.address(), std::string(kToken) + "x", 5s);
  std::string address = server.address();
  for (StoreClient* client : {&no_token, &wrong_token, &longer_token}) {
    const char* refused = "refused the job token (check DISTGRAD_TOKEN)";
    EXPECT_ERROR_CONTAINS(client->set("k", "v"), refused, address.c_str());
    EXPECT_ERROR_CONTAINS(client->get("k", 5s), refused);
    EXPECT_ERROR_CONTAINS(client->wait({"k"}, 5s), refused);
    EXPECT_ERROR_CONTAINS(client->add("k", 1), refused);
    EXPECT_ERROR_CONTAINS(client->compare_set("k", "", "v"), refused);
    EXPECT_ERROR_CONTAINS(client->delete_key("k"), refused);
    EXPECT_ERROR_CONTAINS(client->num_keys(), refused);
    Clock::time_point start = Clock::now();
    EXPECT_ERROR_CONTAINS(client->wait_until_reachable(5s), refused);
    EXPECT_LT(elapsed_since(start), 2s);
  }
  StoreClient right(server.address(), kToken, 5s);
  EXPECT_EQ(right.num_keys(), 0);  // nothing the refused clients sent was stored
}

TEST(Store, ServerWithoutTokenAcceptsEveryClient) {
  StoreServer server("127.0.0.1", 0, "");
  StoreClient without(server.address(), "", 5s);
  StoreClient with(server.address(), "anything", 5s);
  without.set("k", "v");
  EXPECT_EQ(with.get("k"), "v");
}

TEST(Store, UnreachableServerFailsWithinTheTimeout) {
  std::string address = "127.0.0.1:" + std::to_string(pick_free_port());
  std::string unreachable = "the store at " + address + " is unreachable";
  StoreClient client(address, kToken, 2s);
  Clock::time_point start = Clock::now();
  EXPECT_ERROR_CONTAINS(client.set("k", "v"), unreachable.c_str());
  EXPECT_ERROR_CONTAINS(client.get("k"), "is unreachable");
  EXPECT_LT(elapsed_since(start), 2 * 2s);
  start = Clock::now();
  EXPECT_ERROR_CONTAINS(client.wait_until_reachable(500ms), unreachable.c_str(), "no answer within 500 ms");
  milliseconds took = elapsed_since(start);
  EXPECT_GE(took, 450ms);
  EXPECT_LT(took, 500ms + 1500ms);
}

TEST(Store, WaitUntilReachableWaitsForALateServer) {
  int port = pick_free_port();
  StoreClient client("127.0.0.1:" + std::to_string(port), kToken, 10s);
  auto server = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(400ms);
    return std::make_unique<StoreServer>("127.0.0.1", port, kToken);
  });
  Clock::time_point start = Clock::now();
  client.wait_until_reachable(10s);
  EXPECT_GE(elapsed_since(start), 350ms);
  std::unique_ptr<StoreServer> started = server.get();
  client.set("k", "v");
  EXPECT_EQ(client.get("k"), "v");
}

TEST(Store, ShutdownWakesEveryWaiter) {
  LoopbackStore store;
  store.client.wait_until_reachable(5s);
  Clock::time_point start = Clock::now();
  auto get = std::async(std::launch::async, [&] { return store.client.get("never", 30s); });
  auto wait = std::async(std::launch::async, [&] { store.client.wait({"never", "either"}, 30s); });
  std::this_thread::sleep_for(300ms);
  store.server.shutdown();
  EXPECT_ERROR_CONTAINS(get.get(), "is unreachable", "the store is shutting down");
  EXPECT_ERROR_CONTAINS(wait.get(), "is unreachable", "the store is shutting down");
  EXPECT_LT(elapsed_since(start), 10s);
  store.server.shutdown();  // idempotent
  EXPECT_ERROR_CONTAINS(store.client.set("k", "v"), "is unreachable");
}

TEST(Store, DestroyingTheServerWakesWaiters) {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, kToken);
  StoreClient client(server->address(), kToken, 30s);
  client.wait_until_reachable(5s);
  auto get = std::async(std::launch::async, [&] { return client.get("never"); });
  std::this_thread::sleep_for(200ms);
  Clock::time_point start = Clock::now();
  server.reset();
  EXPECT_ERROR_CONTAINS(get.get(), "is unreachable");
  EXPECT_LT(elapsed_since(start), 10s);
}

TEST(Store, AHundredMegabyteValueRoundTrips) {
  LoopbackStore store;
  std::string value(100 << 20, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>((i * 2654435761u) >> 13);
  store.client.set("big", value);
  std::string back = store.client.get("big");
  ASSERT_EQ(back.size(), value.size());
  EXPECT_TRUE(back == value);  // not EXPECT_EQ: a failure would print 200 MB
}

TEST(StoreServer, DistgradMaxMessageBytesLimitsRequests) {
  ASSERT_EQ(::setenv("DISTGRAD_MAX_MESSAGE_BYTES", "1048576", 1), 0);
  StoreServer server("127.0.0.1", 0, kToken);
  ::unsetenv("DISTGRAD_MAX_MESSAGE_BYTES");
  StoreClient client(server.address(), kToken, 10s);
  EXPECT_ERROR_CONTAINS(client.set("big", std::string(size_t{2} << 20, 'x')),
                        "refused a request larger than it accepts (DISTGRAD_MAX_MESSAGE_BYTES where it runs) while "
                        "setting key \"big\": Received message larger than max");
  client.set("small", std::string(1000, 'x'));
  EXPECT_EQ(client.get("small").size(), 1000u);
  EXPECT_EQ(client.num_keys(), 1);

  ASSERT_EQ(::setenv("DISTGRAD_MAX_MESSAGE_BYTES", "1MB", 1), 0);
  EXPECT_ERROR_CONTAINS(StoreServer("127.0.0.1", 0, kToken),
                        "StoreServer: DISTGRAD_MAX_MESSAGE_BYTES=1MB is not a number of bytes");
  ::unsetenv("DISTGRAD_MAX_MESSAGE_BYTES");
}

TEST(StoreServer, RefusesAPortInUse) {
  StoreServer first("127.0.0.1", 0, kToken);
  std::string in_use = "cannot listen on " + first.address();
  EXPECT_ERROR_CONTAINS(StoreServer("127.0.0.1", first.port(), kToken), in_use.c_str());
  StoreClient client(first.address(), kToken, 5s);
  client.set("still", "serving");
  EXPECT_EQ(client.get("still"), "serving");
}

TEST(StoreServer, RefusesBadPortsAndUnknownHosts) {
  EXPECT_ERROR_CONTAINS(StoreServer("127.0.0.1", 70000, kToken), "127.0.0.1:70000", "not in 0..65535");
  EXPECT_ERROR_CONTAINS(StoreServer("127.0.0.1", -1, kToken), "not in 0..65535");
  EXPECT_ERROR_CONTAINS(StoreServer("192.0.2.1", 0, kToken), "cannot listen on 192.0.2.1:0");
}

TEST(StoreServer, RefusesANonLoopbackAddressWithoutAToken) {
  if (std::getenv("DISTGRAD_INSECURE") != nullptr) GTEST_SKIP() << "DISTGRAD_INSECURE is set";
  EXPECT_ERROR_CONTAINS(StoreServer("0.0.0.0", 0, ""), "refusing to serve 0.0.0.0:0 without a job token",
                        "DISTGRAD_INSECURE=1");
  StoreServer with_token("0.0.0.0", 0, kToken);
  StoreClient client("127.0.0.1:" + std::to_string(with_token.port()), kToken, 5s);
  EXPECT_EQ(client.num_keys(), 0);
}

TEST(StoreServer, ServesIpv6Loopback) {
  std::unique_ptr<StoreServer> server;
  try {
    server = std::make_unique<StoreServer>("::1", 0, "");
  } catch (const Error& error) {
    GTEST_SKIP() << "no IPv6 loopback here: " << error.what();
  }
  EXPECT_EQ(server->address(), "[::1]:" + std::to_string(server->port()));
  StoreClient client(server->address(), "", 5s);
  client.set("k", "v");
  EXPECT_EQ(client.get("k"), "v");
}

// Raw requests, as a client other than StoreClient could send them.
class RawStore : public ::testing::Test {
 protected:
  // As StoreClient::wait_until_reachable's: a connection that fails at first is retried
  // (within a far deadline) rather than failing the call.
  std::unique_ptr<grpc::ClientContext> context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->AddMetadata("distgrad-token", kToken);
    context->set_wait_for_ready(true);
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return context;
  }

  StoreServer server_{"127.0.0.1", 0, kToken};
  std::shared_ptr<grpc::Channel> channel_ = grpc::CreateChannel(server_.address(), grpc::InsecureChannelCredentials());
  std::unique_ptr<wire::Store::Stub> stub_ = wire::Store::NewStub(channel_);
};

TEST_F(RawStore, ServerNeverWaitsLongerThanTheRequestSays) {
  wire::WaitRequest request;
  request.add_keys("absent");
  request.set_timeout_ms(200);
  wire::WaitResponse response;
  Clock::time_point start = Clock::now();
  const grpc::Status waited = stub_->Wait(context().get(), request, &response);  // the client's deadline is far
  ASSERT_TRUE(waited.ok()) << waited.error_code() << ": " << waited.error_message();
  EXPECT_THAT(response.missing(), ElementsAre("absent"));
  EXPECT_LT(elapsed_since(start), 200ms + 1500ms);

  wire::GetRequest get;
  get.set_key("absent");
  get.set_timeout_ms(-1000);
  wire::GetResponse value;
  start = Clock::now();
  grpc::Status status = stub_->Get(context().get(), get, &value);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr("key \"absent\" was not set"));
  EXPECT_LT(elapsed_since(start), 1s);
}

TEST_F(RawStore, GarbageRequestsAreRefusedWithoutHarm) {
  grpc::GenericStub generic(channel_);
  for (const char* method : {"/distgrad.rendezvous.wire.Store/Get", "/distgrad.rendezvous.wire.Store/Wait",
                             "/distgrad.rendezvous.wire.Store/Set", "/distgrad.rendezvous.wire.Store/NoSuchMethod"}) {
    for (const std::string& bytes :
         {std::string("\xff\xff\xff\xff\x0f garbage", 14), std::string("\x0a\x80", 2), std::string(1000, '\x0a')}) {
      grpc::Slice slice(bytes);
      grpc::ByteBuffer request(&slice, 1);
      grpc::ByteBuffer response;
      auto context = this->context();
      context->set_deadline(std::chrono::system_clock::now() + 5s);
      std::promise<grpc::Status> done;
      generic.UnaryCall(context.get(), method, grpc::StubOptions(), &request, &response,
                        [&](grpc::Status status) { done.set_value(std::move(status)); });
      grpc::Status status = done.get_future().get();
      EXPECT_FALSE(status.ok()) << method;
      EXPECT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << method;
    }
  }
  StoreClient client(server_.address(), kToken, 5s);
  client.set("still", "serving");
  EXPECT_EQ(client.get("still"), "serving");
}

TEST_F(RawStore, ManyKeysAndOddTimeoutsAreAnswered) {
  wire::WaitRequest request;
  for (int i = 0; i < 100'000; ++i) request.add_keys("key/" + std::to_string(i));
  request.set_timeout_ms(0);
  wire::WaitResponse response;
  ASSERT_TRUE(stub_->Wait(context().get(), request, &response).ok());
  EXPECT_EQ(response.missing_size(), 100'000);
  request.set_timeout_ms(std::numeric_limits<int64_t>::min());
  ASSERT_TRUE(stub_->Wait(context().get(), request, &response).ok());
  wire::AddRequest add;
  add.set_key("n");
  add.set_amount(std::numeric_limits<int64_t>::min());
  wire::AddResponse sum;
  ASSERT_TRUE(stub_->Add(context().get(), add, &sum).ok());
  EXPECT_EQ(sum.value(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(stub_->Add(context().get(), add, &sum).error_code(), grpc::StatusCode::OUT_OF_RANGE);
}

TEST_F(RawStore, AbandonedWaitsEndWithTheirClients) {
  // Gets that would wait an hour, cut short by their clients' deadlines: the server lets go of
  // each when its client goes.
  wire::GetRequest request;
  request.set_key("late");
  request.set_timeout_ms(3'600'000);
  for (int i = 0; i < 10; ++i) {
    auto context = this->context();
    context->set_deadline(std::chrono::system_clock::now() + 100ms);
    wire::GetResponse response;
    EXPECT_EQ(stub_->Get(context.get(), request, &response).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  const Clock::time_point deadline = Clock::now() + 5s;
  while (server_.num_waiting() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server_.num_waiting(), 0u);
  StoreClient client(server_.address(), kToken, 5s);
  client.set("late", "now");
  EXPECT_EQ(client.get("late"), "now");
}

TEST(StoreClient, RejectsNegativeTimeouts) {
  EXPECT_ERROR_CONTAINS(StoreClient("127.0.0.1:1", kToken, -1ms), "timeout must not be negative");
  StoreClient client("127.0.0.1:1", kToken, 1s);
  EXPECT_ERROR_CONTAINS(client.get("k", -5ms), "get: the timeout must not be negative, got -5 ms");
  EXPECT_ERROR_CONTAINS(client.wait_for({"k"}, -5ms), "the timeout must not be negative");
}

TEST(StoreClient, IsMovable) {
  LoopbackStore store;
  StoreClient moved = std::move(store.client);
  moved.set("k", "v");
  StoreClient assigned("127.0.0.1:1", "", 1s);
  assigned = std::move(moved);
  EXPECT_EQ(assigned.get("k"), "v");
}

// -------------------------------------------------------------------------------------------
// Four processes rendezvous through one server. Each child is this test binary, started with
// fork() and exec'ed into the disabled test below (gRPC's threads do not survive a bare fork),
// with the environment a launcher would give it.

std::string this_executable() {
  std::string path(4096, '\0');
  ssize_t length = ::readlink("/proc/self/exe", path.data(), path.size());
  if (length <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
  path.resize(length);
  return path;
}

// The child: publish "rank/{rank}", wait for every rank, check their values.
TEST(StoreMultiProcess, DISABLED_Child) {
  const WorldInfo& world = world_info();
  const char* token = std::getenv("DISTGRAD_TOKEN");
  ASSERT_NE(token, nullptr);
  StoreClient store(world.master_addr + ":" + std::to_string(world.master_port), token, 30s);
  store.wait_until_reachable(30s);
  store.set("rank/" + std::to_string(world.rank), worker_name(world.rank, world.world_size));
  store.add("arrived", 1);
  std::vector<std::string> keys;
  for (int rank = 0; rank < world.world_size; ++rank) keys.push_back("rank/" + std::to_string(rank));
  store.wait(keys);
  for (int rank = 0; rank < world.world_size; ++rank) {
    EXPECT_EQ(store.get(keys[rank]), worker_name(rank, world.world_size));
  }
}

TEST(StoreMultiProcess, FourProcessesRendezvous) {
  constexpr int kWorld = 4;
  StoreServer server("127.0.0.1", 0, kToken);
  std::string executable = this_executable();
  std::vector<std::string> arguments = {executable, "--gtest_filter=StoreMultiProcess.DISABLED_Child",
                                        "--gtest_also_run_disabled_tests", "--gtest_brief=1"};
  std::vector<pid_t> children;
  for (int rank = 0; rank < kWorld; ++rank) {
    // Everything the child needs is built before fork(): after it, only exec or _exit.
    std::vector<std::string> environment;
    for (char** variable = environ; *variable != nullptr; ++variable) {
      std::string_view entry(*variable);
      bool ours = false;
      for (std::string_view name : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                                    "MASTER_PORT=", "DISTGRAD_TOKEN=", "GTEST_"}) {
        ours = ours || entry.substr(0, name.size()) == name;
      }
      if (!ours) environment.emplace_back(entry);
    }
    for (std::string setting :
         {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(kWorld), std::string("MASTER_ADDR=127.0.0.1"),
          "MASTER_PORT=" + std::to_string(server.port()), std::string("DISTGRAD_TOKEN=") + kToken}) {
      environment.push_back(std::move(setting));
    }
    std::vector<char*> argv, envp;
    for (std::string& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    for (std::string& setting : environment) envp.push_back(setting.data());
    envp.push_back(nullptr);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed: " << std::strerror(errno);
    if (pid == 0) {
      ::execve(executable.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    children.push_back(pid);
  }

  // Reap the children within a deadline; kill whatever is left after it (never hang).
  Clock::time_point deadline = Clock::now() + 60s;
  std::vector<int> statuses(kWorld, -1);
  size_t running = children.size();
  while (running > 0 && Clock::now() < deadline) {
    for (int rank = 0; rank < kWorld; ++rank) {
      if (statuses[rank] != -1) continue;
      int status = 0;
      if (::waitpid(children[rank], &status, WNOHANG) == children[rank]) {
        statuses[rank] = status;
        --running;
      }
    }
    std::this_thread::sleep_for(20ms);
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    if (statuses[rank] != -1) continue;
    ::kill(children[rank], SIGKILL);
    ::waitpid(children[rank], &statuses[rank], 0);
    ADD_FAILURE() << "child " << rank << " did not finish within 60 s and was killed";
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_TRUE(WIFEXITED(statuses[rank]) && WEXITSTATUS(statuses[rank]) == 0)
        << "child " << rank << " ended with status " << statuses[rank];
  }
  StoreClient client(server.address(), kToken, 5s);
  EXPECT_EQ(client.get("arrived"), std::to_string(kWorld));
  EXPECT_EQ(client.num_keys(), kWorld + 1);
}

// -------------------------------------------------------------------------------------------
// Network helpers.

TEST(NetUtil, PickFreePortGivesABindablePort) {
  int port = pick_free_port();
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
  StoreServer server("127.0.0.1", port, kToken);
  EXPECT_EQ(server.port(), port);
  EXPECT_ERROR_CONTAINS(pick_free_port("no-such-host.invalid"),
                        "pick_free_port: cannot resolve host \"no-such-host.invalid\"");
}

TEST(NetUtil, RecognisesLoopbackHosts) {
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(is_loopback_host(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "10.0.0.1", "::", "node01", "", "128.0.0.1", "::ffff:10.0.0.1"}) {
    EXPECT_FALSE(is_loopback_host(host)) << host;
  }
}

TEST(NetUtil, PortIsFreeUnlessSomethingListens) {
  StoreServer server("127.0.0.1", 0, kToken);
  EXPECT_FALSE(port_is_free("127.0.0.1", server.port()));
  server.shutdown();
  const int free_port = pick_free_port();
  EXPECT_TRUE(port_is_free("127.0.0.1", free_port));
  EXPECT_ERROR_CONTAINS(port_is_free("no-such-host.invalid", 80), "port_is_free: cannot resolve host");
}

TEST(NetUtil, SplitsHostAndPort) {
  EXPECT_EQ(split_host_port("127.0.0.1:80").host, "127.0.0.1");
  EXPECT_EQ(split_host_port("127.0.0.1:80").port, 80);
  EXPECT_EQ(split_host_port("node01:29500").host, "node01");
  EXPECT_EQ(split_host_port("[::1]:2379").host, "::1");
  EXPECT_EQ(split_host_port("[::1]:2379").port, 2379);
  EXPECT_EQ(split_host_port(join_host_port("::1", 7)).host, "::1");
  for (const char* bad : {"node01", "node01:", "node01:http", "node01:0", "node01:65536"}) {
    EXPECT_ERROR_CONTAINS(split_host_port(bad), "does not end in a port (host:port, port 1-65535)");
  }
}

TEST(NetUtil, JoinsHostAndPort) {
  EXPECT_EQ(join_host_port("127.0.0.1", 80), "127.0.0.1:80");
  EXPECT_EQ(join_host_port("node01", 29500), "node01:29500");
  EXPECT_EQ(join_host_port("::1", 80), "[::1]:80");
  EXPECT_EQ(join_host_port("[::1]", 80), "[::1]:80");
}

}  // namespace
}  // namespace distgrad::rendezvous
