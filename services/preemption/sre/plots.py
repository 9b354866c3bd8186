"""Plots of the SRE pages (dashboard and trace view): matplotlib's object API rendered to SVG.

No pyplot (no global figure state); one render at a time (`PLOT_LOCK`): matplotlib is not
thread-safe and the renders run in worker threads.
"""

from __future__ import annotations

import io
import threading
from typing import Any

PLOT_LOCK = threading.Lock()


def figure(rows: int, height: float = 2.6) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, max(2.4, height * rows)))
    axes = fig.subplots(rows, 1, squeeze=False)
    return fig, [row[0] for row in axes]


def svg(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.tight_layout()
    fig.savefig(out, format="svg")
    return out.getvalue()
