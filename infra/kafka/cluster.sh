#!/usr/bin/env bash
# A 3-broker KRaft cluster (replication factor 3, min.insync.replicas 2) beside the shared single
# broker: its own ports, data folders and PID files, so starting or hurting it never touches the
# broker on 9092. For the scale-out test and benchmark (docs/operations.md, "Scaling out").
#   up                 format (once) and start the three nodes, wait until each serves
#   down               stop the three nodes (data kept)      reset   down, then wipe the folder
#   status             exit 0 only when all three run        env     print KAFKA_BOOTSTRAP_SERVERS
#   stop-broker N      SIGTERM node N (1-3; --kill: SIGKILL)  start-broker N   start node N again
# Settings (environment):
#   KAFKA_CLUSTER_DIR   state folder (default .stack/kafka-cluster)
#   KAFKA_CLUSTER_PORT  node N serves clients on PORT+N-1 and its controller on PORT+100+N-1
#                       (default 29092: 29092-29094 and 29192-29194)
#   KAFKA_CLUSTER_HEAP  heap flags of each node (default -Xmx384m -Xms128m: three JVMs, small box)
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CLUSTER_DIR="${KAFKA_CLUSTER_DIR:-$GFS_STACK_DIR/kafka-cluster}"
BASE_PORT="${KAFKA_CLUSTER_PORT:-29092}"
NODES=(1 2 3)

port_of() { echo $((BASE_PORT + $1 - 1)); }
controller_port_of() { echo $((BASE_PORT + 100 + $1 - 1)); }
node_dir() { echo "$CLUSTER_DIR/n$1"; }

bootstrap() {
  local n out=()
  for n in "${NODES[@]}"; do out+=("127.0.0.1:$(port_of "$n")"); done
  (IFS=,; echo "${out[*]}")
}

voters() {
  local n out=()
  for n in "${NODES[@]}"; do out+=("$n@127.0.0.1:$(controller_port_of "$n")"); done
  (IFS=,; echo "${out[*]}")
}

