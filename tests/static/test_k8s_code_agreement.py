"""The rendered manifests agree with the services' code (issue 26), what no schema can see: probe
paths are routes the services serve and probe ports the ports they listen on, bind addresses are
`0.0.0.0`, every env var is one the service's settings class reads, every Secret reference
resolves and only preemption gets the master secret. Each check is shown to reject a broken
object. The render is k8s_render.py (the session fixture `docs`, shared with
test_k8s_manifests.py).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from k8s_render import _containers, _one, _workloads
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from gfs.services.forecast.app import ForecastServiceSettings, make_app
from gfs.services.node_agent.service import build_metrics_app
from gfs.services.node_agent.settings import NodeAgentSettings
from gfs.services.platform.metrics import configure_metrics
from gfs.services.platform.settings import PlatformSettings
from gfs.services.preemption.service import PreemptionSettings
from gfs.services.preemption.sre.api import build_api as preemption_api
from gfs.services.quota.service import QuotaServiceSettings
from gfs.services.quota.service import build_api as quota_api

# Env vars the manifests set that no settings class reads, each with who does read it.
NOT_SETTINGS = {
    "NODE_NAME": "the agent container's command line (--node)",
    "NVIDIA_VISIBLE_DEVICES": "the NVIDIA container runtime",
    "NVIDIA_DRIVER_CAPABILITIES": "the NVIDIA container runtime",
}


def _settings_of(container: dict[str, Any]) -> type[BaseSettings]:
    """The settings class the container's command constructs."""
    argv = " ".join([*container.get("command", []), *container.get("args", [])])
    for needle, cls in (
        ("serve preemption", PreemptionSettings),
        ("serve quota", QuotaServiceSettings),
        ("serve forecast", ForecastServiceSettings),
        ("serve node-agent", NodeAgentSettings),
        ("db migrate", PlatformSettings),
        ("db grant", PlatformSettings),
        ("stack topics", PlatformSettings),
    ):
        if needle in argv:
            return cls
    raise AssertionError(f"no known gfs command in {argv!r}")


def env_names(cls: type[BaseSettings]) -> set[str]:
    """The env var names `cls` reads (pydantic-settings: prefix + field name, or its aliases)."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for field_name, field in cls.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {str(choice).upper() for choice in alias.choices}
        elif isinstance(alias, str):
            names.add(alias.upper())
        else:
            names.add(f"{prefix}{field_name}".upper())
    return names


def _configmaps(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}


def _env_of(container: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every env var the container gets: its env list and the ConfigMaps of its envFrom."""
    out: dict[str, Any] = {}
    maps = _configmaps(docs)
    for source in container.get("envFrom", []):
        ref = source["configMapRef"]["name"]
        assert ref in maps, f"envFrom ConfigMap {ref} is not rendered"
        out.update(maps[ref])
    for var in container.get("env", []):
        out[var["name"]] = var.get("value", var.get("valueFrom"))
    return out


def check_env(workload: dict[str, Any], docs: list[dict[str, Any]]) -> None:
    for container in workload["spec"]["template"]["spec"]["containers"]:
        known = env_names(_settings_of(container))
        for name in _env_of(container, docs):
            if name in NOT_SETTINGS:
                continue
            assert name in known, f"{workload['metadata']['name']}: {name} is read by no setting"
        script = " ".join(container.get("args", []))
        if "NODE_NAME" in _env_of(container, docs):
            assert '--node "$NODE_NAME"' in script


def test_every_env_var_is_one_the_service_reads(docs: list[dict[str, Any]]) -> None:
    for workload in _workloads(docs):
        check_env(workload, docs)


def test_the_env_check_rejects_a_misspelled_setting(docs: list[dict[str, Any]]) -> None:
    doc = copy.deepcopy(_one(docs, "Deployment", "gfs-preemption"))
    doc["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "PREEMPTION_API_HOTS", "value": "x"}
    )
    with pytest.raises(AssertionError, match="PREEMPTION_API_HOTS is read by no setting"):
        check_env(doc, docs)


def served_paths() -> dict[str, set[str]]:
    """The HTTP paths each service's server routes (built from the code, nothing started)."""
    metrics = configure_metrics("k8s-test")
    out = {}
    for name, api in (("gfs-preemption", preemption_api), ("gfs-quota", quota_api)):
        app = api(None, metrics, asyncio.Event())  # type: ignore[arg-type]
        out[name] = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    agent = build_metrics_app(metrics)
    out["gfs-node-agent"] = {r.resource.canonical for r in agent.router.routes() if r.resource is not None}
    out["gfs-forecast"] = set(make_app(ForecastServiceSettings(forecast_artifact=None)).web.views)
    return out


