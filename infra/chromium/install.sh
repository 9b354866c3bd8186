#!/usr/bin/env bash
# Installs Debian's Chromium when it is missing: the dashboard test (tests/integration/
# test_dashboard.py) loads the preemption service's /dashboard in headless Chromium (--dump-dom,
# --screenshot). Only the binary is used; nothing is started here. Called by `make setup`.
set -euo pipefail

CHROMIUM_BIN="${CHROMIUM_BIN:-/usr/bin/chromium}"
if [[ -x "$CHROMIUM_BIN" ]]; then
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "chromium install: $CHROMIUM_BIN missing; install it (apt-get install chromium) as root" >&2
  exit 1
fi
echo "chromium install: apt-get install chromium"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Without recommends (no chromium-sandbox, fonts beyond the dependencies, desktop integration);
# fonts-dejavu-core gives the headless renderer a font for the screenshot's text.
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
[[ -x "$CHROMIUM_BIN" ]] || { echo "chromium install: $CHROMIUM_BIN still missing" >&2; exit 1; }
echo "chromium install: $("$CHROMIUM_BIN" --version 2>&1 | head -n 1)"
