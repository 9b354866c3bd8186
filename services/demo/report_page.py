"""The demo's final report as a page (`report.html` beside `report.json`).

The terminal's closing tables vanish with the terminal; the page keeps them, opens in any browser
(a `file://` link the demo prints) and is what the headless-Chromium test reads: the side-by-side
table (the live run beside the simulator's FIFO, k8s-priority and GFS on the same sample), each
pool's eviction rate against its target, and the quotas that came from a model forecast. Cells are
the same strings the terminal prints (`side_by_side.cells`); every value is HTML-escaped.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from gfs.services.demo.side_by_side import COLUMNS, TITLE, Row, caption, cells, verdict


def _table(table_id: str, heads: tuple[str, ...], rows: list[tuple[str, ...]], note: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    cap = f"<caption>{escape(note)}</caption>" if note else ""
    return f'<table id="{table_id}">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _rate(r: dict[str, Any]) -> str:
    return "no period ended" if r.get("rate") is None else f"{r['rate']:.3f}"


def render(report: dict[str, Any], speed: float, accelerated: bool) -> str:
    side_rows = [Row(**r) for r in report.get("side_by_side", [])]
    side = [cells(r) for r in side_rows]
    rates = [
        (pool, str(r["failed"]), str(r["periods"]), _rate(r), f"{r['target']:.3f}",
         "yes" if r.get("rate") is not None and r["rate"] <= r["target"] else "no")
        for pool, r in sorted(report.get("eviction_rates", {}).items())
    ]  # fmt: skip
    lstm = [
        (pool, str(v["quotas"]), str(v["latest_forecast"]))
        for pool, v in sorted(report.get("lstm_quotas", {}).items())
    ]
    run = escape(str(report.get("run", "")))
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>GFS demo {run}: final report</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #999;padding:4px 8px;text-align:right}caption{text-align:left;"
        "max-width:60em;font-size:90%;caption-side:bottom}</style></head><body>"
        f"<h1>GFS demo {run}: final report</h1>"
        f"<h2>{escape(TITLE)}</h2>"
        + (f"<p id='verdict'>{escape(verdict(side_rows))}</p>" if verdict(side_rows) else "")
        + _table("side-by-side", COLUMNS, side, caption(speed, accelerated=accelerated))
        + "<h2>Eviction rate per pool (failed guarantee periods of the run's spot tasks)</h2>"
        + _table("eviction-rates", ("pool", "failed", "periods", "rate", "target", "within target"), rates)
        + "<h2>Quotas computed from a model forecast</h2>"
        + (
            _table("lstm-quotas", ("pool", "quotas", "latest forecast"), lstm)
            if lstm
            else "<p id='lstm-quotas'>none</p>"
        )
        + "</body></html>"
    )


def write_page(workdir: Path, report: dict[str, Any], speed: float, accelerated: bool) -> Path:
    page = workdir / "report.html"
    page.write_text(render(report, speed, accelerated), encoding="utf-8")
    return page
