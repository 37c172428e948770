#include "launcher/options.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/error.h"

namespace distgrad::launcher {
namespace {

// One flag: its canonical name (underscores), whether it takes a value, and what it sets.
struct Flag {
  bool takes_value = true;
  std::function<void(LaunchOptions&, const std::string& value, const std::string& source)> apply;
};

int to_int(const std::string& value, const std::string& source, int minimum) {
  int parsed = 0;
  DISTGRAD_CHECK(absl::SimpleAtoi(value, &parsed), "distgrad-run: ", source, "=", value, " is not an integer");
  DISTGRAD_CHECK(parsed >= minimum, "distgrad-run: ", source, "=", value, " must be at least ", minimum);
  return parsed;
}

// "N" or "MIN:MAX" into options.nnodes and options.max_nnodes.
void set_nnodes(LaunchOptions& options, const std::string& value, const std::string& source) {
  const std::vector<std::string> parts = absl::StrSplit(value, ':');
  DISTGRAD_CHECK(parts.size() <= 2, "distgrad-run: ", source, "=", value, " is not N or MIN:MAX");
  options.nnodes = to_int(parts[0], source, 1);
  options.max_nnodes = parts.size() == 2 ? to_int(parts[1], source, 1) : options.nnodes;
  DISTGRAD_CHECK(options.nnodes <= options.max_nnodes, "distgrad-run: ", source, "=", value, ": MIN is above MAX");
}

// A number of seconds (> 0) into milliseconds.
std::chrono::milliseconds to_duration(const std::string& value, const std::string& source) {
  double seconds = 0;
  DISTGRAD_CHECK(absl::SimpleAtod(value, &seconds) && seconds > 0, "distgrad-run: ", source, "=", value,
                 " is not a positive number of seconds");
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

// "key=value,..." with torchrun's keys for the dynamic rendezvous.
void set_rdzv_conf(rendezvous::ElasticSettings& settings, const std::string& value, const std::string& source) {
  const std::vector<std::string> entries = absl::StrSplit(value, ',', absl::SkipEmpty());
  for (const std::string& entry : entries) {
    const std::vector<std::string> key_value = absl::StrSplit(entry, absl::MaxSplits('=', 1));
    DISTGRAD_CHECK(key_value.size() == 2, "distgrad-run: ", source, ": ", entry, " is not key=value");
    const std::string& key = key_value[0];
    const std::string item = source + " " + key;
    if (key == "join_timeout") {
      settings.join_timeout = to_duration(key_value[1], item);
    } else if (key == "last_call_timeout") {
      settings.last_call_timeout = to_duration(key_value[1], item);
    } else if (key == "keep_alive_interval") {
      settings.keep_alive_interval = to_duration(key_value[1], item);
    } else if (key == "keep_alive_max_attempt") {
      settings.keep_alive_max_attempt = to_int(key_value[1], item, 1);
    } else {
      DISTGRAD_FAIL("distgrad-run: ", source, ": unknown key ", key,
                    " (known: join_timeout, last_call_timeout, keep_alive_interval, keep_alive_max_attempt)");
    }
  }
}

const std::map<std::string, Flag>& flags() {
  static const auto* table = new std::map<std::string, Flag>{
      {"nnodes", {true, &set_nnodes}},
      {"nproc_per_node",
       {true,
        [](LaunchOptions& o, const std::string& v, const std::string& s) {
          const std::string lower = absl::AsciiStrToLower(v);
          if (lower != "auto" && lower != "cpu" && lower != "gpu") to_int(v, s + " (a count, auto, cpu or gpu)", 1);
          o.nproc_per_node = lower;
        }}},
      {"node_rank",
       {true, [](LaunchOptions& o, const std::string& v, const std::string& s) { o.node_rank = to_int(v, s, 0); }}},
      {"master_addr", {true, [](LaunchOptions& o, const std::string& v, const std::string&) { o.master_addr = v; }}},
      {"master_port",
       {true,
        [](LaunchOptions& o, const std::string& v, const std::string& s) {
          o.master_port = to_int(v, s, 1);
          DISTGRAD_CHECK(o.master_port <= 65535, "distgrad-run: ", s, "=", v, " is not a port (1-65535)");
        }}},
      {"standalone", {false, [](LaunchOptions& o, const std::string&, const std::string&) { o.standalone = true; }}},
      {"max_restarts",
       {true, [](LaunchOptions& o, const std::string& v, const std::string& s) { o.max_restarts = to_int(v, s, 0); }}},
      {"tolerate_lost_workers",
       {false, [](LaunchOptions& o, const std::string&, const std::string&) { o.tolerate_lost_workers = true; }}},
      {"max_rejoins",
       {true,
        [](LaunchOptions& o, const std::string& v, const std::string& s) {
          o.max_rejoins = to_int(v, s, 0);
          o.tolerate_lost_workers |= o.max_rejoins > 0;
        }}},
      {"monitor_interval",
       {true,
        [](LaunchOptions& o, const std::string& v, const std::string& s) {
          DISTGRAD_CHECK(absl::SimpleAtod(v, &o.monitor_interval_s) && o.monitor_interval_s > 0, "distgrad-run: ", s,
                         "=", v, " is not a positive number of seconds");
        }}},
      {"log_dir", {true, [](LaunchOptions& o, const std::string& v, const std::string&) { o.log_dir = v; }}},
      {"trace",
       {true,
        [](LaunchOptions& o, const std::string& v, const std::string& s) {
          DISTGRAD_CHECK(!v.empty(), "distgrad-run: ", s, " expects a directory for the trace files");
          o.trace_dir = std::filesystem::absolute(v).string();
        }}},
      {"redirects", {true, [](LaunchOptions& o, const std::string& v, const std::string&) { o.redirects = v; }}},
      {"tee", {true, [](LaunchOptions& o, const std::string& v, const std::string&) { o.tee = v; }}},
      {"role", {true, [](LaunchOptions& o, const std::string& v, const std::string&) { o.role = v; }}},
      {"run_id", {true, [](LaunchOptions& o, const std::string& v, const std::string&) { o.run_id = v; }}},
      {"rdzv_id", {true, [](LaunchOptions& o, const std::string& v, const std::string&) { o.run_id = v; }}},
      {"rdzv_backend",
       {true,
        [](LaunchOptions& o, const std::string& v, const std::string& s) {
          const std::string lower = absl::AsciiStrToLower(v);
          DISTGRAD_CHECK(lower == "static" || lower == "c10d" || lower == "etcd" || lower == "etcd-v2",
                         "distgrad-run: ", s, "=", v, " is not a rendezvous backend (static, c10d or etcd)");
          o.rdzv_backend = lower == "etcd-v2" ? "etcd" : lower;
        }}},
      {"rdzv_endpoint",
       {true, [](LaunchOptions& o, const std::string& v, const std::string&) { o.rdzv_endpoint = v; }}},
      {"rdzv_conf",
       {true, [](LaunchOptions& o, const std::string& v, const std::string& s) { set_rdzv_conf(o.rdzv_conf, v, s); }}},
      {"local_addr", {true, [](LaunchOptions& o, const std::string& v, const std::string&) { o.local_addr = v; }}},
      {"no_line_buffered",
       {false, [](LaunchOptions& o, const std::string&, const std::string&) { o.line_buffered = false; }}},
  };
  return *table;
}

// "--nproc-per-node=4" -> {"nproc_per_node", "4"}; "--standalone" -> {"standalone", nullopt}.
std::pair<std::string, std::optional<std::string>> split_flag(const std::string& arg) {
  std::string body = arg.substr(arg.rfind("--", 0) == 0 ? 2 : 1);
  std::optional<std::string> value;
  if (const size_t equals = body.find('='); equals != std::string::npos) {
    value = body.substr(equals + 1);
    body.resize(equals);
  }
  std::replace(body.begin(), body.end(), '-', '_');
  return {body, value};
}

}  // namespace

LaunchOptions parse_launch_options(const std::vector<std::string>& args, const rendezvous::EnvLookup& getenv) {
  LaunchOptions options;
  std::map<std::string, std::pair<std::string, std::string>> given;  // flag -> (value, how it was given)
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      options.help = true;
      return options;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program
    auto [name, value] = split_flag(arg);
    auto flag = flags().find(name);
    DISTGRAD_CHECK(flag != flags().end(), "distgrad-run: unknown option ", arg, " (distgrad-run --help lists them)");
    if (!flag->second.takes_value) {
      DISTGRAD_CHECK(!value, "distgrad-run: ", arg, " takes no value");
      value = "1";
    } else if (!value) {
      DISTGRAD_CHECK(i + 1 < args.size(), "distgrad-run: ", arg, " needs a value");
      value = args[++i];
    }
    given[name] = {*value, "--" + name};
  }
  for (const auto& [name, flag] : flags()) {
    if (given.contains(name)) continue;
    const std::string variable = "PET_" + absl::AsciiStrToUpper(name);
    if (std::optional<std::string> value = getenv(variable)) {
      if (!flag.takes_value && (*value == "0" || value->empty())) continue;  // PET_STANDALONE=0: off
      given[name] = {*value, variable};
    }
  }
  for (const auto& [name, value_and_source] : given) {
    flags().at(name).apply(options, value_and_source.first, value_and_source.second);
  }
  options.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  DISTGRAD_CHECK(!options.program.empty(), "distgrad-run: expected a program to run after the options, found none");
  DISTGRAD_CHECK(!options.standalone || options.max_nnodes == 1,
                 "distgrad-run: --standalone runs one node, but --nnodes is ", options.nnodes);
  if (!options.elastic()) {
    DISTGRAD_CHECK(options.nnodes == options.max_nnodes, "distgrad-run: --nnodes ", options.nnodes, ":",
                   options.max_nnodes,
                   " is an elastic range, which needs an elastic rendezvous (--rdzv-backend c10d or etcd)");
    DISTGRAD_CHECK(options.node_rank < options.nnodes, "distgrad-run: --node-rank ", options.node_rank,
                   " is not below --nnodes ", options.nnodes);
    return options;
  }
  DISTGRAD_CHECK(!options.rdzv_endpoint.empty(), "distgrad-run: --rdzv-backend ", options.rdzv_backend,
                 " needs --rdzv-endpoint HOST[:PORT]");
  if (options.rdzv_endpoint.find(':') == std::string::npos || options.rdzv_endpoint.ends_with(']')) {
    options.rdzv_endpoint += options.rdzv_backend == "etcd" ? ":2379" : ":29400";
  }
  options.rdzv_conf.min_nodes = options.nnodes;
  options.rdzv_conf.max_nodes = options.max_nnodes;
  return options;
}

int workers_per_node(std::string_view nproc_per_node, int cpu_cores, int cuda_devices) {
  if (nproc_per_node == "cpu") return std::max(cpu_cores, 1);
  if (nproc_per_node == "gpu") {
    DISTGRAD_CHECK(cuda_devices > 0, "distgrad-run: --nproc-per-node gpu, but no CUDA device is visible");
    return cuda_devices;
  }
  if (nproc_per_node == "auto") return cuda_devices > 0 ? cuda_devices : std::max(cpu_cores, 1);
  int count = 0;
  DISTGRAD_CHECK(absl::SimpleAtoi(std::string(nproc_per_node), &count) && count >= 1, "distgrad-run: --nproc-per-node ",
                 nproc_per_node, " is not a positive count, auto, cpu or gpu");
  return count;
}

std::string launch_usage() {
  return R"(usage: distgrad-run [options] program [args...]

Starts --nproc-per-node copies of program on this node, with the environment distgrad (and
torchrun programs) read: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,
ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DISTGRAD_RESTART_COUNT, DISTGRAD_MAX_RESTARTS,
DISTGRAD_RUN_ID, DISTGRAD_TOKEN, and OMP_NUM_THREADS=1 unless set.

options (torchrun's; '-' or '_' in names; --flag value or --flag=value; a flag not given falls
back to PET_<FLAG>, e.g. PET_NPROC_PER_NODE):
  --nnodes N|MIN:MAX         nodes in the job (1); a MIN:MAX range needs an elastic rendezvous
  --nproc-per-node K|auto|cpu|gpu
                             workers on this node (1); auto: one per GPU, else per CPU core
  --node-rank R              this node's rank, 0 <= R < nnodes (0)
  --master-addr A            the rendezvous host, node 0's address (127.0.0.1)
  --master-port P            the rendezvous port (29500)
  --standalone               one node; the launcher picks a free port
  --max-restarts M           restarts of the whole group after a worker fails (0)
  --tolerate-lost-workers    a worker other than rank 0 that fails or dies leaves the others
                             running (for programs that outlive lost workers: map-reduce calls
                             with reissue_lost_partitions, docs/fault-tolerance.md); the job then
                             succeeds when the others do
  --max-rejoins N            a worker other than rank 0 that fails or dies starts again into
                             the running world, up to N times per worker, without the others
                             restarting (implies --tolerate-lost-workers; the program rejoins
                             with init_rpc: docs/fault-tolerance.md) (0)
  --monitor-interval S       seconds between checks of the workers (0.1)
  --log-dir D                where --redirects and --tee write the logs: each run in a new
                             directory D/<run-id>_XXXXXX (printed at the start), in it
                             attempt_<k>/<local-rank>/stdout.log and stderr.log per attempt
  --trace D                  record a trace of the whole job (DISTGRAD_TRACE=D for every worker):
                             each process writes D/trace-<pid>.jsonl; at the end the launcher
                             merges them into D/trace.json (Perfetto UI, chrome://tracing) and
                             D/stats.json, and rank 0 prints the per-function statistics
  --redirects 0|1|2|3        send workers' stdout (1), stderr (2) or both (3) only to the logs
  --tee 0|1|2|3              copy them to the logs as well as to the console
  --role NAME                the workers' role (default)
  --run-id ID, --rdzv-id ID  the job's id, shared by its nodes (none)
  --rdzv-backend static|c10d|etcd
                             static (default): node ranks given, node 0 hosts the Store. c10d or
                             etcd: an elastic job (docs/fault-tolerance.md): nodes join in rounds,
                             ranks follow arrival, and nodes leaving or joining between MIN and MAX
                             restart the workers with the new world (DISTGRAD_RESTART_COUNT = the
                             round); c10d keeps the rendezvous in a Store that the launcher on the
                             endpoint's host serves, etcd in an etcd server (its v3 API)
  --rdzv-endpoint H[:P]      the elastic rendezvous: the Store's host (port 29400) or etcd's
                             client address (port 2379)
  --rdzv-conf K=V,...        join_timeout (600 s: how long a round may wait for MIN nodes),
                             last_call_timeout (30 s: how long a first round waits for more nodes
                             once MIN joined), keep_alive_interval (5 s), keep_alive_max_attempt
                             (3: heartbeats missed before a node counts as gone)
  --local-addr A             the address other nodes reach this node's Store at (by default the
                             one this host uses towards the rendezvous endpoint)
  --no-line-buffered         leave the workers' stdout buffering alone; by default the workers
                             run with coreutils' libstdbuf preloaded for line-buffered stdout
                             (as stdbuf -oL) and PYTHONUNBUFFERED=1 unless set
  -h, --help                 this text
)";
}

}  // namespace distgrad::launcher
