#!/usr/bin/env bash
# The simulator replay (`make demo-sim`, `gfs demo sim`; the Makefile has already set up and started the stack and exported
# KAFKA_BOOTSTRAP_SERVERS / DATABASE_URL):
#   1. a live end-to-end check of the stack: task events through Kafka, a malformed one dead-lettered;
#   2. a synthetic trace over the real 10,412-GPU inventory, replayed through GFS and the
#      production-like FIFO baseline by the trace-driven simulator, with a Markdown + PNG report.
# GFS_DEMO_DAYS / GFS_DEMO_SCALE / GFS_DEMO_SEED shrink or vary the replay; outputs go to $GFS_DEMO_OUT.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_DIR"
GFS="$REPO_DIR/.venv/bin/gfs"
SHARED="${GFS_SHARED_DIR:-$REPO_DIR/../shared}"
# Not inside the checkout: the per-user state folder of services/platform/paths.py.
STATE="${GFS_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/gfs}"
OUT="${GFS_DEMO_OUT:-$STATE/runs/demo}"
DAYS="${GFS_DEMO_DAYS:-60}"
SCALE="${GFS_DEMO_SCALE:-1}"
SEED="${GFS_DEMO_SEED:-0}"
NODES="$SHARED/data/gfs-v2026/node_info_df.csv"

echo "== 1/2 live stack: task events through Kafka, dead-lettering of a malformed event"
"$GFS" stack smoke

if [[ ! -f "$NODES" ]]; then
  echo "demo: $NODES not found; set GFS_SHARED_DIR to the folder holding data/gfs-v2026" >&2
  exit 1
fi
echo "== 2/2 simulator: ${DAYS}-day synthetic trace (scale $SCALE, seed $SEED) over the real inventory"
mkdir -p "$OUT"
"$GFS" trace synth --nodes "$NODES" --days "$DAYS" --scale "$SCALE" --seed "$SEED" --out "$OUT/trace"
"$GFS" simulate --trace "$OUT/trace" --format gfs --policy gfs --policy fifo --forecast persistence \
  --seed "$SEED" --json "$OUT/result.json" --report "$OUT/report"
echo
cat "$OUT/report/report.md"
echo
echo "demo: JSON in $OUT/result.json, report and plots in $OUT/report/"
