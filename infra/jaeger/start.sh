#!/usr/bin/env bash
# Starts Jaeger all-in-one (in-memory storage, OTLP on 127.0.0.1:4317/4318, UI/query on
# 127.0.0.1:16686) in the background. Idempotent: builds only when needed, no-op when it runs.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$JAEGER_INFRA_DIR/build.sh"
if pid="$(jaeger_pid)"; then
  echo "jaeger: already running (pid $pid)"
  exit 0
fi
# Something else on our ports (another checkout's Jaeger, an OTel collector?) would answer wait.sh
# in our stead or make the start fail half-way.
for port in "${JAEGER_PORTS[@]}"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "jaeger: 127.0.0.1:$port is already taken by a process this checkout did not start" >&2
    exit 1
  fi
done
mkdir -p "$JAEGER_STATE_DIR"
if [[ -f "$JAEGER_LOG_FILE" ]]; then
  mv "$JAEGER_LOG_FILE" "$JAEGER_LOG_FILE.prev"
fi
# setsid + nohup + closed stdio: Jaeger must outlive this shell and not hold the caller's pipes.
# The OTEL_* variables of the caller's shell are meant for our services, not for Jaeger's own SDK
# (it would send its own spans to itself).
env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_TRACES_EXPORTER -u OTEL_SERVICE_NAME \
  setsid nohup "$JAEGER_BIN" --config "$JAEGER_CONFIG" </dev/null >"$JAEGER_LOG_FILE" 2>&1 &
echo $! >"$JAEGER_PID_FILE"
await_exec "$!" "$JAEGER_BIN --config" || true # wait.sh reports a Jaeger that died at once
echo "jaeger: started (pid $!), log $JAEGER_LOG_FILE"
