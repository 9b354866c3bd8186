#!/usr/bin/env bash
# Creates .venv (Python >= 3.11) and installs the project editable with every extra (all: services, ml, nvml) and dev.
# Idempotent: .venv/.gfs-install-stamp holds the hash of pyproject.toml; same hash = nothing to do.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO_DIR/.venv"
STAMP="$VENV/.gfs-install-stamp"

want="$(sha256sum "$REPO_DIR/pyproject.toml" | cut -d' ' -f1)"
if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  py="${PYTHON:-python3}"
  if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "bootstrap: $py is missing or older than 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
  fi
  echo "bootstrap: creating $VENV with $("$py" --version)"
  "$py" -m venv "$VENV"
fi
echo "bootstrap: pip install -e '.[all,dev]' (first time takes minutes: torch)"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "${REPO_DIR}[all,dev]"
echo "$want" >"$STAMP"
echo "bootstrap: done"
