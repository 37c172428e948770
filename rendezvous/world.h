// World info: who this process is in a distributed job (rank, world size, local rank, local
// world size) and where the rendezvous Store lives (master address and port), read from the
// environment the launcher left, plus the worker names derived from ranks.
//
// Launchers are recognised in this order (docs/rpc.md, "World info"):
//   1. torchrun / distgrad's launcher: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (when RANK
//      or WORLD_SIZE is set; missing ones default to 0, 1, 0, 1);
//   2. Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the tasks on this node from
//      SLURM_TASKS_PER_NODE or SLURM_NTASKS_PER_NODE ("4(x2),3" form, entry SLURM_NODEID), the
//      master from SLURM_LAUNCH_NODE_IPADDR or the first host of SLURM_JOB_NODELIST, and the
//      port 15000 + SLURM_JOB_ID % 10000;
//   3. Open MPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
//   4. otherwise a single process: rank 0 of 1.
// MASTER_ADDR and MASTER_PORT override the master in every case (default 127.0.0.1:29500).
// Every value is checked; a bad one throws distgrad::Error naming the variable and its value:
//
//   const rendezvous::WorldInfo& world = rendezvous::world_info();
//   std::string me = rendezvous::worker_name(world.rank, world.world_size);  // "worker03" of 16
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distgrad::rendezvous {

// This process's place in the job and the address of the rendezvous Store.
struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // rank among the processes on this machine
  int local_world_size = 1;  // number of processes on this machine
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "default";  // "torchrun", "slurm", "openmpi" or "default"
};

// Looks up an environment variable: its value, or nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

// The process's own environment as an EnvLookup: a variable's value, nullopt when unset.
std::optional<std::string> process_environment(std::string_view name);

// The value of environment variable `name`, or `fallback` when it is unset or empty.
std::string getenv_or(const char* name, const std::string& fallback);

// A 0/1 switch from the environment: nullopt when `name` is unset or empty; throws
// distgrad::Error "WHO: NAME=VALUE is not 0 or 1" for any other value.
std::optional<bool> getenv_switch(const char* name, std::string_view who);
// A number of bytes from the environment (a decimal integer), when set; throws naming `who` and
// the variable when it is not one.
std::optional<uint64_t> getenv_bytes(const char* name, std::string_view who);

// The environment's limit on the messages a server accepts, DISTGRAD_MAX_MESSAGE_BYTES (0 or
// unset: no limit). Read by the Store and by init_rpc (RpcOptions::max_message_bytes).
inline constexpr char kMaxMessageBytesVariable[] = "DISTGRAD_MAX_MESSAGE_BYTES";

// The world of this process, read from the environment on the first call and cached
// (thread-safe). Throws distgrad::Error on a bad value (and again on the next call).
const WorldInfo& world_info();

// The same rules over any environment: `getenv` returns a variable's value or nullopt.
WorldInfo read_world_info(const EnvLookup& getenv);

// The hosts of a Slurm hostlist, in order: "node[01-03,07],gpu3" -> node01, node02, node03,
// node07, gpu3. Bracket ranges keep the zero padding of their lower bound; several bracket
// groups in one name expand left to right ("r[1-2]n[1-2]" -> r1n1, r1n2, r2n1, r2n2). Throws
// distgrad::Error on a malformed list or one of more than a million hosts.
std::vector<std::string> expand_slurm_hostlist(std::string_view hostlist);

// The task counts of each node from Slurm's compressed form: "4(x2),3" -> 4, 4, 3. Throws
// distgrad::Error on a malformed value.
std::vector<int> expand_slurm_tasks_per_node(std::string_view tasks_per_node);

// "worker{rank}", the rank zero-padded to the number of digits of world_size, as TorchOpt names
// workers (f'worker{rank:0{len(str(world_size))}d}'): worker0..worker3 for 4, worker00..worker09
// for 10, worker000..worker099 for 100. Throws unless 0 <= rank < world_size.
std::string worker_name(int rank, int world_size);

// The rank a worker name spells in a world of `world_size`, or std::nullopt when it spells none.
// Two spellings are accepted: worker_name's, zero-padded ("worker05" -> 5 when world_size is 16),
// and the rank without leading zeros ("worker5"); any other padding ("worker05" when world_size
// is 100) is refused. Throws only when world_size is not positive.
std::optional<int> find_worker_id(std::string_view name, int world_size);

// find_worker_id, throwing distgrad::Error naming the name, the world size and the names
// expected when `name` is not one of the world's worker names.
int get_worker_id(std::string_view name, int world_size);

}  // namespace distgrad::rendezvous
