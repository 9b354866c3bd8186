"""The Grafana dashboard (infra/grafana/gfs-dashboard.json) without a server.

It loads as JSON, takes its Prometheus from an import input (`${DS_PROMETHEUS}`), has the panels
issue 26 asks for, every query parses (`promtool check rules` on a file of recording rules made
of them), reads only series the services export (test_metrics_exposition.EXPECTED, so a renamed
metric breaks this test, not the dashboard silently), and reads counters only through `rate()`
or `increase()`. The same holds for the alert rules' expressions. Against the stack's
Prometheus: tests/integration/test_grafana_dashboard_live.py and test_metrics_in_prometheus.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from grafana_queries import Query, load, panels, queries
from test_metrics_exposition import EXPECTED

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "infra" / "prometheus" / "rules" / "gfs-alerts.yml"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def _exported() -> dict[str, str]:
    """Every gfs_* series name a query can use -> the family's type."""
    out = {}
    for _, families in EXPECTED.values():
        for name, kind in families.items():
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}.get(kind, [""])
            out.update({name + suffix: kind for suffix in suffixes})
    return out


def _rule_exprs() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule["expr"] for group in doc["groups"] for rule in group["rules"]]


def test_the_dashboard_is_importable_json_with_a_prometheus_input() -> None:
    dashboard = load()
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    found = panels(dashboard)
    ids = [p["id"] for p in dashboard["panels"]] + [p["id"] for p in found if p not in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in found:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["expr"].strip(), panel["title"]
    [pool] = dashboard["templating"]["list"]
    assert pool["name"] == "pool" and pool["allValue"] == ".*"


def _panel_reading(*metrics: str, having: str = "") -> list[str]:
    return [
        p["title"]
        for p in panels(load())
        if set(metrics) <= {m for t in p["targets"] for m in Query("", "", t["expr"]).metrics()}
        and all(having in t["expr"] for t in p["targets"])
    ]


def test_it_has_the_panels_issue_26_asks_for() -> None:
    reading = _panel_reading
    assert reading("gfs_quota_gpus", "gfs_quota_forecast_hp_gpus"), "quota vs forecast per pool"
    assert reading("gfs_quota_eviction_rate_ratio", "gfs_quota_eviction_target_ratio"), "evictions vs target"
    assert reading("gfs_preemption_evictions_total"), "evictions per pool"
    assert reading("gfs_preemption_tasks", having='state="queued"'), "spot/HP queue lengths"
    assert reading("gfs_preemption_decision_latency_seconds_bucket", having="histogram_quantile"), "latency"
    assert reading("gfs_consumer_lag"), "consumer lag"
    dead_letters = ("gfs_quota_dead_letters_total", "gfs_preemption_dead_letters_total",
                    "gfs_forecast_dead_lettered_total")  # fmt: skip
    assert reading(*dead_letters), "dead letters"


def _promtool() -> str:
    tool = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if tool is None:
        pytest.fail("promtool not found: `apt-get install prometheus` (`make up` installs it)", pytrace=False)
    return tool


def test_every_query_parses(tmp_path: Path) -> None:
    # Recording rules whose expressions are the dashboard's queries: promtool parses each one.
    rules = [{"record": f"gfs:dashboard:q{i}", "expr": q.promql()} for i, q in enumerate(queries())]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    args = [_promtool(), "check", "rules", str(path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


@pytest.mark.parametrize("source", ["dashboard", "alert rules"])
def test_queries_read_only_exported_series_and_counters_only_through_rate(source: str) -> None:
    exprs = [q.expr for q in queries()] if source == "dashboard" else _rule_exprs()
    exported = _exported()
    for expr in exprs:
        for name in set(re.findall(r"\bgfs_[a-z0-9_]+", expr)):
            assert name in exported, f"{source} reads {name}, which no service exports: {expr}"
            if exported[name] == "counter":
                # Each use of the counter sits in rate(...[range]) or increase(...[range]).
                uses = len(re.findall(rf"\b{name}\b", expr))
                wrapped = len(re.findall(rf"\b(?:rate|increase)\(\s*{name}(?:\{{[^}}]*\}})?\[", expr))
                assert uses == wrapped, f"{source}: counter {name} read without rate()/increase(): {expr}"
