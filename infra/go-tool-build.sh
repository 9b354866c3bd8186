#!/usr/bin/env bash
# Builds a Go tool pinned by a small Go module into a binary (git-ignored), the one builder of the
# stack's Go tools (Jaeger: infra/jaeger/build.sh; kustomize: infra/k8s/kustomize-tool/build.sh).
#   usage: go-tool-build.sh NAME MODULE_DIR PACKAGE BINARY
# Idempotent: a stamp beside the binary holds the hash of the module's go.mod + go.sum, so a later
# run with the same pins is a no-op. One build at a time per binary (flock): .ci/run starts the
# Jaeger build in the background while `make setup` may ask again; the second caller waits for the
# first, then finds the stamp and returns.
set -euo pipefail
name="$1" module_dir="$2" package="$3" binary="$4"
stamp="$binary.stamp"

want="$(cat "$module_dir/go.mod" "$module_dir/go.sum" | sha256sum | cut -d' ' -f1)"
built() { [[ -x "$binary" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; }
built && exit 0
mkdir -p "$(dirname "$binary")"
exec 9>"$binary.lock"
flock 9
built && exit 0
if ! command -v go >/dev/null; then
  echo "$name build: the go command is missing (Go >= $(sed -n 's/^go //p' "$module_dir/go.mod") is needed)" >&2
  exit 1
fi
echo "$name build: go build $package ($(go version | cut -d' ' -f3)); a cold build takes minutes"
t0=$SECONDS
# Into a temporary name, then renamed: an interrupted build never leaves a half-written binary.
# -mod=readonly: go.mod/go.sum are the pins, the build must not rewrite them.
if ! (cd "$module_dir" && go build -mod=readonly -o "$binary.tmp" "$package"); then
  rm -f "$binary.tmp"
  echo "$name build: go build failed (is the Go module proxy reachable?)" >&2
  exit 1
fi
mv -f "$binary.tmp" "$binary"
echo "$want" >"$stamp"
echo "$name build: $binary built in $((SECONDS - t0))s"
