// Tests of the elastic rendezvous' state backends against real servers: the distgrad Store on
// loopback, and Debian's etcd started by the test on loopback (skipped where etcd is not
// installed). Each must write a state only over the version it was read at.
#include "rendezvous/state_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "rendezvous/net_util.h"
#include "tests/core/test_util.h"

extern char** environ;

namespace distgrad::rendezvous {
namespace {

using namespace std::chrono_literals;

constexpr char kEtcd[] = "/usr/bin/etcd";

// The checks every backend passes: none stored, a first write, a write over a stale version.
void expect_versioned_replacement(StateBackend& backend) {
  EXPECT_FALSE(backend.load().has_value());
  ASSERT_TRUE(backend.replace(nullptr, "first"));
  EXPECT_FALSE(backend.replace(nullptr, "second"));  // one is stored now
  const std::optional<StateBackend::Versioned> first = backend.load();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->state, "first");
  ASSERT_TRUE(backend.replace(&first->version, "second"));
  EXPECT_FALSE(backend.replace(&first->version, "third"));  // another node wrote in between
  const std::optional<StateBackend::Versioned> second = backend.load();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->state, "second");
  EXPECT_NE(second->version, first->version);
}

TEST(StoreStateBackend, ReplacesOnlyTheVersionItRead) {
  StoreServer server("127.0.0.1", 0, "token");
  std::unique_ptr<StateBackend> backend =
      store_backend(std::make_unique<StoreClient>(server.address(), "token", 5s), "job1");
  EXPECT_EQ(backend->describe(), "the Store at " + server.address());
  expect_versioned_replacement(*backend);
  // Another job's state is another key.
  std::unique_ptr<StateBackend> other =
      store_backend(std::make_unique<StoreClient>(server.address(), "token", 5s), "job2");
  EXPECT_FALSE(other->load().has_value());
}

// etcd on a free loopback port with a data directory of its own; stopped and removed at the end.
class EtcdServer {
 public:
  EtcdServer() : data_dir_(std::filesystem::temp_directory_path() / ("etcd-test-" + std::to_string(getpid()))) {
    client_port_ = pick_free_port();
    const int peer_port = pick_free_port();
    const std::string client_url = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_port);
    std::vector<std::string> args = {kEtcd,
                                     "--data-dir=" + data_dir_.string(),
                                     "--listen-client-urls=" + client_url,
                                     "--advertise-client-urls=" + client_url,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=default=" + peer_url,
                                     "--log-level=error"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, kEtcd, nullptr, nullptr, argv.data(), environ) != 0) pid_ = 0;
  }
  ~EtcdServer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    std::filesystem::remove_all(data_dir_, ignored);
  }
  bool started() const { return pid_ > 0; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }

 private:
  std::filesystem::path data_dir_;
  int client_port_ = 0;
  pid_t pid_ = 0;
};

TEST(EtcdStateBackend, ReplacesOnlyTheVersionItRead) {
  if (access(kEtcd, X_OK) != 0) GTEST_SKIP() << "etcd is not installed (Debian's etcd-server)";
  EtcdServer etcd;
  ASSERT_TRUE(etcd.started());
  // Waits (gRPC's wait-for-ready) while etcd starts, within the timeout.
  std::unique_ptr<StateBackend> backend = etcd_backend(etcd.endpoint(), "job1", 20s);
  EXPECT_EQ(backend->describe(), "etcd at " + etcd.endpoint());
  expect_versioned_replacement(*backend);
  EXPECT_FALSE(etcd_backend(etcd.endpoint(), "job2", 5s)->load().has_value());
}

TEST(EtcdStateBackend, AnEtcdThatDoesNotAnswerIsAnErrorNamingItWithinTheTimeout) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(pick_free_port());
  std::unique_ptr<StateBackend> backend = etcd_backend(endpoint, "job1", 300ms);
  const auto start = std::chrono::steady_clock::now();
  const std::string named = "could not use etcd at " + endpoint;
  EXPECT_ERROR_CONTAINS(backend->load(), named.c_str());
  EXPECT_ERROR_CONTAINS(backend->replace(nullptr, "x"), "no answer within 300 ms");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

}  // namespace
}  // namespace distgrad::rendezvous
