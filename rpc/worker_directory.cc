#include "rpc/worker_directory.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace distgrad::rpc {
namespace {

using Clock = std::chrono::steady_clock;

std::string seconds(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out << static_cast<double>(duration.count()) / 1000 << " s";
  return out.str();
}

// "1, 3, 7"
std::string join_ranks(const std::vector<int>& ranks) {
  std::string result;
  for (int rank : ranks) result += (result.empty() ? "" : ", ") + std::to_string(rank);
  return result;
}

bool starts_with(const std::string& line, std::string_view prefix) { return line.rfind(prefix, 0) == 0; }

}  // namespace

std::string WorkerEntry::encode() const {
  std::string entry = grpc_address + "\n" + host_identity;
  if (!shared_memory_card.empty()) entry += "\nshm " + shared_memory_card;
  if (!socket_name.empty()) entry += "\nsocket " + socket_name;
  if (tcp_port > 0) entry += "\ntcp " + std::to_string(tcp_port);
  return entry;
}

WorkerEntry WorkerEntry::decode(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  DISTGRAD_CHECK(lines.size() >= 2, "init_rpc: a worker's rendezvous entry has no host identity: '", text, "'");
  WorkerEntry entry;
  entry.grpc_address = lines[0];
  entry.host_identity = lines[1];
  for (size_t i = 2; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (starts_with(line, "shm ")) entry.shared_memory_card = line.substr(4);
    if (starts_with(line, "socket ")) entry.socket_name = line.substr(7);
    if (starts_with(line, "tcp ")) {
      try {
        entry.tcp_port = std::stoi(line.substr(4));
      } catch (const std::exception&) {
        DISTGRAD_FAIL("init_rpc: a worker's rendezvous entry has a malformed TCP port: '", line, "'");
      }
    }
  }
  return entry;
}

WorkerDirectory::WorkerDirectory(const rendezvous::WorldInfo& world, std::vector<std::string> names,
                                 std::chrono::milliseconds timeout)
    : world_(world), names_(std::move(names)), store_(rendezvous::JobStore::connect("init_rpc", timeout)) {}

void WorkerDirectory::publish(const WorkerEntry& entry) {
  store_->client().set(store_->key("rpc", "address/" + std::to_string(world_.rank)), entry.encode());
}

std::vector<WorkerEntry> WorkerDirectory::collect(std::chrono::milliseconds timeout) {
  const std::vector<std::string> keys = store_->rank_keys("rpc", "address");
  const std::vector<std::string> missing = store_->client().wait_for(keys, timeout);
  if (!missing.empty()) {
    DISTGRAD_FAIL("init_rpc: ", names_[world_.rank], " waited ", seconds(timeout),
                  " for workers to start, and these did not: ", join_ranks(missing_ranks("address", missing)), " (of ",
                  world_.world_size, ")");
  }
  std::vector<WorkerEntry> entries;
  for (const std::string& key : keys) entries.push_back(WorkerEntry::decode(store_->client().get(key)));
  return entries;
}

WorkerEntry WorkerDirectory::read_entry(int rank) {
  return WorkerEntry::decode(store_->client().get(store_->key("rpc", "address/" + std::to_string(rank))));
}

int64_t WorkerDirectory::claim_incarnation() {
  return store_->client().add(store_->key("rpc", "incarnation/" + std::to_string(world_.rank)), 1);
}

std::vector<int> WorkerDirectory::missing_ranks(const std::string& name,
                                                const std::vector<std::string>& missing) const {
  std::vector<int> ranks;
  const std::vector<std::string> keys = store_->rank_keys("rpc", name);
  for (int rank = 0; rank < world_.world_size; ++rank) {
    if (std::find(missing.begin(), missing.end(), keys[rank]) != missing.end()) ranks.push_back(rank);
  }
  return ranks;
}

// Note [Waiting without the lost]
// A map-reduce call that outlives a lost worker (partition/reissue.h) must not leave the job
// unable to end: barriers and a graceful shutdown wait for every worker but those recorded lost.
// The driver records (in the Store) the workers it lost before it arrives at a barrier or at
// shutdown. The other workers, which learn of a death only by the liveness check of a wait
// without a deadline, leave the verdict on a worker other than rank 0 to rank 0: until rank 0 has
// arrived they keep waiting; once it has, its record is there, and a missing worker not in it that
// exited fails the wait as before. Rank 0 (and anyone whose wait has a deadline) decides at once.
void WorkerDirectory::wait_for_everyone(const std::string& name, std::chrono::milliseconds timeout, const char* what,
                                        const std::function<void(int rank)>& check_alive,
                                        const std::vector<int>& skip) {
  store_->client().set(store_->key("rpc", name + "/" + std::to_string(world_.rank)), "1");
  const std::vector<std::string> every_rank = store_->rank_keys("rpc", name);
  std::vector<std::string> keys;  // of the ranks not skipped nor recorded lost
  for (int rank = 0; rank < world_.world_size; ++rank) {
    if (std::find(skip.begin(), skip.end(), rank) == skip.end()) keys.push_back(every_rank[rank]);
  }
  const auto start = Clock::now();
  for (;;) {
    const auto left = timeout.count() > 0
                          ? std::chrono::duration_cast<std::chrono::milliseconds>(timeout - (Clock::now() - start))
                          : std::chrono::milliseconds(1000);
    const std::vector<std::string> missing = store_->client().wait_for(
        keys, std::max(std::chrono::milliseconds(1), std::min(left, std::chrono::milliseconds(1000))));
    if (missing.empty()) return;
    std::vector<int> ranks = missing_ranks(name, missing);
    const std::vector<int> lost = recorded_lost();
    if (!lost.empty()) {
      for (int rank : lost) {
        keys.erase(std::remove(keys.begin(), keys.end(), every_rank[rank]), keys.end());
        ranks.erase(std::remove(ranks.begin(), ranks.end(), rank), ranks.end());
      }
      if (ranks.empty()) return;
    }
    if (timeout.count() > 0 && Clock::now() - start >= timeout) {
      DISTGRAD_FAIL(what, ": ", names_[world_.rank], " waited ", seconds(timeout), " and workers ", join_ranks(ranks),
                    " (of ", world_.world_size, ") did not arrive");
    }
    if (timeout.count() == 0) {  // no deadline: make sure the missing workers are still alive
      const bool rank_zero_arrived = std::find(ranks.begin(), ranks.end(), 0) == ranks.end();
      for (int rank : ranks) {
        if (world_.rank != 0 && rank != 0 && !rank_zero_arrived) continue;  // rank 0 gives the verdict
        check_alive(rank);
      }
    }
  }
}

void WorkerDirectory::record_lost(const std::vector<int>& ranks) {
  for (int rank : ranks) store_->client().set(store_->key("rpc", "lost/" + std::to_string(rank)), "1");
}

void WorkerDirectory::forget_lost(int rank) {
  store_->client().delete_key(store_->key("rpc", "lost/" + std::to_string(rank)));
}

std::vector<int> WorkerDirectory::recorded_lost() {
  const std::vector<std::string> keys = store_->rank_keys("rpc", "lost");
  const std::vector<std::string> absent = store_->client().wait_for(keys, std::chrono::milliseconds(1));
  std::vector<int> lost;
  for (int rank = 0; rank < world_.world_size; ++rank) {
    if (std::find(absent.begin(), absent.end(), keys[rank]) == absent.end()) lost.push_back(rank);
  }
  return lost;
}

void WorkerDirectory::leave() { store_->leave("rpc", std::chrono::seconds(30), recorded_lost()); }

}  // namespace distgrad::rpc
