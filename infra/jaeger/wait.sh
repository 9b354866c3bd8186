#!/usr/bin/env bash
# Waits until OUR Jaeger is ready: the process runs, the query API answers on 127.0.0.1:16686
# (/api/services) and the OTLP gRPC port accepts connections. Fails with the log tail after
# JAEGER_WAIT_TIMEOUT seconds (default 60).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

answers() {
  curl -fsS -o /dev/null --max-time 2 "$JAEGER_QUERY_URL_DEFAULT/api/services" 2>/dev/null &&
    (exec 3<>"/dev/tcp/${JAEGER_OTLP_GRPC%%:*}/${JAEGER_OTLP_GRPC##*:}") 2>/dev/null
}
await_ready jaeger "$JAEGER_LOG_FILE" "${JAEGER_WAIT_TIMEOUT:-60}" jaeger_pid answers
echo "jaeger: ready, UI $JAEGER_QUERY_URL_DEFAULT, OTLP gRPC $JAEGER_OTLP_GRPC"
