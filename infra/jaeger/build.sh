#!/usr/bin/env bash
# Builds Jaeger (the Go tool pinned in go.mod) into .stack/bin/jaeger (git-ignored), through the
# stack's one Go tool builder (infra/go-tool-build.sh: idempotent by a stamp, one build at a time).
# A cold build (empty Go module and build caches) downloads 1.3 GB of modules and compiles for
# ~7 min on 2 cores (1.6 GB of build cache); with warm caches (they live outside the repository,
# under $(go env GOMODCACHE GOCACHE)) a rebuild takes ~8 s.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
exec bash "$JAEGER_INFRA_DIR/../go-tool-build.sh" jaeger "$JAEGER_INFRA_DIR" "$JAEGER_PKG" "$JAEGER_BIN"
