# Sourced by the tests that run workers on two simulated hosts (scripts/netns_hosts.sh): with
# SIM_PREFIX and SIM_SUBNET exported first, it skips (exit 77) without the privilege to create
# network namespaces, brings up hosts node1 and node2, removes them (and the folder $out) on every
# exit, and sets $hosts (the script), $out (a fresh folder) and $token (a random job token), and
# defines run_on_both_hosts.
hosts="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/scripts/netns_hosts.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: creating network namespaces needs root"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }
out=$(mktemp -d)
trap '"$hosts" down >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
"$hosts" up 2 >/dev/null 2>&1 || { echo "SKIP: cannot create network namespaces here"; exit 77; }
"$hosts" exec node1 true >/dev/null 2>&1 || { echo "SKIP: cannot enter the namespaces (nsenter/unshare refused)"; exit 77; }
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

# run_on_both_hosts NAME DISTGRAD_RUN ARGS...: the same `DISTGRAD_RUN --nnodes 2 ... --nproc-per-node
# 2 --run-id NAME ARGS...` (launcher flags, then the worker and its arguments) on node1 and node2,
# logs in $out/NAME.node0.log and $out/NAME.node1.log, printed; fails unless both launchers exit 0.
run_on_both_hosts() {
  local name=$1 run=$2; shift 2
  local node status=0
  for node in 0 1; do
    timeout 90 "$hosts" exec "node$((node + 1))" env DISTGRAD_TOKEN="$token" OMP_NUM_THREADS=1 "$run" --nnodes 2 \
      --node-rank "$node" --master-addr "$SIM_SUBNET.1" --master-port 29500 --nproc-per-node 2 --run-id "$name" "$@" \
      >"$out/$name.node$node.log" 2>&1 &
    eval "pid$node=$!"
  done
  wait "$pid0" || status=$?
  wait "$pid1" || status=$?
  for node in 0 1; do sed "s/^/$name node$node| /" "$out/$name.node$node.log"; done
  [ "$status" = 0 ] || { echo "FAIL: $name: a launcher exited with $status"; exit 1; }
}
