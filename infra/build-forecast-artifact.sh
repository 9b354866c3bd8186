#!/usr/bin/env bash
# Rebuild the forecaster artifact the live forecast stream ships with (services/forecast/model/):
# an LSTM trained by `gfs forecast train` on the *observed* HP demand (running + queued, issue 10)
# of GFS on a small synthetic trace of the real inventory. Deterministic (fixed seeds).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GFS=${GFS:-.venv/bin/gfs}
SHARED=${GFS_SHARED_DIR:-../shared}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$GFS" trace synth --nodes "$SHARED/data/gfs-v2026/node_info_df.csv" --days 30 --scale 1 --seed 3 --out "$work/trace" >/dev/null
"$GFS" simulate --trace "$work/trace" --policy gfs --window-days 20 --drain-days 1 --observed-demand "$work/observed" >/dev/null
rm -rf services/forecast/model/lstm-observed
"$GFS" forecast train --series "$work/observed/gfs.csv" --model lstm --seed 0 --out services/forecast/model/lstm-observed
echo "artifact: services/forecast/model/lstm-observed"
