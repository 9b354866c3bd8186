"""infra/prometheus/prometheus.yml and infra/jaeger/ agree with the services and the stack scripts.

The integration tests (tests/integration/test_observability_stack.py) exercise one node-agent port
and the OTLP/query ports; these static checks keep the rest from drifting: every service's default
`/metrics` port is scraped, everything binds to loopback, Jaeger is the pinned release.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gfs.services.forecast.app import ForecastServiceSettings
from gfs.services.preemption.service import PreemptionSettings
from gfs.services.quota.service import QuotaServiceSettings

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_YML = REPO / "infra" / "prometheus" / "prometheus.yml"
JAEGER_DIR = REPO / "infra" / "jaeger"
NODE_AGENT_PORTS = range(9101, 9111)  # the convention in docs/observability.md


def _targets(config: dict[str, Any]) -> dict[str, list[str]]:
    return {
        job["job_name"]: [t for group in job["static_configs"] for t in group["targets"]]
        for job in config["scrape_configs"]
    }


def test_prometheus_scrapes_every_service_default_port_every_5s() -> None:
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    assert config["global"]["scrape_interval"] == "5s"
    targets = _targets(config)
    quota_port = QuotaServiceSettings.model_fields["quota_api_port"].default
    assert targets["gfs-quota"] == [f"127.0.0.1:{quota_port}"]
    preemption_port = PreemptionSettings.model_fields["preemption_api_port"].default
    assert targets["gfs-preemption"] == [f"127.0.0.1:{preemption_port}"]
    forecast_port = ForecastServiceSettings.model_fields["forecast_web_port"].default
    assert targets["gfs-forecast"] == [f"127.0.0.1:{forecast_port}"]
    assert targets["gfs-node-agent"] == [f"127.0.0.1:{port}" for port in NODE_AGENT_PORTS]
    assert targets["jaeger"] == ["127.0.0.1:8888"]
    every = [t for ts in targets.values() for t in ts]
    assert all(t.startswith("127.0.0.1:") for t in every)
    assert len(every) == len(set(every)), "a target is scraped twice"


def _endpoints(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k == "endpoint" and isinstance(v, str)]
        return found + [e for v in node.values() for e in _endpoints(v)]
    if isinstance(node, list):
        return [e for v in node for e in _endpoints(v)]
    return []


def test_jaeger_config_binds_loopback_on_the_ports_the_scripts_expect() -> None:
    config = yaml.safe_load((JAEGER_DIR / "config.yaml").read_text())
    endpoints = set(_endpoints(config))
    assert endpoints == {
        "127.0.0.1:4317", "127.0.0.1:4318", "127.0.0.1:16686", "127.0.0.1:16685", "127.0.0.1:13133",
    }  # fmt: skip
    [reader] = config["service"]["telemetry"]["metrics"]["readers"]
    assert reader["pull"]["exporter"]["prometheus"] == {"host": "127.0.0.1", "port": 8888}
    # start.sh refuses to start when one of these is taken; it must list every bound port.
    common = (JAEGER_DIR / "common.sh").read_text()
    [ports] = re.findall(r"^JAEGER_PORTS=\(([^)]*)\)", common, flags=re.M)
    assert set(ports.split()) == {e.rpartition(":")[2] for e in endpoints} | {"8888"}


def test_jaeger_is_the_pinned_go_tool() -> None:
    go_mod = (JAEGER_DIR / "go.mod").read_text()
    assert "tool github.com/jaegertracing/jaeger/cmd/jaeger" in go_mod
    assert re.search(r"^\s*github\.com/jaegertracing/jaeger v1\.75\.0\b", go_mod, flags=re.M)
    assert "github.com/jaegertracing/jaeger v1.75.0 h1:" in (JAEGER_DIR / "go.sum").read_text()
