// Where an elastic rendezvous keeps its state (rendezvous/elastic_state.h): one value that every
// node's launcher reads and replaces only if nobody replaced it since, as torchrun's
// RendezvousBackend (get_state / set_state with a token). Two backends, as `--rdzv-backend`
// names them:
//   c10d  the distgrad Store (rendezvous/store.h) at --rdzv-endpoint, hosted by the launcher
//         on the host the endpoint names; the rendezvous ends with that launcher.
//   etcd  an etcd server's v3 API (gRPC) at --rdzv-endpoint; it outlives every node.
//
//   std::unique_ptr<StateBackend> backend = connect_etcd_backend("10.0.0.9:2379", "job7", timeout);
//   std::optional<StateBackend::Versioned> current = backend->load();
//   bool written = backend->replace(current ? &current->version : nullptr, new_state);
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/store.h"

namespace distgrad::rendezvous {

class StateBackend {
 public:
  // A stored state and the version it was read at.
  struct Versioned {
    std::string state;
    std::string version;
  };

  virtual ~StateBackend() = default;
  // "the Store at HOST:PORT" or "etcd at HOST:PORT", for messages.
  virtual std::string describe() const = 0;
  // The state, or nullopt when none was written yet. Throws distgrad::Error naming the backend
  // when it cannot be reached within its timeout.
  virtual std::optional<Versioned> load() = 0;
  // Writes `state` if the stored state is still at `version` (nullptr: none is stored yet);
  // returns whether it wrote.
  virtual bool replace(const std::string* version, const std::string& state) = 0;
};

// The state under key "elastic/<rdzv_id>/state" of the Store `store` connects to.
std::unique_ptr<StateBackend> store_backend(std::unique_ptr<StoreClient> store, const std::string& rdzv_id);

// The state under key "/distgrad/rendezvous/<rdzv_id>/state" of the etcd server at `endpoint`
// ("host:port", plain gRPC); every call is bounded by `timeout`.
std::unique_ptr<StateBackend> etcd_backend(const std::string& endpoint, const std::string& rdzv_id,
                                           std::chrono::milliseconds timeout);

}  // namespace distgrad::rendezvous
