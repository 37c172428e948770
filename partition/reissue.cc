#include "partition/reissue.h"

#include <algorithm>

#include "rpc/errors.h"
#include "rpc/rpc.h"

namespace distgrad::partition_detail {

CallSite upcoming_call_site() {
  return CallSite{dist_autograd::current_context(), dist_autograd::upcoming_call(), autograd::GradMode::is_enabled()};
}

std::optional<int> reissue_target(const std::exception_ptr& error, int worker, std::vector<int>& tried) {
  std::optional<rpc::StatusCode> code;
  std::string message;
  try {
    std::rethrow_exception(error);
  } catch (const rpc::RemoteError& remote) {
    code = remote.code();
    message = remote.what();
  } catch (...) {
    return std::nullopt;
  }
  if (code != rpc::StatusCode::kUnavailable && code != rpc::StatusCode::kDeadlineExceeded) return std::nullopt;
  if (code == rpc::StatusCode::kUnavailable) rpc::mark_worker_lost(worker);
  const int world_size = rpc::get_world_size();
  for (int step = 1; step < world_size; ++step) {
    const int candidate = (worker + step) % world_size;
    if (std::find(tried.begin(), tried.end(), candidate) != tried.end() || rpc::is_worker_lost(candidate)) continue;
    tried.push_back(candidate);
    std::fprintf(stderr, "[%s] %s; the partition goes to %s (RemoteCallOptions::reissue_lost_partitions)\n",
                 rpc::get_worker_name().c_str(), message.c_str(), rpc::get_worker_name(candidate).c_str());
    return candidate;
  }
  return std::nullopt;
}

}  // namespace distgrad::partition_detail
