# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# Sourced by the infra/jaeger scripts: where the binary, its config, logs and PID file live.
# Jaeger v1.75.0 is the "v2" binary (an OpenTelemetry Collector distribution), built from the Go
# module proxy as a Go tool of the small module in this folder (go.mod pins it, go.sum locks it).
JAEGER_INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../process.sh
source "$JAEGER_INFRA_DIR/../process.sh"
GFS_REPO_DIR="$(cd "$JAEGER_INFRA_DIR/../.." && pwd)"
GFS_STACK_DIR="${GFS_STACK_DIR:-$GFS_REPO_DIR/.stack}"
JAEGER_PKG="github.com/jaegertracing/jaeger/cmd/jaeger"
JAEGER_BIN="$GFS_STACK_DIR/bin/jaeger"              # git-ignored build output
JAEGER_CONFIG="$JAEGER_INFRA_DIR/config.yaml"
JAEGER_STATE_DIR="$GFS_STACK_DIR/jaeger"            # log and PID file (traces live in memory)
JAEGER_LOG_FILE="$JAEGER_STATE_DIR/jaeger.log"
JAEGER_PID_FILE="$JAEGER_STATE_DIR/jaeger.pid"
# The ports config.yaml binds (loopback only); keep the two in step.
JAEGER_QUERY_URL_DEFAULT="http://127.0.0.1:16686"   # UI + HTTP query API (/api/traces, /api/v3)
JAEGER_OTLP_GRPC="127.0.0.1:4317"
JAEGER_PORTS=(4317 4318 16685 16686 13133 8888)

# Prints the PID when the PID file names a live process running our binary; fails otherwise
# (guards against a stale PID file whose number was reused).
jaeger_pid() {
  [[ -f "$JAEGER_PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$JAEGER_PID_FILE")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$JAEGER_BIN --config" || return 1
  echo "$pid"
}
