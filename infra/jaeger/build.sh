#!/usr/bin/env bash
# Builds Jaeger (the Go tool pinned in go.mod) into .stack/bin/jaeger (git-ignored).
# Idempotent: a stamp holds the hash of go.mod + go.sum, so a later run with the same pins is a
# no-op. A cold build (empty Go module and build caches) downloads 1.3 GB of modules and compiles
# for ~7 min on 2 cores (1.6 GB of build cache); with warm caches (they live outside the
# repository, under $(go env GOMODCACHE GOCACHE)) a rebuild takes ~8 s.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

want="$(jaeger_build_hash)"
built() { [[ -x "$JAEGER_BIN" && -f "$JAEGER_BUILD_STAMP" && "$(cat "$JAEGER_BUILD_STAMP")" == "$want" ]]; }
built && exit 0
# One build at a time (.ci/run starts one in the background while `make setup` may ask again):
# a second caller waits for the first, then finds the stamp and returns.
mkdir -p "$(dirname "$JAEGER_BIN")"
exec 9>"$JAEGER_BIN.lock"
flock 9
built && exit 0
if ! command -v go >/dev/null; then
  echo "jaeger build: the go command is missing (Go >= $(sed -n 's/^go //p' "$JAEGER_INFRA_DIR/go.mod") is needed)" >&2
  exit 1
fi
echo "jaeger build: go build $JAEGER_PKG ($(go version | cut -d' ' -f3)); a cold build takes minutes"
t0=$SECONDS
# Into a temporary name, then renamed: an interrupted build never leaves a half-written binary.
# -mod=readonly: go.mod/go.sum are the pins, the build must not rewrite them.
if ! (cd "$JAEGER_INFRA_DIR" && go build -mod=readonly -o "$JAEGER_BIN.tmp" "$JAEGER_PKG"); then
  rm -f "$JAEGER_BIN.tmp"
  echo "jaeger build: go build failed (is the Go module proxy reachable?)" >&2
  exit 1
fi
mv -f "$JAEGER_BIN.tmp" "$JAEGER_BIN"
echo "$want" >"$JAEGER_BUILD_STAMP"
echo "jaeger build: $JAEGER_BIN built in $((SECONDS - t0))s"
