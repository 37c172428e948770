#include "rendezvous/state_backend.h"

#include <grpcpp/grpcpp.h>

#include "core/error.h"
#include "proto/etcd.grpc.pb.h"

namespace distgrad::rendezvous {
namespace {

// The Store keeps no versions: the version of a state is the state itself, and an empty value
// stands for none (load() makes the key exist, empty, so that replace() can compare with it).
class StoreBackend final : public StateBackend {
 public:
  StoreBackend(std::unique_ptr<StoreClient> store, const std::string& rdzv_id)
      : store_(std::move(store)), key_("elastic/" + rdzv_id + "/state") {}

  std::string describe() const override { return "the Store at " + store_->address(); }

  std::optional<Versioned> load() override {
    std::string state = store_->compare_set(key_, "", "");
    if (state.empty()) return std::nullopt;
    return Versioned{state, state};
  }

  bool replace(const std::string* version, const std::string& state) override {
    return store_->compare_set(key_, version != nullptr ? *version : "", state) == state;
  }

 private:
  std::unique_ptr<StoreClient> store_;
  const std::string key_;
};

// etcd's version of a key is its mod_revision; "none stored" is create_revision 0.
class EtcdBackend final : public StateBackend {
 public:
  EtcdBackend(const std::string& endpoint, const std::string& rdzv_id, std::chrono::milliseconds timeout)
      : endpoint_(endpoint),
        key_("/distgrad/rendezvous/" + rdzv_id + "/state"),
        timeout_(timeout),
        stub_(etcdserverpb::KV::NewStub(grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()))) {}

  std::string describe() const override { return "etcd at " + endpoint_; }

  std::optional<Versioned> load() override {
    etcdserverpb::RangeRequest request;
    request.set_key(key_);
    etcdserverpb::RangeResponse response;
    grpc::ClientContext context;
    prepare(context);
    check(stub_->Range(&context, request, &response), "reading");
    if (response.kvs().empty()) return std::nullopt;
    const etcdserverpb::KeyValue& stored = response.kvs(0);
    return Versioned{stored.value(), std::to_string(stored.mod_revision())};
  }

  bool replace(const std::string* version, const std::string& state) override {
    etcdserverpb::TxnRequest request;
    etcdserverpb::Compare* compare = request.add_compare();
    compare->set_key(key_);
    compare->set_result(etcdserverpb::Compare::EQUAL);
    if (version != nullptr) {
      compare->set_target(etcdserverpb::Compare::MOD);
      compare->set_mod_revision(std::stoll(*version));
    } else {
      compare->set_target(etcdserverpb::Compare::CREATE);
      compare->set_create_revision(0);
    }
    etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
    put->set_key(key_);
    put->set_value(state);
    etcdserverpb::TxnResponse response;
    grpc::ClientContext context;
    prepare(context);
    check(stub_->Txn(&context, request, &response), "replacing");
    return response.succeeded();
  }

 private:
  void prepare(grpc::ClientContext& context) const {
    context.set_deadline(std::chrono::system_clock::now() + timeout_);
    context.set_wait_for_ready(true);  // an etcd still starting is waited for, up to the deadline
  }

  void check(const grpc::Status& status, const char* what) const {
    DISTGRAD_CHECK(status.ok(), "the elastic rendezvous could not use etcd at ", endpoint_, " (", what, " key ", key_,
                   "): ",
                   status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                       ? "no answer within " + std::to_string(timeout_.count()) + " ms"
                       : status.error_message());
  }

  const std::string endpoint_;
  const std::string key_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<etcdserverpb::KV::Stub> stub_;
};

}  // namespace

std::unique_ptr<StateBackend> store_backend(std::unique_ptr<StoreClient> store, const std::string& rdzv_id) {
  return std::make_unique<StoreBackend>(std::move(store), rdzv_id);
}

std::unique_ptr<StateBackend> etcd_backend(const std::string& endpoint, const std::string& rdzv_id,
                                           std::chrono::milliseconds timeout) {
  return std::make_unique<EtcdBackend>(endpoint, rdzv_id, timeout);
}

}  // namespace distgrad::rendezvous
