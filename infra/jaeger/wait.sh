#!/usr/bin/env bash
# Waits until OUR Jaeger is ready: the process runs, the query API answers on 127.0.0.1:16686
# (/api/services) and the OTLP gRPC port accepts connections. Fails with the log tail after
# JAEGER_WAIT_TIMEOUT seconds (default 60).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

timeout_s="${JAEGER_WAIT_TIMEOUT:-60}"
deadline=$((SECONDS + timeout_s))

fail() {
  echo "jaeger: $1" >&2
  echo "---- tail of $JAEGER_LOG_FILE ----" >&2
  tail -n 30 "$JAEGER_LOG_FILE" 2>/dev/null >&2 || true
  exit 1
}

while ((SECONDS < deadline)); do
  jaeger_pid >/dev/null || fail "the jaeger process is not running"
  if curl -fsS -o /dev/null --max-time 2 "$JAEGER_QUERY_URL_DEFAULT/api/services" 2>/dev/null &&
    (exec 3<>"/dev/tcp/${JAEGER_OTLP_GRPC%%:*}/${JAEGER_OTLP_GRPC##*:}") 2>/dev/null; then
    echo "jaeger: ready, UI $JAEGER_QUERY_URL_DEFAULT, OTLP gRPC $JAEGER_OTLP_GRPC"
    exit 0
  fi
  sleep 0.5
done
fail "not ready after ${timeout_s}s"