# How each service is told its port and its bind address (None: a command-line flag, below).
PORT_SETTINGS = {
    "gfs-preemption": ("PREEMPTION_API_PORT", "PREEMPTION_API_HOST"),
    "gfs-quota": ("QUOTA_API_PORT", "QUOTA_API_HOST"),
    "gfs-forecast": ("FORECAST_WEB_PORT", "FORECAST_WEB_HOST"),
    "gfs-node-agent": (None, "AGENT_METRICS_HOST"),
}


def check_probes(workload: dict[str, Any], docs: list[dict[str, Any]], paths: dict[str, set[str]]) -> None:
    name = workload["metadata"]["name"]
    container = workload["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    env = _env_of(container, docs)
    port_env, host_env = PORT_SETTINGS[name]
    # The service binds all interfaces (loopback is its default) on the port the container exposes.
    assert env.get(host_env) == "0.0.0.0", f"{name}: {host_env} must be 0.0.0.0 in a pod"
    if port_env is not None:
        served_port = int(env[port_env])
    else:
        served_port = int(" ".join(container["args"]).split("--metrics-port", 1)[1].split()[0])
    probes = [container.get(p) for p in ("readinessProbe", "livenessProbe", "startupProbe")]
    assert probes[0] is not None and probes[1] is not None, f"{name}: readiness and liveness probes"
    for probe in filter(None, probes):
        get = probe["httpGet"]
        port = ports.get(get["port"], get["port"])
        assert port == served_port, f"{name}: probe port {get['port']} is not the served port {served_port}"
        assert get["path"] in paths[name], f"{name}: {get['path']} is not served ({sorted(paths[name])})"
    if name != "gfs-node-agent":  # the agent serves no readiness notion: /healthz for both
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_probes_and_ports_match_what_the_services_serve(docs: list[dict[str, Any]]) -> None:
    paths = served_paths()
    long_running = [w for w in docs if w["kind"] in ("Deployment", "DaemonSet")]
    assert sorted(w["metadata"]["name"] for w in long_running) == sorted(PORT_SETTINGS)
    for workload in long_running:
        check_probes(workload, docs, paths)
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert container["resources"]["requests"].keys() >= {"cpu", "memory"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["readinessProbe"]["httpGet"].update(port="metrics"), "is not the served port"),
        (lambda c: c["livenessProbe"]["httpGet"].update(path="/health"), "/health is not served"),
        (lambda c: c["ports"][0].update(containerPort=8080), "is not the served port"),
        (lambda c: c["env"].remove({"name": "PREEMPTION_API_HOST", "value": "0.0.0.0"}), "must be 0.0.0.0"),
    ],
)
def test_the_probe_check_rejects_a_mismatch(docs: list[dict[str, Any]], change: Any, message: str) -> None:
    doc = copy.deepcopy(_one(docs, "Deployment", "gfs-preemption"))
    change(doc["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(AssertionError, match=message):
        check_probes(doc, docs, served_paths())


def check_secret_refs(docs: list[dict[str, Any]]) -> None:
    rendered = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "Secret"}
    for workload in _workloads(docs):
        for container in _containers(workload):
            for var in container.get("env", []):
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                if ref is None:
                    continue
                assert ref["name"] in rendered, f"Secret {ref['name']} is not rendered"
                assert ref["key"] in rendered[ref["name"]], f"Secret {ref['name']} has no key {ref['key']}"


def test_every_secret_reference_resolves_and_the_master_secret_stays_off_the_nodes(
    docs: list[dict[str, Any]],
) -> None:
    check_secret_refs(docs)
    holders = {
        w["metadata"]["name"]
        for w in _workloads(docs)
        for c in _containers(w)
        for v in c.get("env", [])
        if v["name"] == "GFS_COMMAND_SECRET"
    }
    # Only the scheduler signs; the agents verify with their own node key (node-agent.yaml).
    assert holders == {"gfs-preemption"}
    broken = copy.deepcopy(docs)
    quota = _one(broken, "Deployment", "gfs-quota")
    quota["spec"]["template"]["spec"]["containers"][0]["env"][-1]["valueFrom"]["secretKeyRef"]["name"] = (
        "gfs-db"
    )
    with pytest.raises(AssertionError, match="Secret gfs-db is not rendered"):
        check_secret_refs(broken)
