// The main of a multi-process test worker: `WORKER SCENARIO`, run by run_world (multiprocess.h)
// as every rank of a world.
//
//   int main(int argc, char** argv) { return scenario_main(argc, argv, scenarios()); }
//
// Runs the named scenario and returns its exit code. An exception from it is printed as
// "[workerN] error: ..." and ends the worker with code 1 after an abrupt shutdown (the first
// error is the one reported); a missing or unknown name prints the usage, with every scenario's
// name, and returns 2.
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <string>

#include "rpc/rpc.h"

namespace distgrad::rpc::testing {

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
