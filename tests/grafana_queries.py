"""The PromQL queries of the Grafana dashboard (infra/grafana/gfs-dashboard.json), shared by the
static test (tests/static/test_grafana_dashboard.py) and the live ones (tests/integration/)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[1] / "infra" / "grafana" / "gfs-dashboard.json"
METRIC = re.compile(r"\bgfs_[a-z0-9_]+")


@dataclass(frozen=True)
class Query:
    panel: str
    ref_id: str
    expr: str  # as written in the dashboard, with Grafana's variables

    def metrics(self) -> set[str]:
        """The gfs_* series it reads (a histogram's as its _bucket series)."""
        return set(METRIC.findall(self.expr))

    def promql(self, *, pool: str = ".*", rate_interval: str = "1m") -> str:
        """Grafana's variables replaced as Grafana would: `$pool` by a regex of pools (".*" is the
        dashboard's All; a pool name of letters, digits and dashes matches itself),
        `$__rate_interval` by a range."""
        return self.expr.replace("$__rate_interval", rate_interval).replace("$pool", pool)


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those inside a collapsed row, without the rows themselves."""
    out = []
    for panel in dashboard["panels"]:
        if panel.get("type") == "row":
            out.extend(panel.get("panels", []))
        else:
            out.append(panel)
    return out


def queries(dashboard: dict[str, Any] | None = None) -> list[Query]:
    dashboard = dashboard if dashboard is not None else load()
    return [Query(p["title"], t["refId"], t["expr"]) for p in panels(dashboard) for t in p.get("targets", [])]
