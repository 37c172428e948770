// For the gtest side of multi-process tests (tests/rpc/multiprocess.h): assertions on how a
// world's processes ended.
//
//   ASSERT_TRUE(all_succeeded(run_world(kWorker, {"scenario"}, 3)));
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "tests/rpc/multiprocess.h"

namespace distgrad::rpc::testing {

// Success when every rank exited 0; otherwise a failure that describes every rank.
inline ::testing::AssertionResult all_succeeded(const std::vector<ProcessResult>& results) {
  for (const ProcessResult& result : results) {
    if (!result.succeeded()) return ::testing::AssertionFailure() << "\n" << describe(results);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace distgrad::rpc::testing
