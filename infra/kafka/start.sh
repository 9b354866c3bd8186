#!/usr/bin/env bash
# Starts the single-node KRaft broker in the background (idempotent: no-op when it already runs).
# Formats the storage once with a random cluster id; later starts reuse the data.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$KAFKA_INFRA_DIR/fetch.sh"
if pid="$(kafka_broker_pid)"; then
  echo "kafka: already running (pid $pid)"
  exit 0
fi
# Something else on our port (another checkout's broker?) would answer wait.sh's probe in our stead.
if (exec 3<>"/dev/tcp/127.0.0.1/9092") 2>/dev/null; then
  echo "kafka: 127.0.0.1:9092 is already taken by a process this checkout did not start" >&2
  exit 1
fi
mkdir -p "$KAFKA_DATA_DIR" "$KAFKA_LOG_DIR"
# A fresh server.log per start, so wait.sh reads only this run's lines.
if [[ -f "$KAFKA_LOG_DIR/server.log" ]]; then
  mv "$KAFKA_LOG_DIR/server.log" "$KAFKA_LOG_DIR/server.log.prev"
fi
sed "s|@KAFKA_DATA_DIR@|$KAFKA_DATA_DIR|" "$KAFKA_INFRA_DIR/server.properties.in" >"$KAFKA_CONFIG"

if [[ ! -f "$KAFKA_DATA_DIR/meta.properties" ]]; then
  cluster_id="$("$KAFKA_INFRA_DIR/kafka-java.sh" kafka.tools.StorageTool random-uuid)"
  echo "kafka: formatting storage (cluster id $cluster_id)"
  "$KAFKA_INFRA_DIR/kafka-java.sh" kafka.tools.StorageTool format \
    --config "$KAFKA_CONFIG" --cluster-id "$cluster_id" >"$KAFKA_LOG_DIR/format.log"
fi

# setsid + nohup + closed stdio: the broker must outlive this shell and must not hold the caller's
# pipes open (a `make up | tee` would otherwise never finish).
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx768m -Xms256m}" \
KAFKA_LOG4J="$KAFKA_INFRA_DIR/broker-log4j.properties" \
  setsid nohup "$KAFKA_INFRA_DIR/kafka-java.sh" kafka.Kafka "$KAFKA_CONFIG" \
  </dev/null >"$KAFKA_LOG_DIR/stdout.log" 2>&1 &
echo $! >"$KAFKA_PID_FILE"
await_exec "$!" "java " || true # wait.sh reports a broker that died at once
echo "kafka: started (pid $!), logs in $KAFKA_LOG_DIR"
