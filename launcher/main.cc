// distgrad-run: starts the workers of one node of a job, as torchrun does (launcher/options.h
// for the command line, launcher/worker_group.h for what happens to the workers). Node rank 0
// hosts the rendezvous Store, which outlives worker restarts; an elastic job runs
// launcher/elastic_agent.h instead. Exit code: 0 when every worker
// succeeded; the first failure's code (128 + signal for a signal) otherwise; 2 for a bad
// command line; 128 + the signal when the launcher was interrupted.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "core/cuda.h"
#include "core/error.h"
#include "launcher/elastic_agent.h"
#include "launcher/job_status.h"
#include "launcher/options.h"
#include "launcher/worker_env.h"
#include "launcher/worker_group.h"
#include "rendezvous/net_util.h"
#include "rendezvous/state_backend.h"
#include "rendezvous/store.h"
#include "rendezvous/world.h"
#include "trace/merge.h"

namespace dl = distgrad::launcher;

namespace {

// The job's secret: DISTGRAD_TOKEN when set (every node of a multi-node job must share it),
// else a fresh random one for this single-node job.
std::string job_token(const dl::LaunchOptions& options) {
  if (std::optional<std::string> token = distgrad::rendezvous::process_environment("DISTGRAD_TOKEN");
      token && !token->empty()) {
    return *token;
  }
  DISTGRAD_CHECK(!options.elastic() || distgrad::rendezvous::is_loopback_host(
                                           distgrad::rendezvous::split_host_port(options.rdzv_endpoint).host),
                 "distgrad-run: an elastic job whose rendezvous is not on loopback (", options.rdzv_endpoint,
                 ") needs DISTGRAD_TOKEN set to the same secret on every node (e.g. from openssl rand -hex 16)");
  if (options.elastic()) return "";  // loopback only: the Stores then take no token
  DISTGRAD_CHECK(options.nnodes == 1, "distgrad-run: a job of ", options.nnodes,
                 " nodes needs DISTGRAD_TOKEN set to the same secret on every node (e.g. from openssl rand -hex 16)");
  std::random_device random;
  std::ostringstream token;
  for (int i = 0; i < 4; ++i) token << std::hex << std::setw(8) << std::setfill('0') << random();
  return token.str();
}

// Removes the trace files an earlier job left in `directory`, so that the merge sees this job's only.
void clear_trace_directory(const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  DISTGRAD_CHECK(!error, "distgrad-run: --trace ", directory, ": cannot create the directory: ", error.message());
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if ((name.starts_with("trace-") && name.ends_with(".jsonl")) || name == "trace.json" || name == "stats.json") {
      std::filesystem::remove(entry.path());
    }
  }
}

// Merges the job's trace once every worker has ended (their files complete): rank 0 printed the
// statistics at its graceful shutdown; a job that failed never got there, so they are printed here.
void merge_trace(const std::string& directory, bool print_statistics) {
  try {
    const distgrad::trace::MergedTrace merged = distgrad::trace::merge_trace_directory(directory);
    distgrad::trace::write_merged_trace(merged, directory);
    if (print_statistics) std::fputs(distgrad::trace::merged_summary(merged).c_str(), stderr);
    std::fprintf(stderr,
                 "distgrad-run: timeline %s/trace.json (Perfetto UI, chrome://tracing), statistics %s/stats.json\n",
                 directory.c_str(), directory.c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "distgrad-run: could not merge the trace in %s: %s\n", directory.c_str(), error.what());
  }
}

