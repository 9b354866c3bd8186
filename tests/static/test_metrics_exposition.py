"""Every metric family the services export passes `promtool check metrics` with no warning.

Each service's instruments are built the way the service builds them (its `register_metrics` on the
platform's `configure_metrics`, the node agent's `AgentMetrics.create` and gauges) over a small
fake of the state they read, with values written in by hand; the rendered `/metrics` text goes to
Debian's promtool (`/usr/bin/promtool`, the prometheus package, which `make up` installs). Then,
against hand-written expectations: the exact set of families with their types (cumulative counts
are counters with `_total`, units in the names), a few sample values, and that
docs/operations.md's metric table names every family.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gfs.services.forecast.metrics import register_metrics as register_forecast
from gfs.services.node_agent.agent import AgentMetrics
from gfs.services.node_agent.service import _observe as observe_agent
from gfs.services.platform.metrics import configure_metrics
from gfs.services.platform.stage_stamps import BatchStamps, CommitTimes
from gfs.services.preemption.metrics import register_metrics as register_preemption
from gfs.services.quota.metrics import register_metrics as register_quota

REPO = Path(__file__).resolve().parents[2]
OPERATIONS_MD = REPO / "docs" / "operations.md"


def _promtool() -> str:
    found = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if found is None:
        pytest.fail(
            "promtool not found: install Debian's prometheus package (`infra/prometheus/install.sh` as "
            "root, or `apt-get install prometheus`); `make up` does it.",
            pytrace=False,
        )
    return found


def _preemption() -> bytes:
    metrics = configure_metrics("gfs-preemption-test")
    controller = SimpleNamespace(
        running_and_queued=lambda: {"hp_running": 2, "spot_running": 5, "hp_queued": 1, "spot_queued": 4},
        runtime=SimpleNamespace(quota={1: 6.0, 2: 4.5}),
        quota_valid_until=None,  # no SpotQuota received yet: stale
        quota_frozen=False,
        controls=SimpleNamespace(quota_mode=None),
    )
    # H800's quota expired but an SRE overrode it: in force by decision, not stale.
    overridden = SimpleNamespace(
        running_and_queued=lambda: {"hp_running": 0, "spot_running": 0, "hp_queued": 0, "spot_queued": 0},
        runtime=SimpleNamespace(quota={1: 2.0}),
        quota_valid_until=100.0,
        quota_frozen=True,
        controls=SimpleNamespace(quota_mode="override"),
    )
    decider: Any = SimpleNamespace(
        owned_pools=lambda: {"A100": controller, "H800": overridden},
        evictions_by_reason={("PREEMPTED_BY_HP", "A100"): 3, ("NODE_LOST", "A100"): 1},
        stats=SimpleNamespace(dead_lettered=2),
        partitions={0: object(), 3: object()},
        instance="host-1",
        settings=SimpleNamespace(preemption_inbox_topic="inbox", preemption_inbox_partitions=6),
        commit_times=CommitTimes("host-1"),
        instruments=SimpleNamespace(
            latency_hist=None,
            decisions_counter=None,
            held_counter=None,
            refused_counter=None,
            unsigned_counter=None,
        ),
    )
    register_preemption(metrics.meter("test"), decider)
    decider.instruments.latency_hist.record(0.004)
    decider.instruments.decisions_counter.add(1, {"kind": "accepted"})
    decider.instruments.held_counter.add(1, {"reason": "input_lag", "pool": "A100"})
    decider.instruments.refused_counter.add(1, {"type": "EvictAck", "reason": "signature_mismatch"})
    decider.instruments.unsigned_counter.add(1, {"type": "NodeTelemetry"})
    stamped = BatchStamps(1.0, 1.1, 1.2, routed={"t": (0.9, 0.95)}).header("t", "host-1:0")
    assert stamped is not None
    decider.commit_times.committed("host-1:0", 1.3)
    decider.commit_times.restamp((stamped,), 1.4)  # one relayed command's stages on /metrics
    return metrics.render()


def _quota() -> bytes:
    metrics = configure_metrics("gfs-quota-test")
    computed = SimpleNamespace(
        pool="A100", quota={1: 6.0, 4: 3.0}, eta=0.8, eviction_rate=0.25, computed_s=7200.0,
        forecast=SimpleNamespace(origin_s=3600.0), capacity=16,
        inputs=SimpleNamespace(hp_quantile=[5.0, 7.5]),
    )  # fmt: skip
    book = SimpleNamespace(
        settings=SimpleNamespace(target=0.1, guarantee_rate=0.9), forecast_health=lambda now: (20, 0.85)
    )
    service: Any = SimpleNamespace(
        latest={"A100": computed}, books={"A100": book}, clock=SimpleNamespace(now=lambda: 7200.0),
        fallback_forecasts=4, stats=SimpleNamespace(dead_lettered=1),
        lag_probe=SimpleNamespace(group="gfs-quota", lag={"gfs.pools.status": 7}),
    )  # fmt: skip
    register_quota(metrics.meter("test"), service)
    return metrics.render()


def _forecast() -> bytes:
    metrics = configure_metrics("gfs-forecast-test")
    forecaster: Any = SimpleNamespace(fallbacks=2)
    register_forecast(metrics.meter("test"), {"dead_lettered": 1, "skipped": 0, "forecasts": 9}, forecaster)
    return metrics.render()


def _node_agent() -> bytes:
    metrics = configure_metrics("gfs-node-agent-test")
    agent_metrics = AgentMetrics.create(metrics.meter("test"))
    agent_metrics.commands.add(1, {"kind": "evict", "result": "CHECKPOINTED"})
    agent_metrics.rejected.add(1, {"reason": "stale"})
    agent_metrics.sigterm_latency.record(0.002)
    agent_metrics.sigterm_since_issued.record(0.02)
    journal = SimpleNamespace(live_workers=lambda: [1, 2])
    agent: Any = SimpleNamespace(node="n0", journal=journal, evictions={})
    observe_agent(agent, metrics)
    return metrics.render()


# Hand-written: every family each service exports, with its Prometheus type.
EXPECTED = {
    "preemption": (_preemption, {
        "gfs_preemption_decision_latency_seconds": "histogram",
        "gfs_preemption_stage_seconds": "histogram",
        "gfs_preemption_decisions": "counter",
        "gfs_preemption_tasks": "gauge",
        "gfs_preemption_evictions": "counter",
        "gfs_preemption_dead_letters": "counter",
        "gfs_preemption_partitions_owned": "gauge",
        "gfs_preemption_inbox_partitions": "gauge",
        "gfs_preemption_quota_gpus": "gauge",
        "gfs_preemption_quota_stale": "gauge",
        "gfs_preemption_node_loss_held": "counter",
        "gfs_preemption_acks_refused": "counter",
        "gfs_preemption_acks_unsigned": "counter",
    }),
    "quota": (_quota, {
        "gfs_quota_gpus": "gauge",
        "gfs_quota_capacity_gpus": "gauge",
        "gfs_quota_forecast_hp_gpus": "gauge",
        "gfs_quota_eta_ratio": "gauge",
        "gfs_quota_eviction_rate_ratio": "gauge",
        "gfs_quota_eviction_target_ratio": "gauge",
        "gfs_quota_forecast_age_seconds": "gauge",
        "gfs_forecast_coverage_ratio": "gauge",
        "gfs_forecast_coverage_target_ratio": "gauge",
        "gfs_quota_forecast_fallbacks": "counter",
        "gfs_quota_dead_letters": "counter",
        "gfs_consumer_lag": "gauge",
    }),
    "forecast": (_forecast, {
        "gfs_forecast_dead_lettered": "counter",
        "gfs_forecast_skipped": "counter",
        "gfs_forecast_forecasts": "counter",
        "gfs_forecast_fallbacks": "counter",
    }),
    "node_agent": (_node_agent, {
        "gfs_agent_commands": "counter",
        "gfs_agent_commands_rejected": "counter",
        "gfs_agent_sigterm_latency_seconds": "histogram",
        "gfs_agent_sigterm_since_issued_seconds": "histogram",
        "gfs_agent_workers_running": "gauge",
        "gfs_agent_evictions_in_progress": "gauge",
    }),
}  # fmt: skip


def _families(text: str) -> dict[str, Any]:
    # The parser names a counter family without its _total (its samples keep it).
    return {f.name: f for f in text_string_to_metric_families(text) if f.name != "target_info"}


@pytest.mark.parametrize("service", sorted(EXPECTED))
def test_every_family_passes_promtool_check_metrics_without_a_warning(service: str) -> None:
    render, _ = EXPECTED[service]
    text = render()
    done = subprocess.run(
        [_promtool(), "check", "metrics"], input=text, capture_output=True, timeout=60, check=False
    )
    report = (done.stdout + done.stderr).decode()
    assert done.returncode == 0 and not report.strip(), f"promtool ({service}):\n{report}\n{text.decode()}"


@pytest.mark.parametrize("service", sorted(EXPECTED))
def test_the_families_and_their_types_are_the_documented_ones(service: str) -> None:
    render, expected = EXPECTED[service]
    text = render().decode()
    families = _families(text)
    assert {name: f.type for name, f in families.items()} == expected
    for name, kind in expected.items():
        # The exposition's own names: a counter's samples end in _total.
        suffix = "_total" if kind == "counter" else "_count" if kind == "histogram" else ""
        assert re.search(rf"^{name}{suffix}[{{ ]", text, flags=re.M), (name, text)


def _sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"no sample {name}{labels} in\n{text}")


def test_sample_values_follow_the_state_they_read() -> None:
    pre = _preemption().decode()
    assert _sample(pre, "gfs_preemption_evictions_total", pool="A100", reason="PREEMPTED_BY_HP") == 3
    assert _sample(pre, "gfs_preemption_evictions_total", pool="A100", reason="NODE_LOST") == 1
    assert _sample(pre, "gfs_preemption_dead_letters_total") == 2
    assert _sample(pre, "gfs_preemption_node_loss_held_total", pool="A100", reason="input_lag") == 1
    assert _sample(pre, "gfs_preemption_partitions_owned", decider="host-1", topic="inbox") == 2
    assert _sample(pre, "gfs_preemption_inbox_partitions", topic="inbox") == 6
    assert _sample(pre, "gfs_preemption_quota_stale", pool="A100") == 1
    assert _sample(pre, "gfs_preemption_quota_stale", pool="H800") == 0
    assert _sample(pre, "gfs_preemption_tasks", pool="A100", **{"class": "spot", "state": "queued"}) == 4
    quota = _quota().decode()
    assert _sample(quota, "gfs_quota_eta_ratio", pool="A100") == 0.8
    assert _sample(quota, "gfs_quota_capacity_gpus", pool="A100") == 16
    assert _sample(quota, "gfs_quota_forecast_hp_gpus", pool="A100", hours_ahead="2") == 7.5
    assert _sample(quota, "gfs_quota_eviction_rate_ratio", pool="A100") == 0.25
    assert _sample(quota, "gfs_quota_eviction_target_ratio", pool="A100") == 0.1
    assert _sample(quota, "gfs_forecast_coverage_ratio", pool="A100") == 0.85
    assert _sample(quota, "gfs_forecast_coverage_target_ratio", pool="A100") == 0.9
    assert _sample(quota, "gfs_quota_forecast_age_seconds", pool="A100") == 3600  # 7200 - 3600
    assert _sample(quota, "gfs_quota_forecast_fallbacks_total") == 4
    assert _sample(quota, "gfs_quota_dead_letters_total") == 1
    assert _sample(quota, "gfs_consumer_lag", group="gfs-quota", topic="gfs.pools.status") == 7


def test_operations_md_names_every_family_as_exported() -> None:
    """The metric table of docs/operations.md uses the names a query needs (`_total` on counters)."""
    doc = OPERATIONS_MD.read_text()
    table = doc[doc.index("## Metrics and alerts") :]
    missing = []
    for _, expected in EXPECTED.values():
        for name, kind in expected.items():
            exported = f"{name}_total" if kind == "counter" else name
            if not re.search(rf"`{exported}(\{{[^`]*\}})?`", table):
                missing.append(exported)
    assert not missing, f"docs/operations.md's metric table does not name: {missing}"
