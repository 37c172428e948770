#include "partition/reissue.h"

#include <algorithm>
#include <string>

#include "rpc/errors.h"
#include "rpc/rpc.h"

namespace distgrad::partition_detail {

CallSite upcoming_call_site() {
  return CallSite{dist_autograd::current_context(), dist_autograd::upcoming_call(), autograd::GradMode::is_enabled()};
}

bool still_wanted(const CallSite& site) {
  return site.context == nullptr || dist_autograd::ContextContainer::instance().find(site.context->id()) != nullptr;
}

namespace {

struct RemoteStatus {
  rpc::StatusCode code;
  std::string message;
};

// The code and message of the RemoteError in `error`; nullopt for any other error.
std::optional<RemoteStatus> remote_status(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const rpc::RemoteError& remote) {
    return RemoteStatus{remote.code(), remote.what()};
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

bool lost_or_late(const std::exception_ptr& error, int worker, int64_t sent_at_epoch) {
  const std::optional<RemoteStatus> status = remote_status(error);
  if (!status) return false;
  if (status->code == rpc::StatusCode::kUnavailable) {
    rpc::mark_worker_lost(worker, sent_at_epoch);
    return true;
  }
  return status->code == rpc::StatusCode::kDeadlineExceeded;
}

std::optional<int> next_live_worker(const std::exception_ptr& error, int worker, std::vector<int>& tried) {
  const int world_size = rpc::get_world_size();
  for (int step = 1; step < world_size; ++step) {
    const int candidate = (worker + step) % world_size;
    if (std::find(tried.begin(), tried.end(), candidate) != tried.end() || rpc::is_worker_lost(candidate)) continue;
    tried.push_back(candidate);
    const std::optional<RemoteStatus> status = remote_status(error);
    std::fprintf(stderr, "[%s] %s; the partition goes to %s (RemoteCallOptions::reissue_lost_partitions)\n",
                 rpc::get_worker_name().c_str(), status ? status->message.c_str() : "the call failed",
                 rpc::get_worker_name(candidate).c_str());
    return candidate;
  }
  return std::nullopt;
}

}  // namespace distgrad::partition_detail
