#!/usr/bin/env bash
# Builds kustomize (the Go tool pinned in go.mod) into .stack/bin/kustomize (git-ignored), the
# renderer of infra/k8s (tests/static/test_k8s_manifests.py, `make k8s-render`), through the
# stack's one Go tool builder (infra/go-tool-build.sh: idempotent by a stamp, one build at a time).
# A cold build (empty Go module and build caches) downloads ~100 MB of modules from the Go module
# proxy and compiles in 3 min 8 s (measured on a busy 2-core machine, 300 MB peak RSS, ~110 MB of
# build cache); with warm caches a rebuild takes ~6 s.
set -euo pipefail
TOOL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GFS_REPO_DIR="$(cd "$TOOL_DIR/../../.." && pwd)"
GFS_STACK_DIR="${GFS_STACK_DIR:-$GFS_REPO_DIR/.stack}"
exec bash "$GFS_REPO_DIR/infra/go-tool-build.sh" kustomize "$TOOL_DIR" \
  "sigs.k8s.io/kustomize/kustomize/v5" "$GFS_STACK_DIR/bin/kustomize"
