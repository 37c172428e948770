// distgrad-run's command line (torchrun's flags, both spellings, PET_ fallbacks, every error by
// message) and the environment it gives each worker.
#include "launcher/options.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/worker_env.h"
#include "tests/core/test_util.h"

namespace distgrad::launcher {
namespace {

using ::testing::ElementsAre;

// An environment made of `variables` only.
rendezvous::EnvLookup environment(std::map<std::string, std::string> variables = {}) {
  return [variables = std::move(variables)](std::string_view name) -> std::optional<std::string> {
    auto it = variables.find(std::string(name));
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
}

LaunchOptions parse(const std::vector<std::string>& args, std::map<std::string, std::string> variables = {}) {
  return parse_launch_options(args, environment(std::move(variables)));
}

TEST(LaunchOptions, TorchrunDefaults) {
  const LaunchOptions options = parse({"train"});
  EXPECT_EQ(options.nnodes, 1);
  EXPECT_EQ(options.nproc_per_node, "1");
  EXPECT_EQ(options.node_rank, 0);
  EXPECT_EQ(options.master_addr, "127.0.0.1");
  EXPECT_EQ(options.master_port, 29500);
  EXPECT_FALSE(options.standalone);
  EXPECT_EQ(options.max_restarts, 0);
  EXPECT_FALSE(options.tolerate_lost_workers);
  EXPECT_DOUBLE_EQ(options.monitor_interval_s, 0.1);
  EXPECT_FALSE(options.log_dir.has_value());
  EXPECT_EQ(options.role, "default");
  EXPECT_EQ(options.run_id, "none");
  EXPECT_TRUE(options.line_buffered);
  EXPECT_THAT(options.program, ElementsAre("train"));
}

TEST(LaunchOptions, DashAndUnderscoreSpellingsWithSpaceOrEquals) {
  const LaunchOptions options = parse({"--nnodes=2",
                                       "--nproc_per_node",
                                       "4",
                                       "--node-rank=1",
                                       "--master_addr",
                                       "10.0.0.1",
                                       "--master-port",
                                       "29999",
                                       "--max_restarts=3",
                                       "--tolerate-lost-workers",
                                       "--monitor-interval",
                                       "0.5",
                                       "--log_dir=/tmp/logs",
                                       "--role",
                                       "trainer",
                                       "--run-id",
                                       "job7",
                                       "--redirects",
                                       "3",
                                       "--tee=1",
                                       "prog",
                                       "a",
                                       "b"});
  EXPECT_EQ(options.nnodes, 2);
  EXPECT_EQ(options.nproc_per_node, "4");
  EXPECT_EQ(options.node_rank, 1);
  EXPECT_EQ(options.master_addr, "10.0.0.1");
  EXPECT_EQ(options.master_port, 29999);
  EXPECT_EQ(options.max_restarts, 3);
  EXPECT_TRUE(options.tolerate_lost_workers);
  EXPECT_DOUBLE_EQ(options.monitor_interval_s, 0.5);
  EXPECT_EQ(options.log_dir, "/tmp/logs");
  EXPECT_EQ(options.role, "trainer");
  EXPECT_EQ(options.run_id, "job7");
  EXPECT_EQ(options.redirects, "3");
  EXPECT_EQ(options.tee, "1");
  EXPECT_THAT(options.program, ElementsAre("prog", "a", "b"));
}

TEST(LaunchOptions, EverythingAfterTheProgramIsTheProgramsOwn) {
  const LaunchOptions options = parse({"--nproc-per-node", "2", "prog", "--nnodes", "5", "--help"});
  EXPECT_EQ(options.nnodes, 1);
  EXPECT_THAT(options.program, ElementsAre("prog", "--nnodes", "5", "--help"));
}

TEST(LaunchOptions, PetVariablesFillFlagsNotGiven) {
  const LaunchOptions options = parse(
      {"--master-port", "1234", "prog"},
      {{"PET_NPROC_PER_NODE", "3"}, {"PET_MASTER_PORT", "4321"}, {"PET_STANDALONE", "1"}, {"PET_MAX_RESTARTS", "2"}});
  EXPECT_EQ(options.nproc_per_node, "3");
  EXPECT_EQ(options.master_port, 1234);  // the flag wins
  EXPECT_TRUE(options.standalone);
  EXPECT_EQ(options.max_restarts, 2);
  EXPECT_FALSE(parse({"prog"}, {{"PET_STANDALONE", "0"}}).standalone);
  EXPECT_FALSE(parse({"prog"}, {{"PET_NO_LINE_BUFFERED", "1"}}).line_buffered);
}

TEST(LaunchOptions, NoLineBufferedTakesNoValue) {
  EXPECT_FALSE(parse({"--no-line-buffered", "prog"}).line_buffered);
  EXPECT_FALSE(parse({"--no_line_buffered", "prog"}).line_buffered);
  EXPECT_ERROR_CONTAINS(parse({"--no-line-buffered=0", "prog"}), "--no-line-buffered=0 takes no value");
  EXPECT_THAT(launch_usage(), ::testing::HasSubstr("--no-line-buffered"));
  EXPECT_THAT(launch_usage(), ::testing::HasSubstr("attempt_<k>/<local-rank>/stdout.log"));
}

TEST(LaunchOptions, TraceTakesADirectoryMadeAbsoluteForTheWorkers) {
  EXPECT_FALSE(parse({"prog"}).trace_dir.has_value());
  const LaunchOptions options = parse({"--trace", "out/trace", "prog"});
  ASSERT_TRUE(options.trace_dir.has_value());
  EXPECT_TRUE(std::filesystem::path(*options.trace_dir).is_absolute()) << *options.trace_dir;
  EXPECT_TRUE(options.trace_dir->ends_with("/out/trace")) << *options.trace_dir;
  EXPECT_EQ(worker_environment(options, GroupInfo{}, 0, {})["DISTGRAD_TRACE"], *options.trace_dir);
  EXPECT_EQ(worker_environment(parse({"prog"}), GroupInfo{}, 0, {}).count("DISTGRAD_TRACE"), 0u);
  EXPECT_ERROR_CONTAINS(parse({"--trace=", "prog"}), "--trace expects a directory");
  EXPECT_THAT(launch_usage(), ::testing::HasSubstr("--trace D"));
}

TEST(LaunchOptions, HelpNeedsNoProgram) {
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_TRUE(parse({"--nnodes", "2", "-h"}).help);
  EXPECT_THAT(launch_usage(), ::testing::HasSubstr("--nproc-per-node K|auto|cpu|gpu"));
}

TEST(LaunchOptions, AStaticRendezvousTakesFixedNodeCountsOnly) {
  EXPECT_EQ(parse({"--nnodes", "3:3", "--node-rank", "2", "prog"}).nnodes, 3);
  EXPECT_FALSE(parse({"prog"}).elastic());
  EXPECT_ERROR_CONTAINS(
      parse({"--nnodes", "1:4", "prog"}),
      "--nnodes 1:4 is an elastic range, which needs an elastic rendezvous (--rdzv-backend c10d or etcd)");
  EXPECT_ERROR_CONTAINS(parse({"--nnodes", "1:2:3", "prog"}), "--nnodes=1:2:3 is not N or MIN:MAX");
  EXPECT_ERROR_CONTAINS(parse({"--nnodes", "3:2", "prog"}), "--nnodes=3:2: MIN is above MAX");
}

TEST(LaunchOptions, MaxRejoinsImpliesToleratingLostWorkers) {
  const LaunchOptions options = parse({"--max-rejoins", "2", "prog"});
  EXPECT_EQ(options.max_rejoins, 2);
  EXPECT_TRUE(options.tolerate_lost_workers);
  EXPECT_FALSE(parse({"--max-rejoins", "0", "prog"}).tolerate_lost_workers);
  EXPECT_ERROR_CONTAINS(parse({"--max-rejoins", "-1", "prog"}), "--max_rejoins=-1 must be at least 0");
}

TEST(LaunchOptions, ElasticRendezvousAsTorchrun) {
  const LaunchOptions options =
      parse({"--nnodes=1:4", "--rdzv-backend", "c10d", "--rdzv_endpoint", "10.0.0.1", "--rdzv-id", "job7",
             "--rdzv-conf", "join_timeout=20,last_call_timeout=0.5,keep_alive_interval=1,keep_alive_max_attempt=5",
             "--local-addr", "10.0.0.2", "prog"});
  EXPECT_TRUE(options.elastic());
  EXPECT_EQ(options.nnodes, 1);
  EXPECT_EQ(options.max_nnodes, 4);
  EXPECT_EQ(options.rdzv_endpoint, "10.0.0.1:29400");  // torchrun's c10d port
  EXPECT_EQ(options.run_id, "job7");
  EXPECT_EQ(options.rdzv_conf.min_nodes, 1);
  EXPECT_EQ(options.rdzv_conf.max_nodes, 4);
  EXPECT_EQ(options.rdzv_conf.join_timeout, std::chrono::seconds(20));
  EXPECT_EQ(options.rdzv_conf.last_call_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(options.rdzv_conf.keep_alive_interval, std::chrono::seconds(1));
  EXPECT_EQ(options.rdzv_conf.keep_alive_max_attempt, 5);
  EXPECT_EQ(options.local_addr, "10.0.0.2");
  // etcd's client port; etcd-v2 is read as etcd (distgrad speaks the v3 API); a fixed count.
  const LaunchOptions etcd = parse({"--rdzv-backend=etcd-v2", "--rdzv-endpoint=[::1]", "--nnodes=2", "prog"});
  EXPECT_EQ(etcd.rdzv_backend, "etcd");
  EXPECT_EQ(etcd.rdzv_endpoint, "[::1]:2379");
  EXPECT_EQ(etcd.rdzv_conf.min_nodes, 2);
  EXPECT_EQ(etcd.rdzv_conf.max_nodes, 2);
  EXPECT_EQ(parse({"prog"}, {{"PET_RDZV_BACKEND", "c10d"}, {"PET_RDZV_ENDPOINT", "h:1234"}}).rdzv_endpoint, "h:1234");
  // --node-rank is not the elastic rendezvous' to check: ranks follow arrival.
  EXPECT_TRUE(parse({"--rdzv-backend=c10d", "--rdzv-endpoint=h", "--node-rank=5", "prog"}).elastic());

  EXPECT_ERROR_CONTAINS(parse({"--rdzv-backend", "zookeeper", "prog"}),
                        "--rdzv_backend=zookeeper is not a rendezvous backend (static, c10d or etcd)");
  EXPECT_ERROR_CONTAINS(parse({"--rdzv-backend", "c10d", "prog"}),
                        "--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT]");
  EXPECT_ERROR_CONTAINS(parse({"--rdzv-conf", "join_timeout=-2", "prog"}),
                        "--rdzv_conf join_timeout=-2 is not a positive number of seconds");
  EXPECT_ERROR_CONTAINS(parse({"--rdzv-conf", "read_timeout=5", "prog"}), "--rdzv_conf: unknown key read_timeout");
  EXPECT_ERROR_CONTAINS(parse({"--rdzv-conf", "join_timeout", "prog"}), "--rdzv_conf: join_timeout is not key=value");
}

TEST(LaunchOptions, BadInputNamesTheFlagOrVariableAndTheValue) {
  EXPECT_ERROR_CONTAINS(parse({"--nproc-per-node", "many", "prog"}),
                        "--nproc_per_node (a count, auto, cpu or gpu)=many is not an integer");
  EXPECT_ERROR_CONTAINS(parse({"prog"}, {{"PET_NNODES", "zero"}}), "PET_NNODES=zero is not an integer");
  EXPECT_ERROR_CONTAINS(parse({"--nnodes=0", "prog"}), "--nnodes=0 must be at least 1");
  EXPECT_ERROR_CONTAINS(parse({"--master-port=70000", "prog"}), "--master_port=70000 is not a port (1-65535)");
  EXPECT_ERROR_CONTAINS(parse({"--monitor-interval=-1", "prog"}),
                        "--monitor_interval=-1 is not a positive number of seconds");
  EXPECT_ERROR_CONTAINS(parse({"--nprocs", "2", "prog"}), "unknown option --nprocs (distgrad-run --help lists them)");
  EXPECT_ERROR_CONTAINS(parse({"--standalone=yes", "prog"}), "--standalone=yes takes no value");
  EXPECT_ERROR_CONTAINS(parse({"--role"}), "--role needs a value");
  EXPECT_ERROR_CONTAINS(parse({"--nnodes", "2"}), "expected a program to run after the options, found none");
  EXPECT_ERROR_CONTAINS(parse({"--nnodes", "2", "--node-rank", "2", "prog"}), "--node-rank 2 is not below --nnodes 2");
  EXPECT_ERROR_CONTAINS(parse({"--standalone", "--nnodes", "2", "prog"}), "--standalone runs one node");
}

TEST(WorkersPerNode, CountsCpusOrGpus) {
  EXPECT_EQ(workers_per_node("4", 2, 0), 4);
  EXPECT_EQ(workers_per_node("cpu", 16, 8), 16);
  EXPECT_EQ(workers_per_node("gpu", 16, 8), 8);
  EXPECT_EQ(workers_per_node("auto", 16, 8), 8);
  EXPECT_EQ(workers_per_node("auto", 16, 0), 16);
  EXPECT_ERROR_CONTAINS(workers_per_node("gpu", 16, 0), "--nproc-per-node gpu, but no CUDA device is visible");
}

TEST(WorkerEnvironment, AnElasticRoundsPlacementSetsTheRanksAndTheStore) {
  const LaunchOptions options = parse({"--rdzv-backend", "etcd", "--rdzv-endpoint", "10.0.0.9", "prog"});
  GroupInfo group;
  group.nproc_per_node = 2;
  group.master_port = 41000;
  group.placement = NodePlacement{.node_rank = 2, .first_rank = 5, .world_size = 9, .master_addr = "10.0.0.3"};
  std::map<std::string, std::string> env = worker_environment(options, group, 1, {});
  EXPECT_EQ(env["RANK"], "6");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "9");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["GROUP_RANK"], "2");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.3");
  EXPECT_EQ(env["MASTER_PORT"], "41000");
}

TEST(WorkerEnvironment, RanksOfTheSecondNodeOfTwo) {
  const LaunchOptions options =
      parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--run-id", "job7", "prog"});
  GroupInfo group;
  group.nproc_per_node = 3;
  group.master_port = 29555;
  group.restart_count = 2;
  group.token = "secret";
  std::map<std::string, std::string> env =
      worker_environment(options, group, 1, {{"PATH", "/usr/bin"}, {"RANK", "stale"}});
  EXPECT_EQ(env["RANK"], "4");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "6");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["ROLE_NAME"], "default");
  EXPECT_EQ(env["ROLE_RANK"], "4");
  EXPECT_EQ(env["ROLE_WORLD_SIZE"], "6");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29555");
  EXPECT_EQ(env["DISTGRAD_RESTART_COUNT"], "2");
  EXPECT_EQ(env["DISTGRAD_MAX_RESTARTS"], "0");
  EXPECT_EQ(env["DISTGRAD_RUN_ID"], "job7");
  EXPECT_EQ(env["DISTGRAD_TOKEN"], "secret");
  EXPECT_EQ(env["DISTGRAD_USE_AGENT_STORE"], "1");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(env["PATH"], "/usr/bin");
  // What distgrad's world info reads back from it.
  const rendezvous::WorldInfo world = rendezvous::read_world_info(environment(env));
  EXPECT_EQ(world.rank, 4);
  EXPECT_EQ(world.world_size, 6);
  EXPECT_EQ(world.local_rank, 1);
  EXPECT_EQ(world.local_world_size, 3);
  EXPECT_EQ(world.master_addr, "10.0.0.1");
  EXPECT_EQ(world.master_port, 29555);
}

