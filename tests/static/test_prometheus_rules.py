"""The alert rules (infra/prometheus/rules/gfs-alerts.yml): valid, unit-tested, wired, documented.

`promtool check rules` on the file, `promtool test rules` on its hand-worked test
(infra/prometheus/tests/gfs-alerts.test.yml: input series and the alerts expected at given times),
`promtool check config` on the stack's prometheus.yml (which loads the rules); then the
conventions: the alerts issue 26 asks for are all there, each has a `for:`, a severity and
summary/description annotations naming its runbook section, which docs/operations.md has.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROM_DIR = REPO / "infra" / "prometheus"
RULES = PROM_DIR / "rules" / "gfs-alerts.yml"
RULES_TEST = PROM_DIR / "tests" / "gfs-alerts.test.yml"
OPERATIONS_MD = REPO / "docs" / "operations.md"

# Issue 26: forecast fallback, coverage off target, eviction rate over target, consumer lag,
# stale quota, no partition owner, dead letters.
REQUIRED = {
    "GfsForecastFallback", "GfsForecastCoverageOffTarget", "GfsEvictionRateOverTarget", "GfsConsumerLag",
    "GfsQuotaStale", "GfsNoPartitionOwner", "GfsDeadLetters",
}  # fmt: skip


def _promtool(*args: str, cwd: Path = REPO) -> str:
    tool = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if tool is None:
        pytest.fail(
            "promtool not found: install Debian's prometheus package (`infra/prometheus/install.sh` as "
            "root, or `apt-get install prometheus`); `make up` does it.",
            pytrace=False,
        )
    done = subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"promtool {' '.join(args)} failed:\n{out}"
    return out


def _alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def test_promtool_check_rules() -> None:
    out = _promtool("check", "rules", str(RULES))
    assert f"SUCCESS: {len(_alerts())} rules found" in out, out


def test_promtool_test_rules_with_hand_worked_series() -> None:
    out = _promtool("test", "rules", RULES_TEST.name, cwd=RULES_TEST.parent)
    assert "SUCCESS" in out, out
    # Every alert is exercised: it fires somewhere in the test file.
    tested = set(re.findall(r"alertname: (\w+)", RULES_TEST.read_text()))
    assert tested == {a["alert"] for a in _alerts()}


def test_the_stack_prometheus_loads_the_rules() -> None:
    config = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    assert [(PROM_DIR / f).resolve() for f in config["rule_files"]] == [RULES.resolve()]
    out = _promtool("check", "config", str(PROM_DIR / "prometheus.yml"))
    assert "1 rule files found" in out, out


def test_every_alert_has_for_severity_and_a_runbook_section_in_operations_md() -> None:
    alerts = _alerts()
    assert {a["alert"] for a in alerts} >= REQUIRED
    doc = OPERATIONS_MD.read_text()
    headings = set(re.findall(r"^#### (\w+)$", doc, flags=re.M))
    for alert in alerts:
        name = alert["alert"]
        assert re.fullmatch(r"\d+[smh]", str(alert.get("for", ""))), (name, "needs a for:")
        assert alert["labels"]["severity"] in {"warning", "critical"}, name
        annotations = alert["annotations"]
        assert annotations["summary"] and annotations["description"], name
        assert f'docs/operations.md, section "{name}"' in annotations["description"], name
        assert annotations["runbook"] == f"docs/operations.md#{name.lower()}", name
        assert name in headings, f"docs/operations.md has no '#### {name}' runbook section"
