#!/usr/bin/env bash
# Kafka's console producer (one message per stdin line); --bootstrap-server defaults as above.
# Example: echo hello | console-producer.sh --topic t
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

mapfile -t boot < <(kafka_bootstrap_args "$@")
exec "$KAFKA_INFRA_DIR/kafka-java.sh" kafka.tools.ConsoleProducer "${boot[@]}" "$@"
