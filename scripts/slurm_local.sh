#!/usr/bin/env bash
# slurm_local.sh — a throwaway Slurm cluster on one Debian 12 machine, for tests (root only): the
# project's copy of ../shared/tools/slurm_local.sh, with its own state folder and namespaces.
#
#   slurm_local.sh start [--cpus C]      single node "localhost" (127.0.0.1) with C CPUs (default 8,
#                                        oversubscribing the real cores via SlurmdParameters=config_overrides)
#   slurm_local.sh start --hosts N [--cpus C]
#                                        N simulated hosts node1..nodeN, each a network namespace
#                                        (netns_hosts.sh, 10.231.9.I) running its own slurmd;
#                                        slurmctld runs in the "login" namespace (10.231.9.254)
#   slurm_local.sh run CMD...            run CMD where srun/sbatch can reach the controller
#                                        (plain exec in single mode, the "login" namespace in --hosts mode)
#   slurm_local.sh status                sinfo/squeue
#   slurm_local.sh node-kill nodeI       --hosts mode: SIGKILL everything in nodeI's namespace (host crash);
#                                        the controller marks it down after SlurmdTimeout=10 s
#   slurm_local.sh node-start nodeI      --hosts mode: start nodeI's slurmd again (ReturnToService=2 -> idle)
#   slurm_local.sh stop                  kill the daemons it started (by PID), remove config/state/namespaces
#
# start is idempotent: a cluster already up with the same shape is left alone, another shape is
# stopped and restarted. Installs slurmctld/slurmd/slurm-client/munge (+ nftables) when missing.
# Files: /etc/slurm/slurm.conf (a pre-existing one is kept aside and restored by stop),
#        $SLURM_LOCAL_DIR (default /var/tmp/distgrad_slurm_local): state, spool, logs, pid files.
set -euo pipefail

D=${SLURM_LOCAL_DIR:-/var/tmp/distgrad_slurm_local}
CONF=/etc/slurm/slurm.conf
MARK="# managed by slurm_local.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NETNS=${NETNS_HOSTS:-$HERE/netns_hosts.sh}
export SIM_PREFIX=${SIM_PREFIX:-dgslurm-} SIM_SUBNET=${SIM_SUBNET:-10.231.9}

die() { echo "slurm_local: $*" >&2; exit 1; }
log() { echo "slurm_local: $*" >&2; }
[ "$(id -u)" = 0 ] || die "must run as root"

