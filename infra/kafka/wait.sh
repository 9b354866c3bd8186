#!/usr/bin/env bash
# Waits until the broker is ready: OUR broker logged that it started (the port alone could be another
# process's), its port accepts connections, AND it answers a metadata request (TopicCommand --list).
# Fails with the log tail after KAFKA_WAIT_TIMEOUT seconds (default 90).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

timeout_s="${KAFKA_WAIT_TIMEOUT:-90}"
host="${KAFKA_BOOTSTRAP%%:*}"
port="${KAFKA_BOOTSTRAP##*:}"
deadline=$((SECONDS + timeout_s))

fail() {
  echo "kafka: $1" >&2
  echo "---- tail of $KAFKA_LOG_DIR/server.log ----" >&2
  tail -n 40 "$KAFKA_LOG_DIR/server.log" 2>/dev/null >&2 || true
  tail -n 20 "$KAFKA_LOG_DIR/stdout.log" 2>/dev/null >&2 || true
  exit 1
}

# Short client timeouts so one probe cannot eat the whole budget.
probe_cfg="$KAFKA_STATE_DIR/probe.properties"
mkdir -p "$KAFKA_STATE_DIR"
printf 'request.timeout.ms=5000\ndefault.api.timeout.ms=8000\n' >"$probe_cfg"

while ((SECONDS < deadline)); do
  kafka_broker_pid >/dev/null || fail "the broker process is not running"
  # bash's /dev/tcp: a cheap port check before paying a JVM start for the metadata probe.
  if grep -q 'Kafka Server started' "$KAFKA_LOG_DIR/server.log" 2>/dev/null &&
    (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
    if "$KAFKA_INFRA_DIR/kafka-java.sh" org.apache.kafka.tools.TopicCommand \
        --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$probe_cfg" --list >/dev/null 2>&1; then
      echo "kafka: ready on $KAFKA_BOOTSTRAP"
      exit 0
    fi
  fi
  sleep 1
done
fail "not ready on $KAFKA_BOOTSTRAP after ${timeout_s}s"
