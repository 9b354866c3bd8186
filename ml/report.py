"""Plain-text (markdown) table of backtest results."""

from __future__ import annotations

from typing import Any

_COLS = ("mae", "rmse", "coverage_p90", "pinball_p90", "train_s", "infer_ms_per_100_series")


def table(result: dict[str, Any]) -> str:
    lines = [
        "| model | " + " | ".join(_COLS) + " | pool cov | pool pinball |",
        "|---" * (len(_COLS) + 3) + "|",
    ]
    for name, m in result["models"].items():
        pools = m["per_pool"].values()
        pcov = " ".join(f"{p['coverage_p90']:.3f}" for p in pools)
        ppin = " ".join(f"{p['pinball_p90']:.2f}" for p in pools)
        cells = " | ".join(f"{m[c]:.3f}" for c in _COLS)
        lines.append(f"| {name} | {cells} | {pcov} | {ppin} |")
    return "\n".join(lines)
