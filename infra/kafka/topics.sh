#!/usr/bin/env bash
# Kafka's topic tool, for debugging (the project's topics are created by `gfs stack topics`).
# Example: topics.sh --create --topic t --partitions 1 --replication-factor 1 ; topics.sh --list
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

mapfile -t boot < <(kafka_bootstrap_args "$@")
exec "$KAFKA_INFRA_DIR/kafka-java.sh" org.apache.kafka.tools.TopicCommand "${boot[@]}" "$@"
