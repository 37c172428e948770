#include "rpc/agent.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "core/cuda.h"
#include "rendezvous/credentials.h"
#include "rendezvous/net_util.h"
#include "rpc/call_client.h"
#include "rpc/call_server.h"
#include "rpc/executor.h"
#include "rpc/interceptor_chain.h"
#include "rpc/rref_context.h"
#include "rpc/tensor_paths.h"
#include "rpc/worker_directory.h"
#include "trace/trace.h"

namespace distgrad::rpc {
namespace {

// RpcOptions::keep_freed_memory.
void keep_freed_memory() {
  const char* tunables_set = std::getenv("GLIBC_TUNABLES");
  const std::string_view tunables = tunables_set != nullptr ? tunables_set : "";
  if (tunables.find("mmap_threshold") == std::string_view::npos &&
      tunables.find("trim_threshold") == std::string_view::npos) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  }
  if (tunables.find("arena_max") == std::string_view::npos && std::getenv("MALLOC_ARENA_MAX") == nullptr) {
    mallopt(M_ARENA_MAX, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
}

// Sets `value` from a 0/1 switch of the environment, when set.
void read_switch(const char* name, bool* value) {
  if (std::optional<bool> on = rendezvous::getenv_switch(name, "init_rpc")) *value = *on;
}

// The options with the fast paths' variables applied (RpcOptions, "The environment overrides").
RpcOptions with_environment(RpcOptions options) {
  bool grpc_only = false;
  read_switch("DISTGRAD_GRPC_ONLY", &grpc_only);
  if (grpc_only) options.same_host = options.shared_memory = options.socket_calls = options.loopback = false;
  read_switch("DISTGRAD_SAME_HOST", &options.same_host);
  read_switch("DISTGRAD_SHM", &options.shared_memory);
  read_switch("DISTGRAD_SOCKET_CALLS", &options.socket_calls);
  read_switch("DISTGRAD_SOCKET_OWN_READS", &options.socket_own_reads);
  read_switch("DISTGRAD_LOOPBACK", &options.loopback);
  if (!options.same_host) options.shared_memory = options.loopback = false;
  if (!options.socket_calls) options.loopback = false;
  if (std::optional<uint64_t> bytes = rendezvous::getenv_bytes("DISTGRAD_SHM_THRESHOLD", "init_rpc")) {
    options.shared_memory_threshold = *bytes;
  }
  if (std::optional<uint64_t> bytes = rendezvous::getenv_bytes(rendezvous::kMaxMessageBytesVariable, "init_rpc")) {
    options.max_message_bytes = *bytes;
  }
  return options;
}

// The options with a map for calls to `world`'s own worker, unless they name one: each CUDA
// device to itself, so that a call to this process keeps its tensors where they are.
RpcOptions with_own_device_map(RpcOptions options, const rendezvous::WorldInfo& world) {
  std::vector<std::pair<Device, Device>> identity;
  for (int index = 0; index < cuda::device_count(); ++index) {
    identity.emplace_back(Device::cuda(index), Device::cuda(index));
  }
  options.device_maps.try_emplace(rendezvous::worker_name(world.rank, world.world_size), std::move(identity));
  return options;
}

// Where to call the worker that published `entry` (Note [Rendezvous entry] in
// rpc/worker_directory.h): its Unix call socket when it is on this host, its TCP one when not,
// as far as this worker's own call sockets (`unix`, `tcp`) are on; else gRPC alone.
PeerAddress peer_address(const WorkerEntry& entry, bool same_host, bool unix, bool tcp) {
  PeerAddress address{entry.grpc_address, "", false};
  if (same_host && unix && !entry.socket_name.empty()) {
    address.socket = "unix:" + entry.socket_name;
    address.socket_takes_any_frame = true;
  } else if (!same_host && tcp && entry.tcp_port > 0) {
    address.socket =
        "tcp:" + entry.grpc_address.substr(0, entry.grpc_address.rfind(':')) + ":" + std::to_string(entry.tcp_port);
  }
  return address;
}

}  // namespace

// The agent's parts, each with one job: the rendezvous (WorkerDirectory), the serving side
// (CallServer), the calling side (CallClient), the tensors' paths and the interceptors they
// share; Impl itself is the lifecycle that starts and stops them in order.
struct Agent::Impl {
  explicit Impl(RpcOptions options)
      : options(with_own_device_map(with_environment(std::move(options)), rendezvous::world_info())),
        world(rendezvous::world_info()),
        token(rendezvous::getenv_or("DISTGRAD_TOKEN", "")),
        paths(this->options),
        interceptors(this->options.interceptors) {
    for (int rank = 0; rank < world.world_size; ++rank) {
      names.push_back(rendezvous::worker_name(rank, world.world_size));
    }
    read_switch("DISTGRAD_REJOIN", &rejoining);
  }

