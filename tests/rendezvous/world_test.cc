// Tests of world info: every launcher's variables (torchrun, Slurm with compressed hostlists and
// task counts, Open MPI, defaults), MASTER_* overrides, every bad value rejected with a message
// naming the variable, and worker names.
#include "rendezvous/world.h"

#include <cstdlib>
#include <map>

#include "tests/core/test_util.h"

namespace distgrad::rendezvous {
namespace {

using ::testing::ElementsAre;

WorldInfo read_world(const std::map<std::string, std::string>& environment) {
  return read_world_info([&](std::string_view name) -> std::optional<std::string> {
    auto it = environment.find(std::string(name));
    if (it == environment.end()) return std::nullopt;
    return it->second;
  });
}

void expect_world(const WorldInfo& world, int rank, int world_size, int local_rank, int local_world_size) {
  EXPECT_EQ(world.rank, rank);
  EXPECT_EQ(world.world_size, world_size);
  EXPECT_EQ(world.local_rank, local_rank);
  EXPECT_EQ(world.local_world_size, local_world_size);
}

TEST(GetenvOr, GivesTheFallbackForAnUnsetOrEmptyVariable) {
  ::unsetenv("DISTGRAD_TEST_GETENV_OR");
  EXPECT_EQ(getenv_or("DISTGRAD_TEST_GETENV_OR", "fallback"), "fallback");
  ::setenv("DISTGRAD_TEST_GETENV_OR", "", 1);
  EXPECT_EQ(getenv_or("DISTGRAD_TEST_GETENV_OR", "fallback"), "fallback");
  ::setenv("DISTGRAD_TEST_GETENV_OR", "set", 1);
  EXPECT_EQ(getenv_or("DISTGRAD_TEST_GETENV_OR", "fallback"), "set");
  ::unsetenv("DISTGRAD_TEST_GETENV_OR");
}

TEST(WorldInfo, EmptyEnvironmentIsASingleProcess) {
  WorldInfo world = read_world({});
  expect_world(world, 0, 1, 0, 1);
  EXPECT_EQ(world.master_addr, "127.0.0.1");
  EXPECT_EQ(world.master_port, 29500);
  EXPECT_EQ(world.source, "default");
}

TEST(WorldInfo, DefaultsIgnoreLocalVariablesWithoutRankOrWorldSize) {
  WorldInfo world = read_world({{"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "1"}});
  expect_world(world, 0, 1, 0, 1);
  EXPECT_EQ(world.source, "default");
}

TEST(WorldInfo, ReadsTorchrunVariables) {
  WorldInfo world = read_world({{"RANK", "5"},
                                {"WORLD_SIZE", "8"},
                                {"LOCAL_RANK", "1"},
                                {"LOCAL_WORLD_SIZE", "4"},
                                {"MASTER_ADDR", "10.1.2.3"},
                                {"MASTER_PORT", "1234"}});
  expect_world(world, 5, 8, 1, 4);
  EXPECT_EQ(world.master_addr, "10.1.2.3");
  EXPECT_EQ(world.master_port, 1234);
  EXPECT_EQ(world.source, "torchrun");
}

TEST(WorldInfo, TorchrunMissingVariablesTakeDefaults) {
  WorldInfo world = read_world({{"WORLD_SIZE", "4"}});
  expect_world(world, 0, 4, 0, 1);
  EXPECT_EQ(world.source, "torchrun");
  expect_world(read_world({{"RANK", "0"}}), 0, 1, 0, 1);
  EXPECT_EQ(read_world({{"RANK", "0"}}).master_port, 29500);
}

TEST(WorldInfo, TorchrunTakesPrecedenceOverSlurmAndOpenMpi) {
  WorldInfo world = read_world({{"RANK", "1"},
                                {"WORLD_SIZE", "2"},
                                {"SLURM_PROCID", "7"},
                                {"SLURM_NTASKS", "8"},
                                {"SLURM_JOB_ID", "1234"},
                                {"OMPI_COMM_WORLD_RANK", "3"},
                                {"OMPI_COMM_WORLD_SIZE", "4"}});
  expect_world(world, 1, 2, 0, 1);
  EXPECT_EQ(world.source, "torchrun");
  EXPECT_EQ(world.master_port, 29500);  // the Slurm port rule applies to Slurm only
}

TEST(WorldInfo, ReadsSlurmVariables) {
  WorldInfo world = read_world({{"SLURM_PROCID", "5"},
                                {"SLURM_NTASKS", "8"},
                                {"SLURM_LOCALID", "1"},
                                {"SLURM_NODEID", "1"},
                                {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                {"SLURM_JOB_NODELIST", "node[01-04,07],gpu3"},
                                {"SLURM_JOB_ID", "123456"}});
  expect_world(world, 5, 8, 1, 4);
  EXPECT_EQ(world.master_addr, "node01");
  EXPECT_EQ(world.master_port, 15000 + 3456);
  EXPECT_EQ(world.source, "slurm");
}

TEST(WorldInfo, SlurmPicksThisNodesTaskCount) {
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "8"},
                                            {"SLURM_NTASKS", "11"},
                                            {"SLURM_LOCALID", "0"},
                                            {"SLURM_NODEID", "2"},
                                            {"SLURM_TASKS_PER_NODE", "4(x2),3"}};
  EXPECT_EQ(read_world(env).local_world_size, 3);
  env["SLURM_NODEID"] = "1";
  env["SLURM_PROCID"] = "4";
  EXPECT_EQ(read_world(env).local_world_size, 4);
}

TEST(WorldInfo, SlurmPrefersTheStepLayoutOverTheRequestedTasksPerNode) {
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "4"},          {"SLURM_NTASKS", "6"},
                                            {"SLURM_LOCALID", "0"},         {"SLURM_NODEID", "1"},
                                            {"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_TASKS_PER_NODE", "4,2"}};
  EXPECT_EQ(read_world(env).local_world_size, 2);
  env.erase("SLURM_TASKS_PER_NODE");
  EXPECT_EQ(read_world(env).local_world_size, 4);
}

TEST(WorldInfo, SlurmMasterFromLaunchNodeAddress) {
  WorldInfo world = read_world({{"SLURM_PROCID", "0"},
                                {"SLURM_NTASKS", "2"},
                                {"SLURM_TASKS_PER_NODE", "2"},
                                {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.9"},
                                {"SLURM_JOB_NODELIST", "node[01-04]"}});
  EXPECT_EQ(world.master_addr, "10.0.0.9");
  EXPECT_EQ(world.master_port, 29500);  // no SLURM_JOB_ID
}

TEST(WorldInfo, SlurmMasterFromFirstHostOfCompressedNodeList) {
  auto master = [](const std::string& nodelist) {
    return read_world({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_NODELIST", nodelist}}).master_addr;
  };
  EXPECT_EQ(master("node[01-04,07],gpu3"), "node01");
  EXPECT_EQ(master("gpu3,node[01-04]"), "gpu3");
  EXPECT_EQ(master("rack[2-3]-n[007-009]"), "rack2-n007");
  EXPECT_EQ(master("single"), "single");
}

TEST(WorldInfo, SlurmPortIsTheSameForEveryTaskOfAJob) {
  auto port = [](const std::string& rank, const std::string& job) {
    return read_world({{"SLURM_PROCID", rank}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", job}}).master_port;
  };
  EXPECT_EQ(port("0", "987654321"), port("3", "987654321"));
  EXPECT_EQ(port("0", "987654321"), 15000 + 4321);
  EXPECT_EQ(port("0", "7"), 15007);
  EXPECT_EQ(port("0", "20000"), 15000);
}

TEST(WorldInfo, SlurmAcceptsNprocsAndDefaultsWithoutTaskCounts) {
  expect_world(read_world({{"SLURM_PROCID", "2"}, {"SLURM_NPROCS", "3"}}), 2, 3, 0, 1);
  expect_world(read_world({{"SLURM_PROCID", "0"}}), 0, 1, 0, 1);
}

TEST(WorldInfo, ReadsOpenMpiVariables) {
  WorldInfo world = read_world({{"OMPI_COMM_WORLD_RANK", "6"},
                                {"OMPI_COMM_WORLD_SIZE", "8"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  expect_world(world, 6, 8, 2, 4);
  EXPECT_EQ(world.master_addr, "127.0.0.1");
  EXPECT_EQ(world.master_port, 29500);
  EXPECT_EQ(world.source, "openmpi");
}

TEST(WorldInfo, SlurmTakesPrecedenceOverOpenMpi) {
  WorldInfo world = read_world(
      {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  expect_world(world, 1, 2, 0, 1);
  EXPECT_EQ(world.source, "slurm");
}

TEST(WorldInfo, MasterVariablesOverrideEveryLauncher) {
  std::map<std::string, std::string> master = {{"MASTER_ADDR", "head.example"}, {"MASTER_PORT", "4242"}};
  std::vector<std::map<std::string, std::string>> launchers = {
      {},
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}},
      {{"SLURM_PROCID", "0"},
       {"SLURM_NTASKS", "2"},
       {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.1"},
       {"SLURM_JOB_NODELIST", "n[1-2]"},
       {"SLURM_JOB_ID", "77"}},
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}};
  for (std::map<std::string, std::string> env : launchers) {
    env.insert(master.begin(), master.end());
    WorldInfo world = read_world(env);
    EXPECT_EQ(world.master_addr, "head.example") << world.source;
    EXPECT_EQ(world.master_port, 4242) << world.source;
  }
}

TEST(WorldInfo, RejectsValuesThatAreNotIntegers) {
  EXPECT_ERROR_CONTAINS(read_world({{"RANK", "abc"}}), "RANK=abc is not an integer");
  EXPECT_ERROR_CONTAINS(read_world({{"RANK", "1x"}}), "RANK=1x is not an integer");
  EXPECT_ERROR_CONTAINS(read_world({{"RANK", " 1"}}), "RANK= 1 is not an integer");
  EXPECT_ERROR_CONTAINS(read_world({{"RANK", "+1"}}), "RANK=+1 is not an integer");
  EXPECT_ERROR_CONTAINS(read_world({{"RANK", ""}}), "RANK is set but empty");
  EXPECT_ERROR_CONTAINS(read_world({{"WORLD_SIZE", "99999999999"}}), "WORLD_SIZE=99999999999 is out of range");
  EXPECT_ERROR_CONTAINS(read_world({{"RANK", "0"}, {"LOCAL_RANK", "zero"}}), "LOCAL_RANK=zero is not an integer");
  EXPECT_ERROR_CONTAINS(read_world({{"RANK", "0"}, {"LOCAL_WORLD_SIZE", "1.5"}}),
                        "LOCAL_WORLD_SIZE=1.5 is not an integer");
  EXPECT_ERROR_CONTAINS(read_world({{"SLURM_PROCID", "x"}}), "SLURM_PROCID=x is not an integer");
  EXPECT_ERROR_CONTAINS(read_world({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "two"}}),
                        "SLURM_NTASKS=two is not an integer");
  EXPECT_ERROR_CONTAINS(read_world({{"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", "12a"}}),
                        "SLURM_JOB_ID=12a is not an integer");
  EXPECT_ERROR_CONTAINS(read_world({{"OMPI_COMM_WORLD_RANK", "r"}}), "OMPI_COMM_WORLD_RANK=r is not an integer");
  EXPECT_ERROR_CONTAINS(read_world({{"MASTER_PORT", "http"}}), "MASTER_PORT=http is not an integer");
}

TEST(WorldInfo, RejectsRanksOutsideTheWorld) {
  EXPECT_ERROR_CONTAINS(read_world({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), "RANK=4 is not below WORLD_SIZE=4");
  EXPECT_ERROR_CONTAINS(read_world({{"RANK", "1"}}), "RANK=1 is not below WORLD_SIZE=1 (WORLD_SIZE not set)");
  EXPECT_ERROR_CONTAINS(read_world({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}), "RANK=-1 is negative");
  EXPECT_ERROR_CONTAINS(read_world({{"WORLD_SIZE", "0"}}), "WORLD_SIZE=0 is not positive");
  EXPECT_ERROR_CONTAINS(read_world({{"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
                        "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
  EXPECT_ERROR_CONTAINS(read_world({{"WORLD_SIZE", "4"}, {"LOCAL_RANK", "-2"}, {"LOCAL_WORLD_SIZE", "2"}}),
                        "LOCAL_RANK=-2 is negative");
  EXPECT_ERROR_CONTAINS(read_world({{"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "8"}}),
                        "LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4");
  EXPECT_ERROR_CONTAINS(read_world({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}),
                        "SLURM_PROCID=4 is not below SLURM_NTASKS=4");
  EXPECT_ERROR_CONTAINS(read_world({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
                        "OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2");
  EXPECT_ERROR_CONTAINS(read_world({{"OMPI_COMM_WORLD_RANK", "0"},
                                    {"OMPI_COMM_WORLD_SIZE", "2"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}}),
                        "OMPI_COMM_WORLD_LOCAL_RANK=1 is not below OMPI_COMM_WORLD_LOCAL_SIZE=1");
}

TEST(WorldInfo, RejectsBadSlurmLayouts) {
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "0"}};
  env["SLURM_TASKS_PER_NODE"] = "4(x2)";
  env["SLURM_NODEID"] = "2";
  EXPECT_ERROR_CONTAINS(read_world(env), "SLURM_NODEID=2 has no entry in SLURM_TASKS_PER_NODE=4(x2) (2 nodes)");
  env["SLURM_NODEID"] = "1";
  env["SLURM_LOCALID"] = "4";
  EXPECT_ERROR_CONTAINS(read_world(env), "SLURM_LOCALID=4 is not below the 4 tasks of this node",
                        "SLURM_TASKS_PER_NODE=4(x2)", "SLURM_NODEID=1");
  env["SLURM_LOCALID"] = "0";
  env["SLURM_TASKS_PER_NODE"] = "4(x)";
  EXPECT_ERROR_CONTAINS(read_world(env), "SLURM_TASKS_PER_NODE=4(x)", "\"4(x)\" is not N or N(xM)");
  env.erase("SLURM_TASKS_PER_NODE");
  env["SLURM_NTASKS_PER_NODE"] = "four";
  EXPECT_ERROR_CONTAINS(read_world(env), "SLURM_NTASKS_PER_NODE=four");
  env.erase("SLURM_NTASKS_PER_NODE");
  env["SLURM_JOB_NODELIST"] = "node[01-";
  EXPECT_ERROR_CONTAINS(read_world(env), "SLURM_JOB_NODELIST=node[01-", "not a valid Slurm hostlist");
}

TEST(WorldInfo, RejectsBadMasterSettings) {
  EXPECT_ERROR_CONTAINS(read_world({{"MASTER_PORT", "0"}}), "MASTER_PORT=0 is not a port number (1..65535)");
  EXPECT_ERROR_CONTAINS(read_world({{"MASTER_PORT", "65536"}}), "MASTER_PORT=65536 is not a port number");
  EXPECT_ERROR_CONTAINS(read_world({{"MASTER_PORT", "-80"}}), "MASTER_PORT=-80 is not a port number");
  EXPECT_ERROR_CONTAINS(read_world({{"MASTER_ADDR", ""}}), "MASTER_ADDR is set but empty");
  EXPECT_EQ(read_world({{"MASTER_PORT", "65535"}}).master_port, 65535);
  EXPECT_EQ(read_world({{"MASTER_PORT", "1"}}).master_port, 1);
}

TEST(WorldInfo, ProcessWorldMatchesTheEnvironmentAndIsCached) {
  WorldInfo expected = read_world_info(process_environment);
  const WorldInfo& world = world_info();
  EXPECT_EQ(&world, &world_info());
  expect_world(world, expected.rank, expected.world_size, expected.local_rank, expected.local_world_size);
  EXPECT_EQ(world.master_addr, expected.master_addr);
  EXPECT_EQ(world.master_port, expected.master_port);
  EXPECT_EQ(world.source, expected.source);
}

TEST(SlurmHostlist, ExpandsRangesAndKeepsZeroPadding) {
  EXPECT_THAT(expand_slurm_hostlist("node[01-04,07],gpu3"),
              ElementsAre("node01", "node02", "node03", "node04", "node07", "gpu3"));
  EXPECT_THAT(expand_slurm_hostlist("n[8-11]"), ElementsAre("n8", "n9", "n10", "n11"));
  EXPECT_THAT(expand_slurm_hostlist("n[098-101]"), ElementsAre("n098", "n099", "n100", "n101"));
  EXPECT_THAT(expand_slurm_hostlist("n[1-2]-ib,login"), ElementsAre("n1-ib", "n2-ib", "login"));
  EXPECT_THAT(expand_slurm_hostlist("r[1-2]n[1,3]"), ElementsAre("r1n1", "r1n3", "r2n1", "r2n3"));
  EXPECT_THAT(expand_slurm_hostlist("host.example.org"), ElementsAre("host.example.org"));
  EXPECT_THAT(expand_slurm_hostlist("[5-6]"), ElementsAre("5", "6"));
}

TEST(SlurmHostlist, RejectsMalformedLists) {
  for (const char* bad : {"", "a,,b", "a,", "n[1-", "n]1", "n[a-b]", "n[3-1]", "n[[1]]", "n[]", "n[1,]", "n[-2]"}) {
    EXPECT_ERROR_CONTAINS(expand_slurm_hostlist(bad), "is not a valid Slurm hostlist");
  }
  EXPECT_ERROR_CONTAINS(expand_slurm_hostlist("n[0-99999999999]"), "more than a million hosts");
  EXPECT_ERROR_CONTAINS(expand_slurm_hostlist("a[0-999]b[0-9999]"), "more than a million hosts");
}

TEST(SlurmTasksPerNode, ExpandsCompressedCounts) {
  EXPECT_THAT(expand_slurm_tasks_per_node("4(x2),3"), ElementsAre(4, 4, 3));
  EXPECT_THAT(expand_slurm_tasks_per_node("1"), ElementsAre(1));
  EXPECT_THAT(expand_slurm_tasks_per_node("2,1(x3)"), ElementsAre(2, 1, 1, 1));
}

TEST(SlurmTasksPerNode, RejectsMalformedCounts) {
  for (const char* bad : {"", "4,", "x", "-1", "4(x0)", "4(2)", "4(x2", "4(x2)3", "(x2)"}) {
    EXPECT_ERROR_CONTAINS(expand_slurm_tasks_per_node(bad), "is not a Slurm task count list");
  }
}

TEST(WorkerName, ZeroPadsToTheDigitsOfTheWorldSizeAsTorchOpt) {
  // TorchOpt: f'worker{rank:0{len(str(world_size))}d}'.
  EXPECT_EQ(worker_name(0, 1), "worker0");
  EXPECT_EQ(worker_name(0, 4), "worker0");
  EXPECT_EQ(worker_name(3, 4), "worker3");
  EXPECT_EQ(worker_name(0, 10), "worker00");
  EXPECT_EQ(worker_name(5, 10), "worker05");
  EXPECT_EQ(worker_name(9, 10), "worker09");
  EXPECT_EQ(worker_name(0, 11), "worker00");
  EXPECT_EQ(worker_name(10, 11), "worker10");
  EXPECT_EQ(worker_name(7, 16), "worker07");
  EXPECT_EQ(worker_name(0, 100), "worker000");
  EXPECT_EQ(worker_name(5, 100), "worker005");
  EXPECT_EQ(worker_name(99, 100), "worker099");
  EXPECT_EQ(worker_name(5, 101), "worker005");
  EXPECT_EQ(worker_name(100, 101), "worker100");
}

TEST(WorkerName, RejectsRanksOutsideTheWorld) {
  EXPECT_ERROR_CONTAINS(worker_name(16, 16), "rank 16 is not in a world of size 16");
  EXPECT_ERROR_CONTAINS(worker_name(-1, 4), "rank -1 is not in a world of size 4");
  EXPECT_ERROR_CONTAINS(worker_name(0, 0), "world size must be positive");
}

TEST(GetWorkerId, InvertsWorkerName) {
  for (int world_size : {1, 4, 10, 11, 16, 100}) {
    for (int rank = 0; rank < world_size; ++rank) {
      ASSERT_EQ(get_worker_id(worker_name(rank, world_size), world_size), rank);
    }
  }
  EXPECT_EQ(get_worker_id("worker07", 16), 7);
  EXPECT_EQ(get_worker_id("worker005", 100), 5);
}

TEST(GetWorkerId, AcceptsTheRankWithoutLeadingZerosToo) {
  for (int world_size : {1, 4, 10, 11, 16, 100}) {
    for (int rank = 0; rank < world_size; ++rank) {
      ASSERT_EQ(get_worker_id("worker" + std::to_string(rank), world_size), rank);
    }
  }
  EXPECT_EQ(get_worker_id("worker5", 10), 5);
  EXPECT_EQ(get_worker_id("worker05", 10), 5);
  EXPECT_EQ(get_worker_id("worker0", 100), 0);
  EXPECT_EQ(get_worker_id("worker000", 100), 0);
  EXPECT_EQ(find_worker_id("worker5", 100), 5);
}

TEST(GetWorkerId, RejectsOtherPaddings) {
  EXPECT_ERROR_CONTAINS(get_worker_id("worker05", 100), "\"worker05\" is not a worker name in a world of size 100",
                        "expected worker000..worker099, or unpadded worker0..worker99");
  EXPECT_ERROR_CONTAINS(get_worker_id("worker00", 4), "\"worker00\"", "size 4", "expected worker0..worker3)");
  EXPECT_ERROR_CONTAINS(get_worker_id("worker007", 16), "\"worker007\"", "size 16");
  EXPECT_ERROR_CONTAINS(get_worker_id("worker0005", 100), "\"worker0005\"", "size 100");
  EXPECT_EQ(find_worker_id("worker05", 100), std::nullopt);
}

TEST(GetWorkerId, RejectsNamesOutsideTheWorld) {
  EXPECT_ERROR_CONTAINS(get_worker_id("worker16", 16), "\"worker16\" is not a worker name in a world of size 16",
                        "expected worker00..worker15, or unpadded worker0..worker15)");
  EXPECT_ERROR_CONTAINS(get_worker_id("worker10", 10), "\"worker10\"", "size 10",
                        "expected worker00..worker09, or unpadded worker0..worker9)");
  EXPECT_ERROR_CONTAINS(get_worker_id("worker1", 1), "\"worker1\"", "size 1", "expected worker0)");
  for (const char* bad : {"", "worker", "trainer03", "worker-1", "worker+1", "worker0a", "Worker03", "worker 3",
                          "worker99999999999999999999"}) {
    EXPECT_ERROR_CONTAINS(get_worker_id(bad, 16), "is not a worker name in a world of size 16");
  }
  EXPECT_ERROR_CONTAINS(get_worker_id("worker0", 0), "world size must be positive");
  EXPECT_ERROR_CONTAINS(find_worker_id("worker0", 0), "world size must be positive");
}

}  // namespace
}  // namespace distgrad::rendezvous