# The node's PID when its PID file names a live kafka.Kafka JVM (a reused PID is not ours).
node_pid() {
  local file pid
  file="$(node_dir "$1")/kafka.pid"
  [[ -f "$file" ]] || return 1
  pid="$(cat "$file")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'kafka\.Kafka' || return 1
  echo "$pid"
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A Kafka cluster id is 16 random bytes in URL-safe base64 without padding (22 characters); made
# here rather than by StorageTool to save a JVM start. Shared by the three nodes, kept in the folder.
# Never one that starts with "-": StorageTool would read it as an option (Kafka's own ids avoid it too).
cluster_id() {
  local file="$CLUSTER_DIR/cluster-id" id="-"
  if [[ ! -s "$file" ]]; then
    mkdir -p "$CLUSTER_DIR"
    while [[ "$id" == -* ]]; do
      id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    done
    echo -n "$id" >"$file"
  fi
  cat "$file"
}

render() {
  local n="$1" dir
  dir="$(node_dir "$n")"
  mkdir -p "$dir/data" "$dir/logs"
  sed -e "s|@NODE_ID@|$n|" -e "s|@VOTERS@|$(voters)|" -e "s|@PORT@|$(port_of "$n")|" \
    -e "s|@CONTROLLER_PORT@|$(controller_port_of "$n")|" -e "s|@DATA_DIR@|$dir/data|" \
    "$KAFKA_INFRA_DIR/cluster-server.properties.in" >"$dir/server.properties"
}

format() {
  local n="$1" dir
  dir="$(node_dir "$n")"
  [[ -f "$dir/data/meta.properties" ]] && return 0
  KAFKA_LOGS_DIR="$dir/logs" "$KAFKA_INFRA_DIR/kafka-java.sh" kafka.tools.StorageTool format \
    --config "$dir/server.properties" --cluster-id "$(cluster_id)" >"$dir/logs/format.log" 2>&1
}

start_node() {
  local n="$1" dir pid
  dir="$(node_dir "$n")"
  if pid="$(node_pid "$n")"; then
    echo "kafka-cluster: node $n already running (pid $pid)"
    return 0
  fi
  for p in "$(port_of "$n")" "$(controller_port_of "$n")"; do
    if port_taken "$p"; then
      echo "kafka-cluster: port $p is taken by a process this cluster did not start" >&2
      return 1
    fi
  done
  render "$n"
  format "$n"
  [[ -f "$dir/logs/server.log" ]] && mv "$dir/logs/server.log" "$dir/logs/server.log.prev"
  # Detached like start.sh's broker: it must outlive this shell and not hold the caller's pipes.
  KAFKA_HEAP_OPTS="${KAFKA_CLUSTER_HEAP:--Xmx384m -Xms128m}" KAFKA_LOGS_DIR="$dir/logs" \
  KAFKA_LOG4J="$KAFKA_INFRA_DIR/broker-log4j.properties" \
    setsid nohup "$KAFKA_INFRA_DIR/kafka-java.sh" kafka.Kafka "$dir/server.properties" \
    </dev/null >"$dir/logs/stdout.log" 2>&1 &
  echo $! >"$dir/kafka.pid"
  await_exec "$!" "java " || true # the readiness wait reports a node that died at once
  echo "kafka-cluster: node $n started (pid $!, 127.0.0.1:$(port_of "$n")), logs in $dir/logs"
}

wait_node() {
  local n="$1" dir deadline
  dir="$(node_dir "$n")"
  deadline=$((SECONDS + ${KAFKA_WAIT_TIMEOUT:-120}))
  while ((SECONDS < deadline)); do
    if ! node_pid "$n" >/dev/null; then
      echo "kafka-cluster: node $n is not running; its errors, then the end of its log:" >&2
      # The tail of a failed start is the orderly shutdown; the cause is in the ERROR lines.
      grep -E -A3 'ERROR|FATAL' "$dir/logs/server.log" 2>/dev/null | head -n 40 >&2 || true
      tail -n 10 "$dir/logs/server.log" "$dir/logs/stdout.log" >&2 2>/dev/null || true
      return 1
    fi
    if grep -q 'Kafka Server started' "$dir/logs/server.log" 2>/dev/null && port_taken "$(port_of "$n")"; then
      return 0
    fi
    sleep 1
  done
  echo "kafka-cluster: node $n not ready after ${KAFKA_WAIT_TIMEOUT:-120}s" >&2
  tail -n 30 "$dir/logs/server.log" >&2 2>/dev/null || true
  return 1
}

stop_node() {
  local n="$1" signal="${2:-TERM}" pid
  if ! pid="$(node_pid "$n")"; then
    rm -f "$(node_dir "$n")/kafka.pid"
    echo "kafka-cluster: node $n not running"
    return 0
  fi
  stop_pid "kafka-cluster: node $n" "$pid" "${KAFKA_STOP_TIMEOUT:-30}" "$signal"
  rm -f "$(node_dir "$n")/kafka.pid"
  echo "kafka-cluster: node $n stopped (SIG$signal)"
}

# All three at once: stopped one by one, the last two lose the controller quorum and each waits
# out KAFKA_STOP_TIMEOUT in a controlled shutdown that cannot finish.
stop_all() {
  local n pids=()
  for n in "${NODES[@]}"; do
    stop_node "$n" &
    pids+=("$!")
  done
  for n in "${pids[@]}"; do wait "$n" || true; done
}

node_arg() {
  [[ "${1:-}" =~ ^[123]$ ]] || { echo "kafka-cluster: node must be 1, 2 or 3" >&2; exit 2; }
  echo "$1"
}

"$KAFKA_INFRA_DIR/fetch.sh"
case "${1:-}" in
  up)
    # Formatting runs one JVM per node: in parallel, the three take the time of one. The id is
    # made first, or each subshell would make its own and the quorum would refuse to form.
    cluster_id >/dev/null
    pids=()
    for n in "${NODES[@]}"; do
      render "$n"
      format "$n" &
      pids+=("$!")
    done
    for i in "${!pids[@]}"; do
      if ! wait "${pids[$i]}"; then
        echo "kafka-cluster: formatting node ${NODES[$i]} failed:" >&2
        cat "$(node_dir "${NODES[$i]}")/logs/format.log" >&2
        exit 1
      fi
    done
    for n in "${NODES[@]}"; do start_node "$n"; done
    for n in "${NODES[@]}"; do wait_node "$n"; done
    echo "kafka-cluster: ready on $(bootstrap)" ;;
  down) stop_all ;;
  reset)
    stop_all
    rm -rf "$CLUSTER_DIR"
    echo "kafka-cluster: data wiped" ;;
  status)
    ok=0
    for n in "${NODES[@]}"; do
      if pid="$(node_pid "$n")"; then echo "node $n: up (pid $pid, 127.0.0.1:$(port_of "$n"))"
      else echo "node $n: down"; ok=1; fi
    done
    exit "$ok" ;;
  env) echo "export KAFKA_BOOTSTRAP_SERVERS=$(bootstrap)" ;;
  stop-broker)
    n="$(node_arg "${2:-}")"
    if [[ "${3:-}" == --kill ]]; then stop_node "$n" KILL; else stop_node "$n"; fi ;;
  start-broker)
    n="$(node_arg "${2:-}")"
    start_node "$n"
    wait_node "$n" ;;
  *) echo "usage: infra/kafka/cluster.sh up|down|reset|status|env|stop-broker N [--kill]|start-broker N" >&2
     exit 2 ;;
esac