ensure_packages() {
  local need=()
  command -v slurmctld >/dev/null || need+=(slurmctld)
  command -v slurmd    >/dev/null || need+=(slurmd)
  command -v srun      >/dev/null || need+=(slurm-client)
  command -v munged    >/dev/null || need+=(munge)
  [ "${1:-}" = hosts ] && ! command -v nft >/dev/null && need+=(nftables)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    [ -n "$(find /var/lib/apt/lists -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ] \
      || apt-get -o DPkg::Lock::Timeout=900 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
      --no-install-recommends "${need[@]}" >/dev/null
  fi
}

alive() {  # pid file names a live (non-zombie) process; PID 1 here reaps daemons late
  local p; p=$(cat "$1" 2>/dev/null) && [ -r "/proc/$p/stat" ] && [ "$(awk '{print $3}' "/proc/$p/stat")" != Z ]; }

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi   # someone's munged works: use it
  [ -s /etc/munge/munge.key ] || { mkdir -p /etc/munge
    if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key --force
    else dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; fi
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge; chmod 755 /run/munge
  runuser -u munge -- /usr/sbin/munged --force
  local i; for i in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
  cp /run/munge/munged.pid "$D/munged.pid"        # we started it, so stop ends it
  munge -n | unmunge >/dev/null || die "munged started but munge/unmunge fails (see /var/log/munge/munged.log)"
}

write_conf() {  # $1 = hosts (0 = single node), $2 = cpus
  local n=$1 cpus=$2 ctl nodes part
  if [ "$n" = 0 ]; then
    ctl="$(hostname -s)(127.0.0.1)"
    nodes="NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$cpus RealMemory=4096 State=UNKNOWN"
    part=localhost
  else
    ctl="login(${SIM_SUBNET}.254)"
    nodes=""; local i; for i in $(seq 1 "$n"); do
      nodes+="NodeName=node$i NodeAddr=${SIM_SUBNET}.$i NodeHostname=node$i CPUs=$cpus RealMemory=4096 State=UNKNOWN"$'\n'; done
    part="node[1-$n]"
  fi
  if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF" && [ ! -f "$D/slurm.conf.orig" ]; then
    cp -p "$CONF" "$D/slurm.conf.orig"; fi
  mkdir -p /etc/slurm
  cat > "$CONF" <<EOF
$MARK (shape: hosts=$n cpus=$cpus) — removed by "slurm_local.sh stop"
ClusterName=local
SlurmctldHost=$ctl
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
SlurmdTimeout=10
MessageTimeout=5
UnkillableStepTimeout=30
InactiveLimit=0
MinJobAge=60
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmdSpoolDir=$D/spool/%n
StateSaveLocation=$D/state
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
$nodes
PartitionName=debug Nodes=$part Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

in_ctl() {  # run a command where the controller is reachable
  if [ "$(cat "$D/hosts" 2>/dev/null || echo 0)" = 0 ]; then "$@"; else "$NETNS" exec login "$@"; fi
}

wait_idle() {
  local n=$1 want i; want=$([ "$n" = 0 ] && echo 1 || echo "$n")
  for i in $(seq 1 300); do
    local idle; idle=$(in_ctl sinfo -h -N -o '%t' 2>/dev/null | grep -cE '^(idle|mix|alloc)$' || true)
    [ "$idle" = "$want" ] && return 0
    sleep 0.2
  done
  in_ctl sinfo -N -l >&2 || true; tail -20 "$D"/log/*.log >&2 || true
  die "nodes not idle after 60 s"
}

start() {
  local n=0 cpus=8
  while [ $# -gt 0 ]; do case "$1" in
    --hosts) n=$2; shift 2 ;; --cpus) cpus=$2; shift 2 ;; *) die "unknown option $1" ;; esac; done
  [[ "$n" =~ ^[0-9]+$ ]] && [[ "$cpus" =~ ^[0-9]+$ ]] && [ "$cpus" -ge 1 ] || die "bad --hosts/--cpus"
  [ "$n" = 1 ] && die "--hosts needs N>=2 (use plain start for one node)"
  if [ -f "$D/shape" ] && [ "$(cat "$D/shape")" = "$n $cpus" ] && alive "$D/slurmctld.pid"; then
    log "already running (hosts=$n cpus=$cpus)"; return 0; fi
  [ -f "$D/shape" ] && stop
  ensure_packages "$([ "$n" = 0 ] || echo hosts)"
  mkdir -p "$D/state" "$D/log" "$D/spool"
  start_munge
  write_conf "$n" "$cpus"
  echo "$n" > "$D/hosts"
  if [ "$n" = 0 ]; then
    mkdir -p "$D/spool/localhost"
    slurmctld -c -i
    slurmd -N localhost
  else
    "$NETNS" up "$n" >/dev/null
    "$NETNS" exec login slurmctld -c -i
    local i; for i in $(seq 1 "$n"); do mkdir -p "$D/spool/node$i"; "$NETNS" exec "node$i" slurmd -N "node$i"; done
  fi
  echo "$n $cpus" > "$D/shape"
  wait_idle "$n"
  log "up: $(in_ctl sinfo -h -o '%P %D nodes %t %N' | tr '\n' ' ')"
}

stop() {
  local f pid
  # cancel jobs first so slurmstepd and the tasks end too (they outlive a killed slurmd)
  if alive "$D/slurmctld.pid"; then
    in_ctl scancel --full --user=root 2>/dev/null || true
    local j; for j in $(seq 50); do [ -z "$(in_ctl squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for f in "$D"/slurmd-*.pid "$D/slurmctld.pid"; do
    pid=$(cat "$f" 2>/dev/null) || continue
    kill -0 "$pid" 2>/dev/null && kill "$pid" 2>/dev/null || true
  done
  # wait up to 10 s, then SIGKILL what is left (still only the PIDs we recorded)
  local i; for i in $(seq 50); do
    local left=0; for f in "$D"/slurmd-*.pid "$D/slurmctld.pid"; do alive "$f" && left=1; done
    [ $left = 0 ] && break; sleep 0.2; done
  for f in "$D"/slurmd-*.pid "$D/slurmctld.pid"; do alive "$f" && kill -9 "$(cat "$f" 2>/dev/null)" 2>/dev/null || true; done
  if [ -f "$D/munged.pid" ]; then pid=$(cat "$D/munged.pid")
    [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = munged ] && kill "$pid" 2>/dev/null || true; fi
  if [ "$(cat "$D/hosts" 2>/dev/null || echo 0)" != 0 ]; then "$NETNS" down >/dev/null; fi
  if [ -f "$CONF" ] && grep -qF "$MARK" "$CONF"; then rm -f "$CONF"; fi
  [ -f "$D/slurm.conf.orig" ] && mv "$D/slurm.conf.orig" "$CONF"
  rm -rf "$D"
  log "stopped"
}

cmd=${1:-}; shift || true
case "$cmd" in
  start|up) start "$@" ;;
  stop|down) stop ;;
  status) [ -f "$D/shape" ] || { echo "slurm_local: not running"; exit 1; }; in_ctl sinfo -N; in_ctl squeue ;;
  node-kill) [ -f "$D/shape" ] && [ "$(cat "$D/hosts")" != 0 ] || die "needs a --hosts cluster"
    [[ "${1:-}" =~ ^node[0-9]+$ ]] || die "usage: node-kill nodeI"
    pids=$(ip netns pids "${SIM_PREFIX}$1"); [ -n "$pids" ] && kill -9 $pids; log "killed $1 (pids: $(echo $pids))" ;;
  node-start) [ -f "$D/shape" ] && [ "$(cat "$D/hosts")" != 0 ] || die "needs a --hosts cluster"
    [[ "${1:-}" =~ ^node[0-9]+$ ]] || die "usage: node-start nodeI"
    alive "$D/slurmd-$1.pid" && { log "$1 already running"; exit 0; }
    "$NETNS" exec "$1" slurmd -N "$1"
    for i in $(seq 150); do in_ctl sinfo -h -n "$1" -o %t | grep -qxE 'idle|mix|alloc' && exit 0; sleep 0.2; done
    die "$1 did not come back" ;;
  run) [ -f "$D/shape" ] || die "not running"; [ "$(cat "$D/hosts")" = 0 ] && exec "$@"; exec "$NETNS" exec login "$@" ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
