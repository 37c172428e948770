// Preemption notices: the signal a scheduler sends a job before it preempts it or its time runs
// out (Slurm's `--signal=USR1@90`), and requeueing a Slurm job, as PyTorch Lightning's
// SLURMEnvironment(auto_requeue=True) does: the program saves its checkpoint at its next safe
// point, rank 0 requeues the job, and the requeued job resumes from the checkpoint
// (docs/fault-tolerance.md, "Slurm preemption").
//
//   dg::watch_for_preemption();                  // SIGUSR1, or DISTGRAD_REQUEUE_SIGNAL's
//   for (int step = start; step < steps; ++step) {
//     if (dg::preemption_requested()) {          // the signal arrived
//       save_checkpoint(path, step);
//       if (dg::get_rank() == 0) dg::requeue_slurm_job();
//       return;
//     }
//     train_step();
//   }
//
// distgrad-run passes SIGUSR1 and SIGUSR2 on to every worker (docs/launching.md), so the same
// program works under `srun distgrad-run ...` and under `srun` alone.
#pragma once

#include <string>

#include "rendezvous/world.h"

namespace distgrad::rendezvous {

// The signal of preemption notices: DISTGRAD_REQUEUE_SIGNAL ("USR1", "SIGUSR2", "TERM", a
// number) or SIGUSR1. Throws naming the variable when it names no signal.
int requeue_signal(const EnvLookup& getenv);

// Installs a handler of requeue_signal() (or of `signal`) that records the notice; idempotent.
// Returns the signal.
int watch_for_preemption();
int watch_for_preemption(int signal);

// Whether a preemption notice arrived since watch_for_preemption.
bool preemption_requested();

// The Slurm job to requeue: SLURM_JOB_ID, or SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID for a task
// of an array job ("1234_7"). Throws when the environment has no Slurm job.
std::string slurm_job_to_requeue(const EnvLookup& getenv);

// Runs `scontrol requeue JOB` for this process's job (slurm_job_to_requeue); throws with
// scontrol's output when it fails or is not found.
void requeue_slurm_job();

}  // namespace distgrad::rendezvous

namespace distgrad {
using rendezvous::preemption_requested;
using rendezvous::requeue_slurm_job;
using rendezvous::watch_for_preemption;
}  // namespace distgrad