// Runs this node's part of an elastic job (launcher/elastic_agent.h) with `group` resolved.
int launch_elastic(const dl::LaunchOptions& options, const dl::GroupInfo& group) {
  DISTGRAD_CHECK(!options.trace_dir,
                 "distgrad-run: --trace is not supported with an elastic rendezvous (--rdzv-backend ",
                 options.rdzv_backend, "): the nodes of the last round would each hold a part of the trace");
  const auto [endpoint_host, endpoint_port] = distgrad::rendezvous::split_host_port(options.rdzv_endpoint);
  const std::string local_addr =
      options.local_addr.value_or(distgrad::rendezvous::local_address_towards(endpoint_host, endpoint_port));
  // A backend call may take as long as a node may stay silent (5 s at least); reaching a c10d
  // Store that another node's launcher has yet to start may take the join timeout.
  const auto timeout = std::max<std::chrono::milliseconds>(options.rdzv_conf.silence_limit(), std::chrono::seconds(5));
  std::unique_ptr<distgrad::rendezvous::StoreServer> rendezvous_store;
  std::unique_ptr<distgrad::rendezvous::StateBackend> backend;
  if (options.rdzv_backend == "etcd") {
    backend = distgrad::rendezvous::etcd_backend(options.rdzv_endpoint, options.run_id, timeout);
  } else {
    // As torchrun's c10d backend: the launcher on the endpoint's host serves the Store there,
    // unless another launcher on that host already does (the port is taken).
    if ((distgrad::rendezvous::is_loopback_host(endpoint_host) || endpoint_host == local_addr) &&
        distgrad::rendezvous::port_is_free(endpoint_host, endpoint_port)) {
      try {
        rendezvous_store =
            std::make_unique<distgrad::rendezvous::StoreServer>(endpoint_host, endpoint_port, group.token);
      } catch (const distgrad::Error&) {  // another launcher on this host bound it since: it serves
      }
    }
    auto client = std::make_unique<distgrad::rendezvous::StoreClient>(options.rdzv_endpoint, group.token, timeout);
    client->wait_until_reachable(options.rdzv_conf.join_timeout);
    backend = distgrad::rendezvous::store_backend(std::move(client), options.run_id);
  }
  return dl::ElasticAgent(options, group, std::move(backend), rendezvous_store != nullptr, local_addr).run();
}

int launch(const dl::LaunchOptions& options) {
  dl::GroupInfo group;
  group.nproc_per_node = dl::workers_per_node(
      options.nproc_per_node, static_cast<int>(std::thread::hardware_concurrency()), distgrad::cuda::device_count());
  group.token = job_token(options);
  if (options.line_buffered) {
    group.line_buffer_library = dl::find_line_buffer_library();
    if (group.line_buffer_library.empty()) {
      std::fprintf(stderr,
                   "distgrad-run: warning: coreutils' libstdbuf.so was not found, so a worker's stdout stays "
                   "block-buffered unless the program sets line buffering itself (Python programs get "
                   "PYTHONUNBUFFERED=1); --no-line-buffered silences this\n");
    }
  }
  if (options.elastic()) return launch_elastic(options, group);
  group.master_port = options.master_port;
  std::unique_ptr<distgrad::rendezvous::StoreServer> store;
  if (options.node_rank == 0) {
    store = std::make_unique<distgrad::rendezvous::StoreServer>(
        options.master_addr, options.standalone ? 0 : options.master_port, group.token);
    group.master_port = store->port();
  }
  // Every node's launcher, node 0's included, talks to the Store on node 0 about the job.
  std::unique_ptr<dl::JobStatus> job;
  if (options.nnodes > 1) {
    auto client = std::make_unique<distgrad::rendezvous::StoreClient>(
        options.master_addr + ":" + std::to_string(group.master_port), group.token, std::chrono::seconds(300));
    client->wait_until_reachable(std::chrono::seconds(300));
    job = std::make_unique<dl::JobStatus>(std::move(client), options.run_id, options.nnodes);
  }
  // Node 0 owns the trace directory (shared by the nodes, or node 0's own; see docs/tracing.md).
  const bool owns_trace = options.trace_dir && options.node_rank == 0;
  if (owns_trace) clear_trace_directory(*options.trace_dir);
  const dl::GroupResult result = dl::WorkerGroup(options, group, job.get()).run();
  if (result.failure) {
    std::fprintf(stderr, "distgrad-run: %s%s\n", result.failure->describe().c_str(),
                 result.restarts > 0 ? (" (after " + std::to_string(result.restarts) + " restarts)").c_str() : "");
  }
  if (owns_trace) merge_trace(*options.trace_dir, /*print_statistics=*/result.failure.has_value());
  return result.exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a closed console must not kill the launcher and orphan the workers
  dl::LaunchOptions options;
  try {
    options = dl::parse_launch_options(std::vector<std::string>(argv + 1, argv + argc),
                                       &distgrad::rendezvous::process_environment);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\nusage: distgrad-run [options] program [args...] (distgrad-run --help)\n", error.what());
    return 2;
  }
  if (options.help) {
    std::fputs(dl::launch_usage().c_str(), stdout);
    return 0;
  }
  try {
    return launch(options);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
