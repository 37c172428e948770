#include "rendezvous/job_store.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "rendezvous/net_util.h"

namespace distgrad::rendezvous {
namespace {

std::mutex shared_store_mutex;
std::weak_ptr<JobStore> shared_store;  // guarded by shared_store_mutex

}  // namespace

std::shared_ptr<JobStore> JobStore::connect(std::string_view caller, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(shared_store_mutex);
  if (std::shared_ptr<JobStore> store = shared_store.lock()) return store;

  const WorldInfo& world = world_info();
  std::string token = getenv_or("DISTGRAD_TOKEN", "");
  DISTGRAD_CHECK(!token.empty() || is_loopback_host(world.master_addr) || getenv_or("DISTGRAD_INSECURE", "0") == "1",
                 caller, ": MASTER_ADDR=", world.master_addr,
                 " is not a loopback address and no job token is set; set DISTGRAD_TOKEN to the ",
                 "same secret on every worker (distgrad-run does), or DISTGRAD_INSECURE=1 on a trusted network");
  const bool under_torchrun = getenv_or("TORCHELASTIC_USE_AGENT_STORE", "") == "True";
  const int port = world.master_port + (under_torchrun ? 1 : 0);
  DISTGRAD_CHECK(port <= 65535, caller, ": under torchrun distgrad's Store takes MASTER_PORT + 1, but MASTER_PORT is ",
                 world.master_port);
  std::unique_ptr<StoreServer> server;
  if (world.rank == 0 && getenv_or("DISTGRAD_USE_AGENT_STORE", "0") != "1") {
    server = std::make_unique<StoreServer>(world.master_addr, port, token);
  }
  std::shared_ptr<JobStore> store(
      new JobStore(world, std::move(token), join_host_port(world.master_addr, port), std::move(server), timeout));
  store->client_.wait_until_reachable(timeout);
  shared_store = store;
  return store;
}

JobStore::JobStore(const WorldInfo& world, std::string token, std::string store_address,
                   std::unique_ptr<StoreServer> server, std::chrono::milliseconds timeout)
    : world_(world),
      token_(std::move(token)),
      run_prefix_(getenv_or("DISTGRAD_RUN_ID", getenv_or("TORCHELASTIC_RUN_ID", "none")) + "/" +
                  getenv_or("DISTGRAD_RESTART_COUNT", getenv_or("TORCHELASTIC_RESTART_COUNT", "0")) + "/"),
      server_(std::move(server)),
      client_(std::move(store_address), token_, timeout) {}

JobStore::~JobStore() = default;

std::string JobStore::key(std::string_view scope, std::string_view name) const {
  return std::string(scope) + "/" + run_prefix_ + std::string(name);
}

std::vector<std::string> JobStore::rank_keys(std::string_view scope, std::string_view name) const {
  std::vector<std::string> keys;
  keys.reserve(world_.world_size);
  for (int rank = 0; rank < world_.world_size; ++rank)
    keys.push_back(key(scope, std::string(name) + "/" + std::to_string(rank)));
  return keys;
}

void JobStore::leave(std::string_view scope, std::chrono::milliseconds timeout, const std::vector<int>& gone) {
  client_.set(key(scope, "left/" + std::to_string(world_.rank)), "1");
  if (!server_) return;
  const std::vector<std::string> left = rank_keys(scope, "left");
  std::vector<std::string> staying;
  for (int rank = 0; rank < world_.world_size; ++rank) {
    if (std::find(gone.begin(), gone.end(), rank) == gone.end()) staying.push_back(left[rank]);
  }
  client_.wait_for(staying, timeout);
}

}  // namespace distgrad::rendezvous
