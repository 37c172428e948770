#include "rendezvous/world.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <utility>

#include "core/error.h"

namespace distgrad::rendezvous {
namespace {

constexpr char kDefaultMasterAddr[] = "127.0.0.1";
constexpr int kDefaultMasterPort = 29500;
// Note [Slurm master port]: every task of a Slurm job must agree on the Store's port without
// talking to each other, so it is derived from the job id alone, as PyTorch Lightning does:
// 15000 + the last four digits of SLURM_JOB_ID (15000..24999). Two jobs sharing a node clash only
// when their ids agree modulo 10000; MASTER_PORT overrides the rule.
constexpr int kSlurmPortBase = 15000;
constexpr int kSlurmPortSpan = 10000;
// Expanding a hostlist or a task-count list stops at this many entries (a typo such as
// "node[1-1000000000]" must not exhaust memory).
constexpr uint64_t kMaxExpandedEntries = 1'000'000;

// Parses all of `text` as a base-10 integer of type T.
template <typename T>
std::optional<T> parse_integer(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// An integer setting and how it was obtained, for error messages: "RANK=4", "WORLD_SIZE=1
// (WORLD_SIZE not set)", "the 3 tasks of this node (SLURM_TASKS_PER_NODE=4(x2),3, SLURM_NODEID=2)".
struct Setting {
  int value = 0;
  std::string description;
};

class Environment {
 public:
  explicit Environment(const EnvLookup& getenv) : getenv_(getenv) {}

  std::optional<std::string> get(std::string_view name) const { return getenv_(name); }
  bool has(std::string_view name) const { return getenv_(name).has_value(); }

  // The integer in variable `name`, or `fallback` when it is not set.
  Setting integer(std::string_view name, int fallback) const {
    std::optional<std::string> text = getenv_(name);
    if (!text) return {fallback, detail::str_cat(name, "=", fallback, " (", name, " not set)")};
    return {parse(name, *text), detail::str_cat(name, "=", *text)};
  }

  // The integer in the first of `names` that is set, or `fallback` when none is.
  Setting first_integer(std::initializer_list<std::string_view> names, int fallback) const {
    for (std::string_view name : names) {
      if (has(name)) return integer(name, fallback);
    }
    return integer(*names.begin(), fallback);
  }

  static int parse(std::string_view name, const std::string& text) {
    DISTGRAD_CHECK(!text.empty(), name, " is set but empty (expected an integer)");
    std::optional<int> value = parse_integer<int>(text);
    if (!value && parse_integer<int64_t>(text)) DISTGRAD_FAIL(name, "=", text, " is out of range");
    DISTGRAD_CHECK(value.has_value(), name, "=", text, " is not an integer");
    return *value;
  }

 private:
  const EnvLookup& getenv_;
};

// Checks 0 <= index < size and 1 <= size.
void check_index(const Setting& index, const Setting& size) {
  DISTGRAD_CHECK(size.value >= 1, size.description, " is not positive");
  DISTGRAD_CHECK(index.value >= 0, index.description, " is negative");
  DISTGRAD_CHECK(index.value < size.value, index.description, " is not below ", size.description);
}

// ---------------------------------------------------------------------------------------------
// Slurm's compressed lists.

// One host pattern of a hostlist: literal text and bracket groups, each group a list of
// ranges whose numbers are zero-padded to `width`.
struct HostRange {
  uint64_t low = 0;
  uint64_t high = 0;
  size_t width = 0;
};
struct HostSegment {
  std::string literal;            // used when `ranges` is empty
  std::vector<HostRange> ranges;  // a bracket group
};
using HostPattern = std::vector<HostSegment>;

[[noreturn]] void bad_hostlist(std::string_view hostlist, std::string_view why) {
  DISTGRAD_FAIL("\"", hostlist, "\" is not a valid Slurm hostlist: ", why);
}

HostRange parse_host_range(std::string_view hostlist, std::string_view text) {
  size_t dash = text.find('-');
  std::string_view low_text = text.substr(0, dash);
  std::string_view high_text = dash == std::string_view::npos ? low_text : text.substr(dash + 1);
  std::optional<uint64_t> low = parse_integer<uint64_t>(low_text);
  std::optional<uint64_t> high = parse_integer<uint64_t>(high_text);
  if (!low || !high) bad_hostlist(hostlist, detail::str_cat("\"", text, "\" is not a number or a range a-b"));
  if (*low > *high) bad_hostlist(hostlist, detail::str_cat("the range \"", text, "\" is decreasing"));
  return {*low, *high, low_text.size()};
}

std::vector<HostPattern> parse_hostlist(std::string_view hostlist) {
  std::vector<HostPattern> patterns;
  HostPattern pattern;
  std::string literal;
  auto end_literal = [&] {
    if (!literal.empty()) pattern.push_back({std::move(literal), {}});
    literal.clear();
  };
  auto end_pattern = [&] {
    end_literal();
    if (pattern.empty()) bad_hostlist(hostlist, "it has an empty host name");
    patterns.push_back(std::move(pattern));
    pattern.clear();
  };
  for (size_t i = 0; i < hostlist.size(); ++i) {
    char c = hostlist[i];
    if (c == ',') {
      end_pattern();
    } else if (c == '[') {
      size_t close = hostlist.find(']', i);
      if (close == std::string_view::npos) bad_hostlist(hostlist, "a '[' is not closed");
      std::string_view group = hostlist.substr(i + 1, close - i - 1);
      if (group.find('[') != std::string_view::npos) bad_hostlist(hostlist, "brackets are nested");
      end_literal();
      HostSegment segment;
      size_t start = 0;
      while (true) {
        size_t comma = group.find(',', start);
        segment.ranges.push_back(parse_host_range(hostlist, group.substr(start, comma - start)));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      pattern.push_back(std::move(segment));
      i = close;
    } else if (c == ']') {
      bad_hostlist(hostlist, "a ']' has no matching '['");
    } else {
      literal += c;
    }
  }
  end_pattern();
  return patterns;
}

std::string padded(uint64_t number, size_t width) {
  std::string digits = std::to_string(number);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// The first host of a hostlist, without expanding the rest.
std::string first_host(std::string_view hostlist) {
  std::vector<HostPattern> patterns = parse_hostlist(hostlist);
  std::string host;
  for (const HostSegment& segment : patterns.front()) {
    host += segment.ranges.empty() ? segment.literal : padded(segment.ranges[0].low, segment.ranges[0].width);
  }
  return host;
}

// ---------------------------------------------------------------------------------------------
// The launchers.

struct Ranks {
  Setting rank, world_size, local_rank, local_world_size;
};

Ranks torchrun_ranks(const Environment& env) {
  return {env.integer("RANK", 0), env.integer("WORLD_SIZE", 1), env.integer("LOCAL_RANK", 0),
          env.integer("LOCAL_WORLD_SIZE", 1)};
}

Ranks openmpi_ranks(const Environment& env) {
  return {env.integer("OMPI_COMM_WORLD_RANK", 0), env.integer("OMPI_COMM_WORLD_SIZE", 1),
          env.integer("OMPI_COMM_WORLD_LOCAL_RANK", 0), env.integer("OMPI_COMM_WORLD_LOCAL_SIZE", 1)};
}

// The number of tasks on this node: entry SLURM_NODEID of SLURM_TASKS_PER_NODE (the layout of
// this step), else of SLURM_NTASKS_PER_NODE (the count requested per node; a single number
// there holds for every node).
Setting slurm_local_world_size(const Environment& env) {
  for (std::string_view name : {"SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"}) {
    std::optional<std::string> text = env.get(name);
    if (!text) continue;
    std::vector<int> counts;
    try {
      counts = expand_slurm_tasks_per_node(*text);
    } catch (const Error& error) {
      DISTGRAD_FAIL(name, "=", *text, ": ", error.what());
    }
    Setting node = env.integer("SLURM_NODEID", 0);
    // A single count requested per node (--ntasks-per-node) holds for every node.
    bool uniform = name == "SLURM_NTASKS_PER_NODE" && counts.size() == 1;
    DISTGRAD_CHECK(node.value >= 0 && (uniform || static_cast<size_t>(node.value) < counts.size()), node.description,
                   " has no entry in ", name, "=", *text, " (", counts.size(), " nodes)");
    int count = counts[uniform ? 0 : node.value];
    return {count,
            detail::str_cat("the ", count, " tasks of this node (", name, "=", *text, ", ", node.description, ")")};
  }
  return {1, "SLURM_TASKS_PER_NODE=1 (SLURM_TASKS_PER_NODE not set)"};
}

Ranks slurm_ranks(const Environment& env) {
  return {env.integer("SLURM_PROCID", 0), env.first_integer({"SLURM_NTASKS", "SLURM_NPROCS"}, 1),
          env.integer("SLURM_LOCALID", 0), slurm_local_world_size(env)};
}

std::string slurm_master_addr(const Environment& env) {
  if (std::optional<std::string> ip = env.get("SLURM_LAUNCH_NODE_IPADDR"); ip && !ip->empty()) return *ip;
  if (std::optional<std::string> nodes = env.get("SLURM_JOB_NODELIST"); nodes && !nodes->empty()) {
    try {
      return first_host(*nodes);
    } catch (const Error& error) {
      DISTGRAD_FAIL("SLURM_JOB_NODELIST=", *nodes, ": ", error.what());
    }
  }
  return kDefaultMasterAddr;
}

// See Note [Slurm master port].
int slurm_master_port(const Environment& env) {
  std::optional<std::string> job = env.get("SLURM_JOB_ID");
  if (!job) return kDefaultMasterPort;
  std::optional<uint64_t> id = parse_integer<uint64_t>(*job);
  DISTGRAD_CHECK(id.has_value(), "SLURM_JOB_ID=", *job, " is not an integer");
  return kSlurmPortBase + static_cast<int>(*id % kSlurmPortSpan);
}

}  // namespace

std::optional<std::string> process_environment(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string getenv_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::optional<bool> getenv_switch(const char* name, std::string_view who) {
  const std::string text = getenv_or(name, "");
  DISTGRAD_CHECK(text.empty() || text == "0" || text == "1", who, ": ", name, "=", text, " is not 0 or 1");
  if (text.empty()) return std::nullopt;
  return text == "1";
}

std::optional<uint64_t> getenv_bytes(const char* name, std::string_view who) {
  const std::string text = getenv_or(name, "");
  if (text.empty()) return std::nullopt;
  uint64_t bytes = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  DISTGRAD_CHECK(error == std::errc() && end == text.data() + text.size(), who, ": ", name, "=", text,
                 " is not a number of bytes");
  return bytes;
}

WorldInfo read_world_info(const EnvLookup& getenv) {
  Environment env(getenv);
  WorldInfo info;
  Ranks ranks;
  if (env.has("RANK") || env.has("WORLD_SIZE")) {
    info.source = "torchrun";
    ranks = torchrun_ranks(env);
  } else if (env.has("SLURM_PROCID")) {
    info.source = "slurm";
    ranks = slurm_ranks(env);
    info.master_addr = slurm_master_addr(env);
    info.master_port = slurm_master_port(env);
  } else if (env.has("OMPI_COMM_WORLD_RANK") || env.has("OMPI_COMM_WORLD_SIZE")) {
    info.source = "openmpi";
    ranks = openmpi_ranks(env);
  } else {
    info.source = "default";
    ranks = {{0, "rank 0"}, {1, "world size 1"}, {0, "local rank 0"}, {1, "local world size 1"}};
  }
  check_index(ranks.rank, ranks.world_size);
  check_index(ranks.local_rank, ranks.local_world_size);
  DISTGRAD_CHECK(ranks.local_world_size.value <= ranks.world_size.value, ranks.local_world_size.description,
                 " is larger than ", ranks.world_size.description);
  info.rank = ranks.rank.value;
  info.world_size = ranks.world_size.value;
  info.local_rank = ranks.local_rank.value;
  info.local_world_size = ranks.local_world_size.value;

  if (std::optional<std::string> addr = env.get("MASTER_ADDR")) {
    DISTGRAD_CHECK(!addr->empty(), "MASTER_ADDR is set but empty (expected a host name or an IP address)");
    info.master_addr = *addr;
  }
  if (std::optional<std::string> port = env.get("MASTER_PORT")) {
    info.master_port = Environment::parse("MASTER_PORT", *port);
    DISTGRAD_CHECK(info.master_port >= 1 && info.master_port <= 65535, "MASTER_PORT=", *port,
                   " is not a port number (1..65535)");
  }
  return info;
}

const WorldInfo& world_info() {
  static const WorldInfo info = read_world_info(process_environment);
  return info;
}

std::vector<std::string> expand_slurm_hostlist(std::string_view hostlist) {
  std::vector<HostPattern> patterns = parse_hostlist(hostlist);
  uint64_t total = 0;
  for (const HostPattern& pattern : patterns) {
    uint64_t count = 1;
    for (const HostSegment& segment : pattern) {
      uint64_t choices = segment.ranges.empty() ? 1 : 0;
      for (const HostRange& range : segment.ranges)
        choices += std::min(range.high - range.low, kMaxExpandedEntries) + 1;
      count = std::min(count * std::min(choices, kMaxExpandedEntries + 1), kMaxExpandedEntries + 1);
    }
    total += count;
    if (total > kMaxExpandedEntries) bad_hostlist(hostlist, "it names more than a million hosts");
  }

  std::vector<std::string> hosts;
  hosts.reserve(total);
  for (const HostPattern& pattern : patterns) {
    std::vector<std::string> prefixes = {""};
    for (const HostSegment& segment : pattern) {
      std::vector<std::string> next;
      for (const std::string& prefix : prefixes) {
        if (segment.ranges.empty()) {
          next.push_back(prefix + segment.literal);
          continue;
        }
        for (const HostRange& range : segment.ranges) {
          for (uint64_t n = range.low; n <= range.high; ++n) next.push_back(prefix + padded(n, range.width));
        }
      }
      prefixes = std::move(next);
    }
    for (std::string& host : prefixes) hosts.push_back(std::move(host));
  }
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(std::string_view tasks_per_node) {
  auto bad = [&](std::string_view entry) {
    DISTGRAD_FAIL("\"", tasks_per_node, "\" is not a Slurm task count list such as \"4(x2),3\": the entry \"", entry,
                  "\" is not N or N(xM)");
  };
  std::vector<int> counts;
  size_t start = 0;
  while (true) {
    size_t comma = tasks_per_node.find(',', start);
    std::string_view entry = tasks_per_node.substr(start, comma - start);
    std::string_view count_text = entry;
    int repeat = 1;
    if (size_t paren = entry.find('('); paren != std::string_view::npos) {
      count_text = entry.substr(0, paren);
      std::string_view suffix = entry.substr(paren);
      if (suffix.size() < 4 || suffix.substr(0, 2) != "(x" || suffix.back() != ')') bad(entry);
      std::optional<int> parsed = parse_integer<int>(suffix.substr(2, suffix.size() - 3));
      if (!parsed || *parsed < 1) bad(entry);
      repeat = *parsed;
    }
    std::optional<int> count = parse_integer<int>(count_text);
    if (!count || *count < 0) bad(entry);
    DISTGRAD_CHECK(counts.size() + repeat <= kMaxExpandedEntries, "\"", tasks_per_node,
                   "\" describes more than a million nodes");
    counts.insert(counts.end(), repeat, *count);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return counts;
}

std::string worker_name(int rank, int world_size) {
  DISTGRAD_CHECK(world_size >= 1, "worker_name: the world size must be positive, got ", world_size);
  DISTGRAD_CHECK(rank >= 0 && rank < world_size, "worker_name: rank ", rank, " is not in a world of size ", world_size,
                 " (expected 0..", world_size - 1, ")");
  return "worker" + padded(static_cast<uint64_t>(rank), std::to_string(world_size).size());
}

std::optional<int> find_worker_id(std::string_view name, int world_size) {
  DISTGRAD_CHECK(world_size >= 1, "find_worker_id: the world size must be positive, got ", world_size);
  constexpr std::string_view kPrefix = "worker";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view digits = name.substr(kPrefix.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  const bool padded_as_worker_name = digits.size() == std::to_string(world_size).size();
  const bool without_leading_zeros = digits.size() == 1 || digits.front() != '0';
  if (!padded_as_worker_name && !without_leading_zeros) return std::nullopt;
  const std::optional<int> rank = parse_integer<int>(digits);
  if (!rank || *rank >= world_size) return std::nullopt;
  return rank;
}

int get_worker_id(std::string_view name, int world_size) {
  DISTGRAD_CHECK(world_size >= 1, "get_worker_id: the world size must be positive, got ", world_size);
  const std::optional<int> rank = find_worker_id(name, world_size);
  if (rank) return *rank;
  std::string expected = worker_name(0, world_size);
  if (world_size > 1) expected += ".." + worker_name(world_size - 1, world_size);
  if (world_size >= 10) expected += ", or unpadded worker0..worker" + std::to_string(world_size - 1);
  DISTGRAD_FAIL("get_worker_id: \"", name, "\" is not a worker name in a world of size ", world_size, " (expected ",
                expected, ")");
}

}  // namespace distgrad::rendezvous
