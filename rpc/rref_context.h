// RRefContext: the RRefs of one agent (internal to rpc/; the protocol is Note [RRef lifetime] in
// rpc/rref.h).
//
// As an owner it keeps the values it owns, each with its forks (which worker holds each), and
// serves the builtin calls of the protocol: create, fetch, call a method, add a fork, delete a
// fork. As a user it makes ids, registers the forks it sends and releases the forks of the
// RRefStates that end. A thread checks that the workers holding forks of its values are alive.
// The running agent installs its context (current()); close() ends it: later releases do nothing
// and the values still owned are freed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "rpc/rref.h"

namespace distgrad::rpc::detail {

class RRefContext : public std::enable_shared_from_this<RRefContext> {
 public:
  struct Setup {
    int rank;
    std::vector<std::string> names;  // every worker's, by rank
    std::chrono::milliseconds holder_check_interval;
    // Whether `rank` has exited (its RPC threads no longer answer; a slow answer is no exit).
    std::function<bool(int rank)> exited;
    // The first local id of this process's RRefs: a worker that rejoined the world starts past
    // its earlier lives' (Note [Rejoining workers] in rpc/agent.cc).
    int64_t first_id = 0;
  };

  explicit RRefContext(Setup setup);
  ~RRefContext();  // close()s
  RRefContext(const RRefContext&) = delete;
  RRefContext& operator=(const RRefContext&) = delete;

  // The running agent's context, or null.
  static std::shared_ptr<RRefContext> current();
  static void install(std::shared_ptr<RRefContext> context);
  // Stops the holder checks, makes later sends and releases no-ops (waiting for the sends under
  // way) and frees the values still owned.
  void close();

  // Worker `rank` rejoined the world (a new process): the forks its earlier life held are
  // released, as those of a holder that exited.
  void forget_holder(int rank);

  int rank() const { return setup_.rank; }
  const std::string& name(int rank) const { return setup_.names.at(rank); }
  GloballyUniqueId new_id();

  // Owner: forks and values. The first mention of a value adds its creator's fork (its id).
  void add_fork(const RRefId& id, const ForkId& fork, int holder);
  // `creation_failed`: the creator's release after its creating call failed; a creation that
  // arrives later is then dropped.
  void remove_fork(const RRefId& id, const ForkId& fork, bool creation_failed);
  // The outcome of the creating call `producer` asked for by `creator`.
  void set_value(const RRefId& id, const std::string& producer, OwnedValue value);
  void set_error(const RRefId& id, const std::string& producer, StatusCode code, const std::string& message);
  // The value, once made (at most `timeout`; 0: no limit); throws StatusError when making it
  // failed, or when it is not (or no longer) here.
  OwnedValue wait_for_value(const RRefId& id, std::chrono::milliseconds timeout);

  // User: sends a call through the running agent (a failed future once closed).
  Future<Encoded> send(int to, OutgoingCall call, std::chrono::milliseconds timeout);
  // Registers a new fork of `rref` held by `holder` (at the owner, waiting for it) and returns it.
  ForkId fork_for(const RRefState& rref, int holder);
  // Releases the fork of an RRefState that ends (after its creation was acknowledged, for the
  // creator's). `creation` is the creating call's acknowledgement.
  void release(const RRefId& id, const ForkId& fork, int owner, const Future<void>& creation);
  void count_user_rref(int delta) { num_user_rrefs_ += delta; }

  RRefDebugInfo debug_info();

 private:
  struct Entry {
    bool created = false;
    std::optional<OwnedValue> value;  // once created without an error
    StatusCode error_code = StatusCode::kOk;
    std::string error;  // the creating call's, when it failed
    bool error_seen = false;
    std::string producer;
    std::map<ForkId, int> forks;  // fork -> the rank that holds it
  };

  Entry& entry_for(const RRefId& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Removes `id` when it has no fork left; returns what must be destroyed outside the lock.
  std::optional<Entry> erase_if_unheld(const RRefId& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void finished(std::vector<Entry> entries);  // logs errors nobody saw; destroys the values
  void check_holders();                       // the holder thread's loop
  // Releases the forks `holders` held (`why`: "exited", "rejoined"); unlocks `lock` meanwhile.
  void release_forks_of(const std::set<int>& holders, const char* why, std::unique_lock<std::mutex>& lock);
  void send_delete(const RRefId& id, const ForkId& fork, int owner, bool creation_failed);

  const Setup setup_;
  std::atomic<int64_t> next_id_;
  std::atomic<int64_t> num_user_rrefs_{0};

  std::mutex mutex_;                 // guards everything below
  std::condition_variable changed_;  // a value was made, the context closed, or a send ended
  std::map<RRefId, Entry> entries_ ABSL_GUARDED_BY(mutex_);
  std::set<RRefId> cancelled_ ABSL_GUARDED_BY(mutex_);  // creations whose creator gave up
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
  int sends_under_way_ ABSL_GUARDED_BY(mutex_) = 0;
  std::thread holder_checks_;
};

}  // namespace distgrad::rpc::detail
