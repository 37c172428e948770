// Preemption notices and Slurm requeueing (rendezvous/preemption.h) in one process: the signal's
// name from the environment, the job a requeue names, and a notice recorded by the handler.
#include "rendezvous/preemption.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <map>
#include <string>

#include "core/error.h"

namespace distgrad::rendezvous {
namespace {

using ::testing::HasSubstr;

EnvLookup environment(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](std::string_view name) -> std::optional<std::string> {
    const auto found = variables.find(std::string(name));
    if (found == variables.end()) return std::nullopt;
    return found->second;
  };
}

TEST(Preemption, TheRequeueSignalIsUsr1OrTheOneTheEnvironmentNames) {
  EXPECT_EQ(requeue_signal(environment({})), SIGUSR1);
  EXPECT_EQ(requeue_signal(environment({{"DISTGRAD_REQUEUE_SIGNAL", ""}})), SIGUSR1);
  EXPECT_EQ(requeue_signal(environment({{"DISTGRAD_REQUEUE_SIGNAL", "USR2"}})), SIGUSR2);
  EXPECT_EQ(requeue_signal(environment({{"DISTGRAD_REQUEUE_SIGNAL", "sigterm"}})), SIGTERM);
  EXPECT_EQ(requeue_signal(environment({{"DISTGRAD_REQUEUE_SIGNAL", "10"}})), 10);
  try {
    requeue_signal(environment({{"DISTGRAD_REQUEUE_SIGNAL", "USR3"}}));
    ADD_FAILURE() << "USR3 must be refused";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("DISTGRAD_REQUEUE_SIGNAL=USR3 names no signal"));
  }
  EXPECT_THROW(requeue_signal(environment({{"DISTGRAD_REQUEUE_SIGNAL", "0"}})), Error);
}

TEST(Preemption, ARequeueNamesTheJobOrTheArrayTask) {
  EXPECT_EQ(slurm_job_to_requeue(environment({{"SLURM_JOB_ID", "1234"}})), "1234");
  EXPECT_EQ(slurm_job_to_requeue(
                environment({{"SLURM_JOB_ID", "1240"}, {"SLURM_ARRAY_JOB_ID", "1234"}, {"SLURM_ARRAY_TASK_ID", "6"}})),
            "1234_6");
  try {
    slurm_job_to_requeue(environment({}));
    ADD_FAILURE() << "a requeue outside Slurm must be refused";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("not in a Slurm job (SLURM_JOB_ID is unset)"));
  }
}

// scontrol fails for a job no controller knows (or is not installed): the error names the command
// and carries its output.
TEST(Preemption, AFailedRequeueNamesTheCommand) {
  ASSERT_EQ(setenv("SLURM_JOB_ID", "999999", 1), 0);
  try {
    requeue_slurm_job();
    ADD_FAILURE() << "requeueing job 999999 must fail";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("requeue_slurm_job: 'scontrol requeue 999999' failed (status "));
  }
  unsetenv("SLURM_JOB_ID");
}

TEST(Preemption, ANoticeIsRecordedWhenItsSignalArrives) {
  EXPECT_EQ(watch_for_preemption(SIGUSR2), SIGUSR2);
  EXPECT_FALSE(preemption_requested());
  ASSERT_EQ(raise(SIGUSR2), 0);
  EXPECT_TRUE(preemption_requested());
}

}  // namespace
}  // namespace distgrad::rendezvous