  void start();
  void stop();
  // Where to call worker `rank`, which published `entry`; links its shared memory when it is on
  // this host (Note [Rendezvous entry] in rpc/worker_directory.h).
  PeerAddress link(int rank, const WorkerEntry& entry);
  // Fails naming `rank` when it has exited or does not answer within liveness_timeout (the waits
  // of a graceful shutdown without a deadline).
  void check_alive(int rank, const char* what);

  const RpcOptions options;
  const rendezvous::WorldInfo world;
  const std::string token;
  const rendezvous::TransportCredentials& credentials = rendezvous::transport_credentials();
  std::vector<std::string> names;  // every worker's, by rank
  TensorPaths paths;
  const InterceptorChain interceptors;
  std::unique_ptr<WorkerDirectory> directory;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<CallServer> server;
  std::unique_ptr<CallClient> client;
  std::shared_ptr<detail::RRefContext> rrefs;  // the RRefs' protocol (rpc/rref_context.h)
  int barrier_generation = 0;
  bool stopped = false;
  std::string host_identity;  // SharedMemory::host_identity()
  bool rejoining = false;     // DISTGRAD_REJOIN=1 (Note [Rejoining workers])
  int64_t incarnation = 0;    // this process's life; set by start()

  // Guards the membership and the Store's record of the lost (written under it, so that a
  // rejoined worker's record is not written back after take_back cleared it).
  mutable absl::Mutex membership_mutex;
  std::set<int> lost ABSL_GUARDED_BY(membership_mutex);  // workers found lost (rpc::mark_worker_lost)
  int64_t epoch ABSL_GUARDED_BY(membership_mutex) = 0;
  std::map<int, int64_t> rejoined_at ABSL_GUARDED_BY(membership_mutex);     // rank -> epoch of its rejoin
  std::map<int, int64_t> incarnation_of ABSL_GUARDED_BY(membership_mutex);  // rank -> its latest life
  std::vector<std::function<void(const MembershipChange&)>> callbacks ABSL_GUARDED_BY(membership_mutex);

