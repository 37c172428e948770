# Sourced by the tests that watch a run under distgrad-run as it goes (memory_bound_test.sh,
# line_buffered_test.sh):
#   start_run LAUNCHER ARGS...   starts `LAUNCHER ARGS...` in the background, its output in
#                                $run_dir/output; sets launcher_pid; an EXIT trap stops the run
#                                (SIGINT) and removes $run_dir
#   wait_for_output PATTERN SECONDS
#                                waits until the output holds a line matching PATTERN (grep),
#                                or fails the test printing the output when SECONDS pass or the
#                                run ends first
#   finish_run                   waits for the run to end; its status is the run's
run_dir=$(mktemp -d)

start_run() {
  "$@" > "$run_dir/output" 2>&1 &
  launcher_pid=$!
  trap 'kill -INT "$launcher_pid" 2> /dev/null || true; wait "$launcher_pid" 2> /dev/null || true; rm -rf "$run_dir"' EXIT
}

wait_for_output() {
  local deadline=$((SECONDS + $2))
  until grep -q -- "$1" "$run_dir/output"; do
    if ((SECONDS > deadline)) || ! kill -0 "$launcher_pid" 2> /dev/null; then
      echo "FAIL: no line matching \"$1\" within $2 s; the output so far:"
      cat "$run_dir/output"
      exit 1
    fi
    sleep 0.1
  done
}

finish_run() {
  wait "$launcher_pid"
  trap 'rm -rf "$run_dir"' EXIT
}
