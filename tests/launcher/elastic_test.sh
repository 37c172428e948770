#!/usr/bin/env bash
# An elastic job (--nnodes 1:2) on two simulated hosts (scripts/netns_hosts.sh) with the c10d or
# the etcd rendezvous backend: launch_worker's `elastic` loop runs at a world of 2, a host's
# launcher is SIGKILLed (its worker dies with it), the other host's launcher re-forms the job at
# a world of 1, which resumes from the checkpoint; the host's launcher is started again, the job
# grows back to a world of 2, resumes again and finishes. With c10d the lost host is node2 (node1
# serves the rendezvous); with etcd (started here in the switch namespace) it is node1, node 0 of
# the job and host of its workers' Store: etcd outlives it. Exit 77 (skipped) without the
# privilege to create namespaces, or without etcd for the etcd backend.
#   elastic_test.sh DISTGRAD_RUN LAUNCH_WORKER c10d|etcd
set -euo pipefail
run=$1 worker=$2 backend=$3
case $backend in
  c10d) export SIM_PREFIX=dgelc- SIM_SUBNET=10.231.10 ;;
  etcd) export SIM_PREFIX=dgele- SIM_SUBNET=10.231.11 ;;
  *) echo "usage: elastic_test.sh DISTGRAD_RUN LAUNCH_WORKER c10d|etcd"; exit 2 ;;
esac
if [ "$backend" = etcd ] && ! command -v etcd >/dev/null; then
  echo "SKIP: etcd is not installed (Debian's etcd-server)"
  exit 77
fi
# shellcheck source=../two_netns_hosts.sh
source "$(dirname "$0")/../two_netns_hosts.sh"
mkdir "$out/checkpoint"

if [ "$backend" = etcd ]; then
  endpoint=$SIM_SUBNET.254:2379 lost=node1 survivor=node2
  "$hosts" exec login etcd --data-dir "$out/etcd" --listen-client-urls "http://$endpoint" \
    --advertise-client-urls "http://$endpoint" --listen-peer-urls "http://$SIM_SUBNET.254:2380" \
    --initial-advertise-peer-urls "http://$SIM_SUBNET.254:2380" \
    --initial-cluster "default=http://$SIM_SUBNET.254:2380" --log-level error >"$out/etcd.log" 2>&1 &
  for _ in $(seq 100); do
    "$hosts" exec login bash -c "echo >/dev/tcp/${endpoint/://}" 2>/dev/null && break
    sleep 0.1
  done
else
  endpoint=$SIM_SUBNET.1:29400 lost=node2 survivor=node1
fi

# start_launcher HOST LOG: this host's launcher of the job, in the background.
start_launcher() {
  timeout 120 "$hosts" exec "$1" env DISTGRAD_TOKEN="$token" OMP_NUM_THREADS=1 "$run" --nnodes 1:2 \
    --nproc-per-node 1 --max-restarts 5 --rdzv-backend "$backend" --rdzv-endpoint "$endpoint" --rdzv-id "elastic" \
    --rdzv-conf join_timeout=60,last_call_timeout=3,keep_alive_interval=0.5 "$worker" elastic "$out/checkpoint" \
    >"$2" 2>&1 &
}
# wait_for PATTERN FILES...: until a line matches (60 s at most).
wait_for() {
  local pattern=$1; shift
  for _ in $(seq 600); do
    cat "$@" 2>/dev/null | grep -q "$pattern" && return 0
    sleep 0.1
  done
  echo "FAIL: no line matching '$pattern' within 60 s"
  for log in "$@"; do sed "s|^|$(basename "$log")\| |" "$log"; done
  exit 1
}

start_launcher node1 "$out/node1.log"
pid_node1=$!
sleep 1  # node1 arrives first: node 0 of the job
start_launcher node2 "$out/node2.log"
pid_node2=$!
wait_for 'step 3 of world 2 in round 0' "$out/node1.log"
grep -q 'elastic round 0: node 0 of 2, ranks 0-0 of 2' "$out/node1.log" || { echo "FAIL: node1 is not node 0"; exit 1; }

# The lost host: its launcher is SIGKILLed (the namespace's distgrad-run, by its name).
for pid in $(ip netns pids "${SIM_PREFIX}$lost"); do
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = distgrad-run ] && kill -9 "$pid"
done
wait "$(eval echo "\$pid_$lost")" || true
wait_for 'step [0-9]* of world 1 in round' "$out/$survivor.log"
wait_for 'step [0-9]* of world 1 in round' "$out/$survivor.log"  # and it makes progress:
last_single=$(grep -c 'of world 1 in round' "$out/$survivor.log")
for _ in $(seq 100); do
  [ "$(grep -c 'of world 1 in round' "$out/$survivor.log")" -ge $((last_single + 2)) ] && break
  sleep 0.1
done

start_launcher "$lost" "$out/$lost.back.log"
pid_back=$!
status=0
wait "$(eval echo "\$pid_$survivor")" || status=$?
wait "$pid_back" || status=$?
for log in "$out"/node*.log; do sed "s|^|$(basename "$log")\| |" "$log"; done
[ "$status" = 0 ] || { echo "FAIL: a launcher exited with $status"; exit 1; }

# The steps in the order they ran: world 2 (round 0), world 1 (a later round), world 2 again.
steps=$(cat "$out/$lost.log" "$out/$survivor.log" "$out/$lost.back.log" | sed -n 's/^\[0\] step \([0-9]*\) of world \([12]\) in round \([0-9]*\)$/\3 \1 \2/p' | sort -n -k1,1 -k2,2 -s)
echo "$steps" | awk '
  BEGIN { round = -1 }
  { if ($1 != round) { first[$1] = $2; worlds = worlds " " $3 "@" $1; round = $1 } last[$1] = $2; world[$1] = $3 }
  END {
    n = split(worlds, seen, " ")
    shrunk = 0; grew = 0; previous_last = -1
    for (i = 1; i <= n; i++) {
      split(seen[i], w, "@"); r = w[2]
      if (i > 1 && first[r] < previous_last) { print "FAIL: round " r " started at step " first[r] " behind the checkpoint " previous_last; exit 1 }
      if (w[1] == 1 && i > 1) shrunk = 1
      if (w[1] == 2 && shrunk) grew = 1
      previous_last = last[r]
    }
    if (!shrunk || !grew || last[r] != 39) { print "FAIL: expected worlds 2, 1, 2 up to step 39; rounds:" worlds; exit 1 }
    print "rounds (world@round):" worlds
  }'
grep -q '^\[0\] finished 40 steps$' "$out/$survivor.log" || { echo "FAIL: the job did not finish its 40 steps"; exit 1; }
echo "elastic ($backend): lost $lost, continued at a world of 1 from the checkpoint, grew back to 2 and finished"
