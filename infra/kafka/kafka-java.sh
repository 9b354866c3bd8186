#!/usr/bin/env bash
# Runs one Kafka main class on the jars in lib/ (the distribution's bin/ scripts are not in the
# Maven jars). Usage: kafka-java.sh MAIN_CLASS [ARGS...]
#   KAFKA_HEAP_OPTS  heap flags (default: small, the machine is shared with tests and 2 cores)
#   KAFKA_LOG4J      log4j config (default: tools config, warnings to stderr)
#   KAFKA_LOGS_DIR   where log4j writes (default .stack/kafka/logs; the 3-broker cluster gives each node its own)
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if [[ ! -f "$KAFKA_LIB_DIR/.complete" ]]; then
  echo "kafka-java: $KAFKA_LIB_DIR is incomplete; run infra/kafka/fetch.sh first" >&2
  exit 1
fi
[[ $# -ge 1 ]] || { echo "usage: kafka-java.sh MAIN_CLASS [ARGS...]" >&2; exit 2; }

# shellcheck disable=SC2086  # heap opts are a word list on purpose
exec java ${KAFKA_HEAP_OPTS:--Xmx256m -Xms32m} \
  -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
  -Dlog4j.configuration="file:${KAFKA_LOG4J:-$KAFKA_INFRA_DIR/tools-log4j.properties}" \
  -Dkafka.logs.dir="${KAFKA_LOGS_DIR:-$KAFKA_LOG_DIR}" \
  -cp "$KAFKA_LIB_DIR/*" "$@"
