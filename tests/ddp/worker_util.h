// For the ranks of the ddp multi-process tests (run by run_world of tests/rpc/multiprocess.h):
// scenario.h's checks, with messages that name the rank (these ranks run no RPC agent, which
// scenario.h's messages ask for their worker name), and the main that runs a named scenario.
//
//   int main(int argc, char** argv) { return run_scenario(argc, argv, scenarios()); }
//
// A scenario returns the process's exit code; an exception is printed as "[rank N] error: ..."
// and ends the process with code 1.
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include "core/error.h"
#include "rendezvous/world.h"
#include "tests/rpc/scenario.h"  // Failure, str, require

namespace distgrad::ddp::testing {

using rpc::testing::Failure;
using rpc::testing::require;
using rpc::testing::str;

// Prints "[rank N] parts..." as one line.
template <typename... Parts>
void say(const Parts&... parts) {
  const std::string line = str("[rank ", rendezvous::world_info().rank, "] ", parts..., "\n");
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

inline void require_near(double found, double expected, double tolerance, const std::string& what) {
  require(std::abs(found - expected) <= tolerance, what, ": expected ", expected, ", found ", found);
}

// Runs `call`, which must throw distgrad::Error with `fragment` in its message; returns it.
template <typename F>
std::string expect_error(const std::string& what, const std::string& fragment, F&& call) {
  try {
    call();
  } catch (const Error& error) {
    const std::string message = error.what();
    require(message.find(fragment) != std::string::npos, what, ": expected \"", fragment, "\" in \"", message, "\"");
    say(what, ": ", message);
    return message;
  }
  throw Failure(what + ": expected an error, there was none");
}

inline int run_scenario(int argc, char** argv, const std::map<std::string, std::function<int()>>& scenarios) {
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
    std::fprintf(stderr, "[rank %d] error: %s\n", rendezvous::world_info().rank, error.what());
    std::fflush(stderr);
    return 1;
  }
}

}  // namespace distgrad::ddp::testing
