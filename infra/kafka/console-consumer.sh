#!/usr/bin/env bash
# Kafka's console consumer; --bootstrap-server defaults to $KAFKA_BOOTSTRAP_SERVERS or 127.0.0.1:9092.
# Example: console-consumer.sh --topic t --from-beginning --max-messages 1
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

mapfile -t boot < <(kafka_bootstrap_args "$@")
exec "$KAFKA_INFRA_DIR/kafka-java.sh" org.apache.kafka.tools.consumer.ConsoleConsumer "${boot[@]}" "$@"
