# shellcheck shell=bash
# Shared by the stack scripts (sourced): the start-up and shutdown of a background daemon that a
# script launched with `setsid nohup PROGRAM ... &` and named in a PID file.

# await_exec PID PATTERN [TIMEOUT_S]: waits until PID's command line contains PATTERN (a fixed
# string). Right after `cmd &`, $! is for a moment a forked copy of the launching shell, whose
# command line is the script's own; a liveness check that reads /proc then (a loaded CI machine
# can take a while to exec) wrongly reports the daemon dead. Fails when PID exits first.
await_exec() {
  local pid="$1" pattern="$2" deadline=$((SECONDS + ${3:-30}))
  while ((SECONDS < deadline)); do
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$pattern" && return 0
    sleep 0.1
  done
  return 1
}

# stop_pid LABEL PID TIMEOUT_S [SIGNAL]: sends SIGNAL (default TERM) so the daemon shuts down
# cleanly, waits up to TIMEOUT_S for it to exit, then SIGKILLs it.
stop_pid() {
  local label="$1" pid="$2" timeout="$3" signal="${4:-TERM}" i
  kill "-$signal" "$pid" 2>/dev/null || return 0
  for ((i = 0; i < timeout; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$label: pid $pid ignored SIG$signal, killing" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
}
