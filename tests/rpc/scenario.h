// For the workers of multi-process tests (`WORKER SCENARIO`, run by run_world of multiprocess.h as
// every rank of a world): checks and messages, and the main.
//
//   int main(int argc, char** argv) { return scenario_main(argc, argv, scenarios()); }
//
// scenario_main runs the named scenario and returns its exit code. An exception from it is printed as
// "[workerN] error: ..." and ends the worker with code 1 after an abrupt shutdown (the first
// error is the one reported); a missing or unknown name prints the usage, with every scenario's
// name, and returns 2.
#pragma once

#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/allocator.h"
#include "rpc/rpc.h"

namespace distgrad::rpc::testing {

// A failed check of a scenario.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The parts written one after the other.
template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// Prints "[workerN] parts..." as one line on stdout.
template <typename... Parts>
void say(const Parts&... parts) {
  const std::string line = str("[", get_worker_name(), "] ", parts..., "\n");
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

// Throws a Failure saying `parts...` unless `condition`.
template <typename... Parts>
void require(bool condition, const Parts&... parts) {
  if (!condition) throw Failure(str(parts...));
}

inline void require_contains(const std::string& text, const std::string& fragment, const std::string& what) {
  require(text.find(fragment) != std::string::npos, what, ": expected \"", fragment, "\" in \"", text, "\"");
}

// Runs `call`, which must throw distgrad::Error; returns its message.
template <typename F>
std::string expect_error(const std::string& what, F&& call) {
  try {
    call();
  } catch (const Error& error) {
    say(what, ": ", error.what());
    return error.what();
  }
  throw Failure(what + ": expected an error, there was none");
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A memory figure of this process from /proc/self/status, in bytes: "VmRSS" (resident now),
// "VmHWM" (the peak of resident).
inline int64_t memory_status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  throw Failure("no " + field + " in /proc/self/status");
}

// The heap this process's objects hold: the bytes malloc has handed out and not had back, in every
// arena, mmapped blocks included, less the freed blocks distgrad's CPU allocator keeps for reuse
// (every thread's, up to 4 MiB of small ones each). Unlike the resident set it counts no free
// pages, and unlike malloc's figure alone no caches that grow with the threads a workload wakes.
inline int64_t heap_in_use_bytes() {
  const struct mallinfo2 info = ::mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd) - static_cast<int64_t>(cached_cpu_bytes_of_every_thread());
}

// What the fast paths' variables (docs/rpc.md, "Fast paths") say a scenario should expect: whether
// the 0/1 variable `name` is unset or not 0 (DISTGRAD_GRPC_ONLY: whether it is not 1).
inline bool switched_on(const char* name) {
  const char* setting = std::getenv(name);
  if (std::string(name) == "DISTGRAD_GRPC_ONLY") return setting == nullptr || std::string(setting) != "1";
  return setting == nullptr || std::string(setting) != "0";
}
inline bool grpc_only() { return !switched_on("DISTGRAD_GRPC_ONLY"); }
// Whether peers on this host count as such, shared memory is on, sockets take calls, and calls to
// oneself skip the socket (RpcOptions::loopback).
inline bool same_host_on() { return !grpc_only() && switched_on("DISTGRAD_SAME_HOST"); }
inline bool shared_memory_on() { return same_host_on() && switched_on("DISTGRAD_SHM"); }
inline bool socket_calls_on() { return !grpc_only() && switched_on("DISTGRAD_SOCKET_CALLS"); }
inline bool loopback_on() { return same_host_on() && socket_calls_on() && switched_on("DISTGRAD_LOOPBACK"); }

// The Store key under which the agent publishes `rank`'s rendezvous entry (Note [Rendezvous entry]
// in rpc/agent.cc).
inline std::string rendezvous_entry_key(int rank) {
  const char* run_id = std::getenv("DISTGRAD_RUN_ID");
  const char* restart = std::getenv("DISTGRAD_RESTART_COUNT");
  return str("rpc/", run_id != nullptr && *run_id != '\0' ? run_id : "none", "/",
             restart != nullptr && *restart != '\0' ? restart : "0", "/address/", rank);
}

inline int scenario_main(int argc, char** argv, const std::map<std::string, std::function<int()>>& scenarios) {
  const auto scenario = argc == 2 ? scenarios.find(argv[1]) : scenarios.end();
  if (scenario == scenarios.end()) {
    std::fprintf(stderr, "usage: %s SCENARIO\nscenarios:", argv[0]);
    for (const auto& [name, run] : scenarios) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  try {
    return scenario->second();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "[%s] error: %s\n", get_worker_name().c_str(), error.what());
    std::fflush(stderr);
    try {
      shutdown(false);
    } catch (const std::exception&) {  // already failing: the first error is the one to report
    }
    return 1;
  }
}

}  // namespace distgrad::rpc::testing
