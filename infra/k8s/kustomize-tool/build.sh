#!/usr/bin/env bash
# Builds kustomize (the Go tool pinned in go.mod) into .stack/bin/kustomize (git-ignored), the
# renderer of infra/k8s (tests/static/test_k8s_manifests.py, `make k8s-render`). Mirrors
# infra/jaeger/build.sh: idempotent through a stamp holding the hash of go.mod + go.sum, one build
# at a time (flock). A cold build (empty Go module and build caches) downloads ~100 MB of modules
# from the Go module proxy and compiles in 3 min 8 s (measured on a busy 2-core machine, 300 MB
# peak RSS, ~110 MB of build cache); with warm caches a rebuild takes ~6 s.
set -euo pipefail
TOOL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GFS_REPO_DIR="$(cd "$TOOL_DIR/../../.." && pwd)"
GFS_STACK_DIR="${GFS_STACK_DIR:-$GFS_REPO_DIR/.stack}"
KUSTOMIZE_PKG="sigs.k8s.io/kustomize/kustomize/v5"
KUSTOMIZE_BIN="$GFS_STACK_DIR/bin/kustomize"
KUSTOMIZE_STAMP="$GFS_STACK_DIR/bin/kustomize.stamp"

want="$(cat "$TOOL_DIR/go.mod" "$TOOL_DIR/go.sum" | sha256sum | cut -d' ' -f1)"
built() { [[ -x "$KUSTOMIZE_BIN" && -f "$KUSTOMIZE_STAMP" && "$(cat "$KUSTOMIZE_STAMP")" == "$want" ]]; }
built && exit 0
mkdir -p "$(dirname "$KUSTOMIZE_BIN")"
exec 9>"$KUSTOMIZE_BIN.lock"
flock 9
built && exit 0
if ! command -v go >/dev/null; then
  echo "kustomize build: the go command is missing (Go >= $(sed -n 's/^go //p' "$TOOL_DIR/go.mod") is needed)" >&2
  exit 1
fi
echo "kustomize build: go build $KUSTOMIZE_PKG ($(go version | cut -d' ' -f3))"
t0=$SECONDS
# -mod=readonly: go.mod/go.sum are the pins; a temporary name, so an interrupted build leaves nothing.
if ! (cd "$TOOL_DIR" && go build -mod=readonly -o "$KUSTOMIZE_BIN.tmp" "$KUSTOMIZE_PKG"); then
  rm -f "$KUSTOMIZE_BIN.tmp"
  echo "kustomize build: go build failed (is the Go module proxy reachable?)" >&2
  exit 1
fi
mv -f "$KUSTOMIZE_BIN.tmp" "$KUSTOMIZE_BIN"
echo "$want" >"$KUSTOMIZE_STAMP"
echo "kustomize build: $KUSTOMIZE_BIN built in $((SECONDS - t0))s"
