#!/usr/bin/env bash
# The local stack: a real Kafka 3.9 broker (KRaft, 127.0.0.1:9092), PostgreSQL (127.0.0.1:55432),
# Jaeger (OTLP 127.0.0.1:4317, UI 127.0.0.1:16686) and Prometheus (127.0.0.1:9090).
#   up      fetch/start/wait Kafka, install/start Postgres, build/start Jaeger, install/start
#           Prometheus, create topics, apply migrations
#   down    stop all four (data kept)       reset   stop all four and wipe their data
#   status  exit 0 only when all four run   env     print the exports clients need
#   env --traces   the same plus OTEL_EXPORTER_OTLP_ENDPOINT (services then export spans to Jaeger)
#   db-url owner|quota|preemption   the Postgres URL of that role (its generated password;
#           QUOTA_DATABASE_URL / PREEMPTION_DATABASE_URL for a service run by hand)
#   cluster up|down|reset|status|env|stop-broker N|start-broker N
#           a 3-broker KRaft cluster (replication factor 3, min.insync.replicas 2) on ports of its
#           own (29092-29094 by default), beside the single broker, which it never touches
#           (infra/kafka/cluster.sh; docs/operations.md, "Scaling out")
#   secure up|down|reset|status|env [PRINCIPAL]
#           a single broker with TLS, SASL/SCRAM users per service and agent, and ACLs, on ports
#           of its own (29392-29393 by default), beside the plaintext one, which it never touches
#           (infra/kafka/secure.sh; docs/operations.md, "Kafka security")
set -euo pipefail
INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$INFRA_DIR/.." && pwd)"
# shellcheck source=kafka/common.sh
source "$INFRA_DIR/kafka/common.sh"
# shellcheck source=postgres/common.sh
source "$INFRA_DIR/postgres/common.sh"
# shellcheck source=jaeger/common.sh
source "$INFRA_DIR/jaeger/common.sh"
# shellcheck source=prometheus/common.sh
source "$INFRA_DIR/prometheus/common.sh"
GFS_CLI="$REPO_DIR/.venv/bin/gfs"

stack_env() {
  # The default bootstrap, not $KAFKA_BOOTSTRAP_SERVERS: this stack always listens there.
  echo "export KAFKA_BOOTSTRAP_SERVERS=$KAFKA_DEFAULT_BOOTSTRAP"
  # The owner role (migrations, and every test's own schema); the services' own roles are
  # `db-url quota|preemption` (not exported: a test's DATABASE_URL names its schema, and a
  # QUOTA_DATABASE_URL inherited from the shell would take the service elsewhere).
  echo "export DATABASE_URL=$(pg_url "$PG_APP_USER")"
  # The master secret node commands are signed with (per-node keys derive from it): generated
  # once per checkout into the ignored stack folder, for development and tests only.
  echo "export GFS_COMMAND_SECRET=$(dev_command_secret)"
  # Where the observability tests (and people) find Jaeger's query API and Prometheus.
  echo "export JAEGER_QUERY_URL=$JAEGER_QUERY_URL_DEFAULT"
  echo "export PROMETHEUS_URL=$PROM_URL_DEFAULT"
  # Span export is opt-in: with the endpoint set every process ships its spans over OTLP/gRPC, and
  # when Jaeger is down each one then spends ~7 s retrying at exit (BatchSpanProcessor shutdown),
  # which would slow every test that stops a service. `env --traces` switches it on.
  if [[ "${1:-}" == --traces ]]; then
    echo "export OTEL_EXPORTER_OTLP_ENDPOINT=http://$JAEGER_OTLP_GRPC"
  fi
}

dev_command_secret() {
  local file="$REPO_DIR/.stack/command-secret"
  if [[ ! -s "$file" ]]; then
    mkdir -p "$REPO_DIR/.stack"
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$file")
  fi
  cat "$file"
}

stack_status() {
  local ok=0 pid
  if pid="$(kafka_broker_pid)"; then
    echo "kafka:    up (pid $pid, $KAFKA_DEFAULT_BOOTSTRAP)"
  else
    echo "kafka:    down"
    ok=1
  fi
  if pg_running; then
    echo "postgres: up (pid $(head -n 1 "$PG_DATA_DIR/postmaster.pid"), $PG_HOST:$PG_PORT)"
  else
    echo "postgres: down"
    ok=1
  fi
  if pid="$(jaeger_pid)"; then
    echo "jaeger:   up (pid $pid, UI $JAEGER_QUERY_URL_DEFAULT, OTLP gRPC $JAEGER_OTLP_GRPC)"
  else
    echo "jaeger:   down"
    ok=1
  fi
  if pid="$(prom_pid)"; then
    echo "prometheus: up (pid $pid, $PROM_URL_DEFAULT)"
  else
    echo "prometheus: down"
    ok=1
  fi
  return "$ok"
}

stack_up() {
  "$INFRA_DIR/kafka/start.sh"
  "$INFRA_DIR/postgres/start.sh"   # these start while the JVM warms up
  "$INFRA_DIR/jaeger/start.sh"
  "$INFRA_DIR/prometheus/start.sh"
  "$INFRA_DIR/kafka/wait.sh"
  "$INFRA_DIR/jaeger/wait.sh"
  "$INFRA_DIR/prometheus/wait.sh"
  if [[ ! -x "$GFS_CLI" ]]; then
    echo "stack: $GFS_CLI missing; run scripts/bootstrap.sh (or make setup) first" >&2
    exit 1
  fi
  eval "$(stack_env)"
  # Both commands are idempotent: existing topics and applied migrations are left alone.
  "$GFS_CLI" stack topics
  "$GFS_CLI" db migrate
  "$GFS_CLI" db grant --quota-role "$PG_QUOTA_USER" --preemption-role "$PG_PREEMPTION_USER" >/dev/null
  stack_status
}

case "${1:-}" in
  up) stack_up ;;
  down)
    "$INFRA_DIR/kafka/stop.sh"; "$INFRA_DIR/postgres/stop.sh"
    "$INFRA_DIR/jaeger/stop.sh"; "$INFRA_DIR/prometheus/stop.sh" ;;
  reset)
    "$INFRA_DIR/kafka/reset.sh"; "$INFRA_DIR/postgres/reset.sh"
    "$INFRA_DIR/jaeger/reset.sh"; "$INFRA_DIR/prometheus/reset.sh" ;;
  status) stack_status ;;
  env) stack_env "${2:-}" ;;
  db-url)
    case "${2:-}" in
      owner) pg_url "$PG_APP_USER" ;;
      quota) pg_url "$PG_QUOTA_USER" ;;
      preemption) pg_url "$PG_PREEMPTION_USER" ;;
      *) echo "usage: infra/stack.sh db-url owner|quota|preemption" >&2; exit 2 ;;
    esac ;;
  cluster) exec "$INFRA_DIR/kafka/cluster.sh" "${@:2}" ;;
  secure) exec "$INFRA_DIR/kafka/secure.sh" "${@:2}" ;;
  *) echo "usage: infra/stack.sh up|down|status|env [--traces]|db-url ROLE|reset|cluster ...|secure ..." >&2; exit 2 ;;
esac
