#!/usr/bin/env bash
# Resolves the Kafka broker and tool jars from Maven Central into lib/ (git-ignored).
# Idempotent: lib/.complete holds the hash of pom.xml, so a later run with the same pom is a no-op,
# and an interrupted or outdated fetch is redone from a clean folder.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

want="$(sha256sum "$KAFKA_INFRA_DIR/pom.xml" | cut -d' ' -f1)"
if [[ -f "$KAFKA_LIB_DIR/.complete" && "$(cat "$KAFKA_LIB_DIR/.complete")" == "$want" ]]; then
  exit 0
fi

# The project's machines ship Java 17 and Maven; install them from Debian on one that does not.
if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
  if [[ "$(id -u)" != 0 ]]; then
    echo "kafka fetch: java (17+) and maven are required" >&2
    exit 1
  fi
  echo "kafka fetch: apt-get install openjdk-17-jre-headless maven"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless maven >/dev/null
fi

echo "kafka fetch: resolving jars into $KAFKA_LIB_DIR"
rm -rf "$KAFKA_LIB_DIR" "$KAFKA_INFRA_DIR/target"
# -B: no colour/progress noise in CI logs. runtime scope: exactly what the broker needs to run.
# Output goes to a log (mvn prints stray terminal codes even with -q) and is shown only on failure.
mkdir -p "$KAFKA_LIB_DIR"
if ! mvn -q -B -f "$KAFKA_INFRA_DIR/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$KAFKA_LIB_DIR" -DincludeScope=runtime >"$KAFKA_LIB_DIR/.mvn.log" 2>&1; then
  cat "$KAFKA_LIB_DIR/.mvn.log" >&2
  echo "kafka fetch: maven failed (is Maven Central reachable?)" >&2
  exit 1
fi
rm -rf "$KAFKA_INFRA_DIR/target"

# Sanity: the classes the launchers name must be there, or the pom is wrong.
for jar in kafka_2.13 kafka-tools kafka-clients slf4j-reload4j; do
  compgen -G "$KAFKA_LIB_DIR/$jar-*.jar" >/dev/null || { echo "kafka fetch: $jar missing" >&2; exit 1; }
done
echo "$want" >"$KAFKA_LIB_DIR/.complete"
echo "kafka fetch: $(find "$KAFKA_LIB_DIR" -name '*.jar' | wc -l) jars"