  // Records `change` (epoch bumped by the caller) and runs the callbacks, outside the lock.
  void announce(MembershipChange change) ABSL_LOCKS_EXCLUDED(membership_mutex);
  // The ranks that rejoined since this process started: its barriers do not wait for them.
  std::vector<int> rejoined_ranks() const;
};

// Note [Rejoining workers]
// A worker other than rank 0 that was lost can come back into the running world as a new process
// (the launcher starts it again with DISTGRAD_REJOIN=1, the same DISTGRAD_RUN_ID and
// DISTGRAD_RESTART_COUNT, so that it reads the survivors' Store keys): without the others
// restarting. In start() it claims its life (incarnation k: a Store counter per rank), publishes
// its new entry over the old one and reads everyone's. Before it takes calls, init_rpc sends
// every other worker "__distgrad.rejoined" (rpc.cc): each reads the new entry, points its calls
// (CallClient::replace_peer) and shared-memory link (Links::add_peer) at the new process,
// releases the RRef forks the old life held, clears its lost mark and runs its membership
// callbacks (kRejoined); its partitioners use the worker from their next call. A call to the old
// life that fails after that is not taken as the new one's loss (mark_lost's epoch). Rank 0 must
// answer (else init_rpc fails); another worker that does not is marked lost by the rejoined one,
// which also takes over everyone's lost marks, then deletes its own record of being lost from the
// Store. Ids it makes (RRefs, distributed autograd contexts and messages) carry its life, so none
// repeats an earlier life's. It skips the start barriers (auto_init_rpc) and cannot take part in
// barriers, whose counts it missed (the others' barriers do not wait for it); it takes part in
// the graceful shutdown as any worker.

void Agent::Impl::start() {
  for (const std::string& name : FunctionRegistry::instance().duplicate_names()) {
    DISTGRAD_FAIL("init_rpc: the function name '", name, "' is registered twice (DISTGRAD_REMOTE); use ",
                  "DISTGRAD_REMOTE_NAMED to give one of them another name");
  }
  for (const std::string& name : ClassRegistry::instance().duplicate_names()) {
    DISTGRAD_FAIL("init_rpc: the class or method name '", name, "' is registered twice (DISTGRAD_REMOTE_CLASS, ",
                  "DISTGRAD_REMOTE_METHOD): two classes of that name in different namespaces, or an overloaded method");
  }
  directory = std::make_unique<WorkerDirectory>(world, names, options.init_timeout);
  executor = std::make_unique<Executor>(options.num_worker_threads, options.max_worker_threads);
  server = std::make_unique<CallServer>(CallServer::Setup{world, names[world.rank], token, credentials,
                                                          options.init_timeout, options.socket_calls,
                                                          options.max_message_bytes, *executor, paths, interceptors});
  const bool loopback_only = token.empty() && rendezvous::getenv_or("DISTGRAD_INSECURE", "0") != "1";
  const std::string bind_host =
      loopback_only || rendezvous::is_loopback_host(world.master_addr) ? "127.0.0.1" : "0.0.0.0";
  const int port = server->start(bind_host);
  host_identity = SharedMemory::host_identity();
  if (rejoining) {
    DISTGRAD_CHECK(world.rank != 0, "init_rpc: rank 0 cannot rejoin a running world (DISTGRAD_REJOIN=1): the world ",
                   "ends with it");
    incarnation = directory->claim_incarnation();
  }
  WorkerEntry entry;
  entry.grpc_address =
      rendezvous::getenv_or("DISTGRAD_HOST", rendezvous::local_address_towards(world.master_addr, world.master_port)) +
      ":" + std::to_string(port);
  if (options.same_host) entry.host_identity = host_identity;
  if (paths.shared_memory()) entry.shared_memory_card = paths.shared_memory()->card();
  entry.socket_name = server->socket_name();
  entry.tcp_port = server->socket_tcp_port();
  directory->publish(entry);

  std::vector<PeerAddress> peers;
  const std::vector<WorkerEntry> entries = directory->collect(options.init_timeout);
  for (int rank = 0; rank < world.world_size; ++rank) peers.push_back(link(rank, entries[rank]));
  client = std::make_unique<CallClient>(
      CallClient::Setup{world, names, std::move(peers), token, credentials, options.device_maps,
                        options.socket_frame_limit, options.socket_own_reads, options.max_message_bytes, paths,
                        interceptors, options.loopback ? server->frame_handler() : nullptr});
  rrefs = std::make_shared<detail::RRefContext>(detail::RRefContext::Setup{
      world.rank, names, options.holder_check_interval,
      [this](int rank) {
        return client->ping(rank, options.liveness_timeout).error_code() == grpc::StatusCode::UNAVAILABLE;
      },
      incarnation << 40});
  detail::RRefContext::install(rrefs);
}

PeerAddress Agent::Impl::link(int rank, const WorkerEntry& entry) {
  const bool same_host = options.same_host && entry.host_identity == host_identity;
  if (same_host && paths.shared_memory() && !entry.shared_memory_card.empty()) {
    paths.shared_memory()->add_peer(rank, entry.shared_memory_card);
  }
  return peer_address(entry, same_host, !server->socket_name().empty(), server->socket_tcp_port() > 0);
}

void Agent::Impl::announce(MembershipChange change) {
  std::vector<std::function<void(const MembershipChange&)>> to_run;
  {
    absl::MutexLock lock(&membership_mutex);
    to_run = callbacks;
  }
  for (const auto& callback : to_run) callback(change);
}

std::vector<int> Agent::Impl::rejoined_ranks() const {
  absl::MutexLock lock(&membership_mutex);
  std::vector<int> ranks;
  for (const auto& [rank, epoch] : rejoined_at) ranks.push_back(rank);
  return ranks;
}

void Agent::Impl::check_alive(int rank, const char* what) {
  const grpc::Status status = client->ping(rank, options.liveness_timeout);
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    DISTGRAD_FAIL(what, ": ", names[rank], " exited before reaching it (", status.error_message(), ")");
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    DISTGRAD_FAIL(what, ": ", names[rank], " did not answer within ", options.liveness_timeout.count(),
                  " ms whether it is alive (stopped, frozen, or its host unreachable) while ", names[world.rank],
                  " waited for it to reach ", what, " (RpcOptions::liveness_timeout)");
  }
}

void Agent::Impl::stop() {
  if (stopped) return;
  stopped = true;
  if (server) server->stop_listening();
  // Cancelled calls complete at once; a callback still running user continuations gets a while.
  if (client && !client->cancel_calls(std::chrono::seconds(10))) {
    std::fprintf(stderr, "[%s] rpc: calls still in flight 10 s after they were cancelled at shutdown\n",
                 names[world.rank].c_str());
  }
  executor.reset();
  if (rrefs) {
    detail::RRefContext::install(nullptr);
    rrefs->close();
  }
  if (server) server->wait();
  if (client) client->close();
  directory.reset();
}

// ---------------------------------------------------------------------------------------------

Agent::Agent(RpcOptions options) {
  // Before the agent's first gRPC object starts gRPC's threads, each of which would otherwise
  // take a malloc arena of its own.
  if (options.keep_freed_memory) keep_freed_memory();
  impl_ = std::make_unique<Impl>(std::move(options));
}

Agent::~Agent() { impl_->stop(); }

void Agent::start() { impl_->start(); }

void Agent::open_calls() { impl_->server->open_calls(); }

const rendezvous::WorldInfo& Agent::world() const { return impl_->world; }
const RpcOptions& Agent::options() const { return impl_->options; }
const std::string& Agent::worker_name(int rank) const {
  DISTGRAD_CHECK(rank >= 0 && rank < impl_->world.world_size, "rpc: no worker ", rank, " in a world of ",
                 impl_->world.world_size);
  return impl_->names[rank];
}
rendezvous::StoreClient& Agent::store() { return impl_->directory->store(); }

bool Agent::runs_interceptor(std::string_view name) const { return impl_->interceptors.contains(name); }

TransportStats Agent::transport_stats() const {
  TransportStats stats;
  impl_->paths.add_to(stats);
  if (impl_->client) impl_->client->add_to(stats);
  return stats;
}

Future<Encoded> Agent::call_async(int to, OutgoingCall call, std::chrono::milliseconds timeout) {
  return impl_->client->call_async(to, std::move(call), timeout);
}

Encoded Agent::call_sync(int to, OutgoingCall call, std::chrono::milliseconds timeout) {
  return impl_->client->call_sync(to, std::move(call), timeout);
}

void Agent::barrier(std::chrono::milliseconds timeout) {
  DISTGRAD_CHECK(!impl_->rejoining, "barrier: ", impl_->names[impl_->world.rank],
                 " rejoined a running world, and barriers are for the workers that started together (it missed ",
                 "their counts; Note [Rejoining workers])");
  record_lost();  // Note [Waiting without the lost]
  impl_->directory->wait_for_everyone(
      "barrier/" + std::to_string(impl_->barrier_generation++), timeout, "barrier",
      [this](int rank) { impl_->check_alive(rank, "barrier"); }, impl_->rejoined_ranks());
}

void Agent::record_lost() {
  absl::MutexLock lock(&impl_->membership_mutex);
  impl_->directory->record_lost({impl_->lost.begin(), impl_->lost.end()});
}

void Agent::mark_lost(int rank, std::optional<int64_t> seen_at_epoch) {
  DISTGRAD_CHECK(rank >= 0 && rank < impl_->world.world_size, "mark_worker_lost: expected a rank of this world of ",
                 impl_->world.world_size, ", found ", rank);
  MembershipChange change{MembershipChange::Kind::kLost, rank, 0};
  {
    absl::MutexLock lock(&impl_->membership_mutex);
    auto rejoined = impl_->rejoined_at.find(rank);
    if (seen_at_epoch && rejoined != impl_->rejoined_at.end() && rejoined->second > *seen_at_epoch) return;
    if (!impl_->lost.insert(rank).second) return;
    change.epoch = ++impl_->epoch;
  }
  impl_->announce(change);
}

std::vector<int> Agent::lost_workers() const {
  absl::MutexLock lock(&impl_->membership_mutex);
  return {impl_->lost.begin(), impl_->lost.end()};
}

int64_t Agent::membership_epoch() const {
  absl::MutexLock lock(&impl_->membership_mutex);
  return impl_->epoch;
}

void Agent::on_membership_change(std::function<void(const MembershipChange&)> callback) {
  absl::MutexLock lock(&impl_->membership_mutex);
  impl_->callbacks.push_back(std::move(callback));
}

bool Agent::rejoined() const { return impl_->rejoining; }
int64_t Agent::incarnation() const { return impl_->incarnation; }

std::vector<int> Agent::take_back(int rank, int64_t incarnation) {
  DISTGRAD_CHECK(rank > 0 && rank < impl_->world.world_size && rank != impl_->world.rank,
                 "rejoin: a worker rank other than 0 and ", impl_->world.rank, " of this world of ",
                 impl_->world.world_size, " was expected, found ", rank);
  {
    absl::MutexLock lock(&impl_->membership_mutex);
    if (incarnation <= impl_->incarnation_of[rank]) return {impl_->lost.begin(), impl_->lost.end()};  // a repeat
  }
  impl_->client->replace_peer(rank, impl_->link(rank, impl_->directory->read_entry(rank)));
  impl_->rrefs->forget_holder(rank);
  MembershipChange change{MembershipChange::Kind::kRejoined, rank, 0};
  std::vector<int> lost;
  {
    absl::MutexLock lock(&impl_->membership_mutex);
    impl_->incarnation_of[rank] = incarnation;
    impl_->lost.erase(rank);
    change.epoch = ++impl_->epoch;
    impl_->rejoined_at[rank] = change.epoch;
    lost.assign(impl_->lost.begin(), impl_->lost.end());
  }
  impl_->announce(change);
  return lost;
}

void Agent::finish_rejoin() {
  absl::MutexLock lock(&impl_->membership_mutex);
  impl_->directory->forget_lost(impl_->world.rank);
}

void Agent::shutdown(bool graceful) {
  if (graceful && !impl_->stopped) {
    // Everyone arrives; then every worker's calls are answered before any server stops.
    auto check_alive = [this](int rank) { impl_->check_alive(rank, "shutdown"); };
    record_lost();  // Note [Waiting without the lost] in rpc/worker_directory.cc
    impl_->directory->wait_for_everyone("shutdown", impl_->options.shutdown_timeout, "shutdown", check_alive);
    impl_->client->wait_for_calls();
    trace::flush();  // for rank 0's merge after the next barrier (rpc/trace_clock.h)
    impl_->directory->wait_for_everyone("drained", impl_->options.shutdown_timeout, "shutdown", check_alive);
    // The Store's host leaves last, once everyone has read what they needed from it.
    impl_->directory->leave();
  }
  impl_->stop();
}

}  // namespace distgrad::rpc
