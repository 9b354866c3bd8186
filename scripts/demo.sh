#!/usr/bin/env bash
# The main job (`make demo`; the Makefile has already set up and started the stack: Kafka,
# Postgres, Jaeger, Prometheus, and exported its env): the live system replaying the bundled
# sample, watched in the terminal (services/demo/live.py). Ctrl-C stops every process the demo
# started; the stack stays up until `make down`. GFS_DEMO_SPEED changes the replay speed; arguments
# go on to `gfs demo live` (e.g. --preemption-port 18082).
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_DIR"
# The dev stack's Kafka is plaintext: say so up front (each service also logs it once), so nobody
# takes the demo's set-up for a secured one (docs/operations.md, "Kafka security").
if [[ "${KAFKA_SECURITY_PROTOCOL:-PLAINTEXT}" == [Pp][Ll][Aa][Ii][Nn][Tt][Ee][Xx][Tt] ]]; then
  echo "gfs demo: Kafka at ${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092} in PLAINTEXT: no TLS, no authentication, dev/demo only" >&2
fi
exec "$REPO_DIR/.venv/bin/gfs" demo live --speed "${GFS_DEMO_SPEED:-480}" "$@"
