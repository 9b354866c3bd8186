# shellcheck shell=bash
# Shared by the stack scripts (sourced): the start-up and shutdown of a background daemon that a
# script launched with `setsid nohup PROGRAM ... &` and named in a PID file.

# await_exec PID PREFIX [TIMEOUT_S]: waits until PID's command line starts with PREFIX: the
# program at the end of the launch's exec chain (bash fork, setsid, nohup, a wrapper script, the
# daemon). Right after `cmd &`, $! is for a moment a forked copy of the launching shell, and each
# exec replaces the command line (it may even read empty while it happens); a liveness check that
# reads /proc in between (a loaded CI machine can take a while) wrongly reports the daemon dead.
# Once the final program runs, its command line stays. Fails when PID exits first.
await_exec() {
  local pid="$1" prefix="$2" deadline=$((SECONDS + ${3:-30})) cmd
  while ((SECONDS < deadline)); do
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmd" == "$prefix"* ]] && return 0
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

# await_ready LABEL LOG_FILE TIMEOUT_S ALIVE PROBE: waits until the command PROBE succeeds, checking
# on every round that the daemon still runs (the command ALIVE, e.g. its *_pid function); fails
# with the log's tail when the daemon died or after TIMEOUT_S seconds. The wait scripts of the
# stack's daemons share it, so each says only what "ready" means for it.
await_ready() {
  local label="$1" log="$2" timeout_s="$3" alive="$4" probe="$5" deadline reason
  deadline=$((SECONDS + timeout_s))
  reason="not ready after ${timeout_s}s"
  while ((SECONDS < deadline)); do
    if ! "$alive" >/dev/null; then
      reason="the $label process is not running"
      break
    fi
    "$probe" && return 0
    sleep 0.5
  done
  echo "$label: $reason" >&2
  echo "---- tail of $log ----" >&2
  tail -n 30 "$log" 2>/dev/null >&2 || true
  return 1
}
