#!/usr/bin/env bash
# Starts a world of N processes of one program on this machine, as `distgrad-run
# --nproc-per-node N` will once the launcher lands (issue 7): each gets RANK, WORLD_SIZE,
# LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT and a random job
# token. When one process fails, the others get 15 s to finish before they are killed; Ctrl-C
# stops them all. Exits with the first failure's status (0 when every process succeeded).
#
#   scripts/run_local_world.sh --nproc-per-node 4 build/examples/maml_sinusoid --iterations 500
set -euo pipefail

usage() {
  echo "usage: $0 --nproc-per-node N PROGRAM [ARGS...]" >&2
  exit 2
}
[[ $# -ge 3 && $1 == --nproc-per-node ]] || usage
nproc=$2
shift 2
[[ $nproc =~ ^[1-9][0-9]*$ ]] || { echo "$0: --nproc-per-node expects a positive integer, got '$nproc'" >&2; exit 2; }
[[ -x $1 ]] || { echo "$0: $1 is not an executable program (build it first: scripts/build.sh)" >&2; exit 2; }

# A port nothing listens on (checked against the kernel's socket tables).
port_in_use() {
  local hex
  hex=$(printf ':%04X ' "$1")
  grep -qi -- "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
port=$((20000 + RANDOM % 40000))
while port_in_use "$port"; do port=$((20000 + RANDOM % 40000)); done

export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=$nproc LOCAL_WORLD_SIZE=$nproc
export DISTGRAD_TOKEN=${DISTGRAD_TOKEN:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}

pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
}
trap 'stop_all; exit 130' INT TERM

for ((rank = 0; rank < nproc; ++rank)); do
  RANK=$rank LOCAL_RANK=$rank "$@" &
  pids+=($!)
done

status=0
running=("${pids[@]}")
while ((${#running[@]} > 0)); do
  code=0
  wait -n -p finished "${running[@]}" || code=$?
  still=()
  for pid in "${running[@]}"; do [[ $pid == "$finished" ]] || still+=("$pid"); done
  running=("${still[@]}")
  if ((code != 0 && status == 0)); then
    status=$code
    echo "$0: a process exited with status $code; stopping the others within 15 s" >&2
    (sleep 15 && for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done) &
    killer=$!
  fi
done
if [[ -n ${killer:-} ]]; then kill "$killer" 2>/dev/null || true; fi
exit "$status"