TEST(WorkerEnvironment, KeepsTheUsersOmpThreadsAndChecksTheLocalRank) {
  const LaunchOptions options = parse({"prog"});
  GroupInfo group;
  group.nproc_per_node = 2;
  EXPECT_EQ(worker_environment(options, group, 0, {{"OMP_NUM_THREADS", "4"}})["OMP_NUM_THREADS"], "4");
  EXPECT_ERROR_CONTAINS(worker_environment(options, group, 2, {}),
                        "local rank 2 is outside the 2 workers of this node");
}

// Note [Line-buffered workers].
TEST(WorkerEnvironment, AsksForLineBufferedStdoutAfterTheUsersPreloads) {
  const LaunchOptions options = parse({"prog"});
  GroupInfo group;
  group.line_buffer_library = "/usr/libexec/coreutils/libstdbuf.so";
  std::map<std::string, std::string> env = worker_environment(options, group, 0, {{"LD_PRELOAD", "/opt/mine.so"}});
  EXPECT_EQ(env["LD_PRELOAD"], "/opt/mine.so:/usr/libexec/coreutils/libstdbuf.so");
  EXPECT_EQ(env["_STDBUF_O"], "L");
  EXPECT_FALSE(env.contains("_STDBUF_E"));  // C's stderr is unbuffered already
  EXPECT_EQ(env["PYTHONUNBUFFERED"], "1");
  EXPECT_EQ(worker_environment(options, group, 0, {})["LD_PRELOAD"], "/usr/libexec/coreutils/libstdbuf.so");
  // Already preloaded (distgrad-run itself under stdbuf): not twice; the user's settings win.
  env = worker_environment(options, group, 0,
                           {{"LD_PRELOAD", "/usr/libexec/coreutils/libstdbuf.so /opt/mine.so"},
                            {"_STDBUF_O", "0"},
                            {"PYTHONUNBUFFERED", ""}});
  EXPECT_EQ(env["LD_PRELOAD"], "/usr/libexec/coreutils/libstdbuf.so /opt/mine.so");
  EXPECT_EQ(env["_STDBUF_O"], "0");
  EXPECT_EQ(env["PYTHONUNBUFFERED"], "");
}

TEST(WorkerEnvironment, WithoutLibstdbufOnlyPythonIsAsked) {
  GroupInfo group;
  const std::map<std::string, std::string> env = worker_environment(parse({"prog"}), group, 0, {});
  EXPECT_FALSE(env.contains("LD_PRELOAD"));
  EXPECT_FALSE(env.contains("_STDBUF_O"));
  EXPECT_EQ(env.at("PYTHONUNBUFFERED"), "1");
}

TEST(WorkerEnvironment, NoLineBufferedLeavesTheEnvironmentAlone) {
  GroupInfo group;
  group.line_buffer_library = "/usr/libexec/coreutils/libstdbuf.so";
  const std::map<std::string, std::string> env =
      worker_environment(parse({"--no-line-buffered", "prog"}), group, 0, {{"LD_PRELOAD", "/opt/mine.so"}});
  EXPECT_EQ(env.at("LD_PRELOAD"), "/opt/mine.so");
  EXPECT_FALSE(env.contains("_STDBUF_O"));
  EXPECT_FALSE(env.contains("PYTHONUNBUFFERED"));
}

}  // namespace
}  // namespace distgrad::launcher
