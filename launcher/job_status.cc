#include "launcher/job_status.h"

#include <sstream>

namespace distgrad::launcher {

JobStatus::JobStatus(std::unique_ptr<rendezvous::StoreClient> store, std::string run_id, int nnodes)
    : store_(std::move(store)), run_id_(std::move(run_id)), nnodes_(nnodes) {}

std::string JobStatus::key(const std::string& what, int attempt) const {
  return "launcher/" + run_id_ + "/" + what + "/" + std::to_string(attempt);
}

void JobStatus::report_failure(int attempt, const WorkerExit& exit) {
  std::ostringstream record;
  record << exit.rank << ' ' << exit.pid << ' ' << exit.exit_code << ' ' << exit.signal << '\n' << exit.last_error_line;
  // The description first, then the count that announces it: a reader that sees the count finds
  // a description (the first node's, or a later one's).
  store_->compare_set(key("failure", attempt), "", record.str());
  store_->add(key("failures", attempt), 1);
}

std::optional<WorkerExit> JobStatus::failure(int attempt) {
  if (store_->add(key("failures", attempt), 0) == 0) return std::nullopt;
  std::istringstream record(store_->get(key("failure", attempt)));
  WorkerExit exit;
  record >> exit.rank >> exit.pid >> exit.exit_code >> exit.signal;
  record.ignore(1);
  std::getline(record, exit.last_error_line);
  return exit;
}

void JobStatus::report_finished(int attempt) { store_->add(key("finished", attempt), 1); }

bool JobStatus::all_finished(int attempt) { return store_->add(key("finished", attempt), 0) >= nnodes_; }

void JobStatus::report_leaving(int attempt) { store_->add(key("left", attempt), 1); }

bool JobStatus::all_left(int attempt) { return store_->add(key("left", attempt), 0) >= nnodes_; }

}  // namespace distgrad::launcher
