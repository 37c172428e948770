// A worker's rendezvous entry (Note [Rendezvous entry] in rpc/worker_directory.h): round trips of
// what a worker publishes, and entries that do not parse.
#include "rpc/worker_directory.h"

#include "tests/core/test_util.h"

namespace distgrad::rpc {
namespace {

TEST(WorkerEntry, EveryPartRoundTrips) {
  WorkerEntry entry;
  entry.grpc_address = "10.0.0.7:41233";
  entry.host_identity = "boot pid:[1] net:[2] user 0";
  entry.shared_memory_card = "4242 17 99";
  entry.socket_name = "distgrad-4242";
  entry.tcp_port = 41234;
  const WorkerEntry back = WorkerEntry::decode(entry.encode());
  EXPECT_EQ(back.grpc_address, entry.grpc_address);
  EXPECT_EQ(back.host_identity, entry.host_identity);
  EXPECT_EQ(back.shared_memory_card, entry.shared_memory_card);
  EXPECT_EQ(back.socket_name, entry.socket_name);
  EXPECT_EQ(back.tcp_port, entry.tcp_port);
}

TEST(WorkerEntry, AGrpcOnlyWorkerPublishesItsAddressAlone) {
  WorkerEntry entry;
  entry.grpc_address = "127.0.0.1:5000";
  EXPECT_EQ(entry.encode(), "127.0.0.1:5000\n-");
  const WorkerEntry back = WorkerEntry::decode(entry.encode());
  EXPECT_EQ(back.host_identity, "-");
  EXPECT_TRUE(back.shared_memory_card.empty() && back.socket_name.empty());
  EXPECT_EQ(back.tcp_port, 0);
}

TEST(WorkerEntry, EntriesThatDoNotParseAreErrorsQuotingThem) {
  EXPECT_ERROR_CONTAINS(WorkerEntry::decode("127.0.0.1:5000"), "has no host identity: '127.0.0.1:5000'");
  EXPECT_ERROR_CONTAINS(WorkerEntry::decode("127.0.0.1:5000\n-\ntcp port"), "malformed TCP port: 'tcp port'");
}

}  // namespace
}  // namespace distgrad::rpc
