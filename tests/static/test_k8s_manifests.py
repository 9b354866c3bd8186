"""infra/k8s renders, every object validates, and the manifests agree with the services' code.

The dry-run render is the real one: kustomize (pinned in infra/k8s/kustomize-tool, built from the
Go module proxy by build.sh when missing) builds the production overlay from a copy of the tree
with generated secret files and `kustomize edit set image`, as an operator would. Each object is
then validated, strictly (unknown fields rejected), against the Kubernetes JSON schemas of
`kubernetes-validate` (offline), and the ServiceMonitor against the vendored prometheus-operator
CRD (infra/crds) with jsonschema. A schema cannot see what the services serve or read, so the
cross-checks below compare probes, ports, env var names and Secret references with the code.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import hmac
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from services.forecast.app import ForecastServiceSettings, make_app
from services.node_agent.service import build_metrics_app
from services.node_agent.settings import NodeAgentSettings
from services.platform.metrics import configure_metrics
from services.platform.settings import PlatformSettings
from services.preemption.api import build_api as preemption_api
from services.preemption.service import PreemptionSettings
from services.quota.service import QuotaServiceSettings
from services.quota.service import build_api as quota_api

REPO = Path(__file__).resolve().parents[2]
K8S_DIR = REPO / "infra" / "k8s"
OVERLAY = "overlays/production"
CRD_PATH = REPO / "infra" / "crds" / "prometheus-operator" / "monitoring.coreos.com_servicemonitors.yaml"
# The Kubernetes versions the objects must be valid for: the oldest supported here and the newest
# schemas kubernetes-validate bundles (its schemas are offline, in the wheel).
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
REGISTRY = "registry.test/gfs"
TAG = "ci-0123abc"
IMAGES = ("gfs-preemption", "gfs-quota", "gfs-forecast", "gfs-node-agent")
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet", "Job")
# Env vars the manifests set that no settings class reads, each with who does read it.
NOT_SETTINGS = {
    "NODE_NAME": "the agent container's command line (--node)",
    "NVIDIA_VISIBLE_DEVICES": "the NVIDIA container runtime",
    "NVIDIA_DRIVER_CAPABILITIES": "the NVIDIA container runtime",
}


# ---------------------------------------------------------------------------------------------
# Render and validate (the path CI runs; the negative tests go through the same functions)


@pytest.fixture(scope="module")
def kustomize() -> Path:
    """The pinned kustomize, built once (cached under .stack/bin, like Jaeger)."""
    build = subprocess.run(
        ["bash", str(K8S_DIR / "kustomize-tool" / "build.sh")], capture_output=True, text=True, timeout=900
    )
    assert build.returncode == 0, build.stdout + build.stderr
    stack = Path(os.environ.get("GFS_STACK_DIR", REPO / ".stack"))
    return stack / "bin" / "kustomize"


def render(kustomize: Path, workdir: Path) -> list[dict[str, Any]]:
    """`kustomize build` of the production overlay, parameterised as an operator does."""
    tree = workdir / "k8s"
    shutil.copytree(K8S_DIR, tree, ignore=shutil.ignore_patterns("*.env", "go.*", "*.sh"))
    overlay = tree / OVERLAY
    for example in (overlay / "secrets").glob("*.env.example"):
        names = [
            line.split("=", 1)[0] for line in example.read_text().splitlines() if line and line[0] != "#"
        ]
        (overlay / "secrets" / example.name.removesuffix(".example")).write_text(
            "".join(f"{name}={secrets.token_hex(16)}\n" for name in names)
        )
    images = [f"{name}={REGISTRY}/{name}:{TAG}" for name in IMAGES]
    subprocess.run([str(kustomize), "edit", "set", "image", *images], cwd=overlay, check=True)
    out = subprocess.run([str(kustomize), "build", "."], cwd=overlay, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def _strict(schema: Any) -> Any:
    """The CRD's schema with unknown fields rejected, as the API server's strict field validation
    does (a structural schema prunes them silently otherwise, so a typo would pass)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@functools.cache
def _crd_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    crd = yaml.safe_load(CRD_PATH.read_text())
    out = {}
    for version in crd["spec"]["versions"]:
        schema = _strict(version["schema"]["openAPIV3Schema"])
        # metadata is the ObjectMeta the core schemas check; the CRD leaves it open.
        schema["properties"]["metadata"] = {"type": "object"}
        api = f"{crd['spec']['group']}/{version['name']}"
        out[(api, crd["spec"]["names"]["kind"])] = jsonschema.Draft7Validator(schema)
    return out


def validate(doc: dict[str, Any]) -> None:
    """Raise if `doc` is not a valid object (core kinds: Kubernetes schemas; CRDs: theirs)."""
    key = (doc.get("apiVersion", ""), doc.get("kind", ""))
    crds = _crd_validators()
    if key in crds:
        crds[key].validate(doc)
        return
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.fixture(scope="module")
def docs(kustomize: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(kustomize, tmp_path_factory.mktemp("k8s"))


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def _workloads(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (d for d in docs if d["kind"] in WORKLOAD_KINDS)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_the_overlay_renders_every_object_valid(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        validate(doc)
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs if d["kind"] != "Secret")
    assert kinds == [
        "ConfigMap/gfs-platform",
        "DaemonSet/gfs-node-agent",
        "Deployment/gfs-forecast",
        "Deployment/gfs-preemption",
        "Deployment/gfs-quota",
        "Job/gfs-db-migrate",
        "Job/gfs-kafka-topics",
        "Namespace/gfs",
        "PodDisruptionBudget/gfs-preemption",
        "Service/gfs-forecast",
        "Service/gfs-node-agent",
        "Service/gfs-preemption",
        "Service/gfs-quota",
        "ServiceMonitor/gfs",
    ]
    assert sorted(d["metadata"]["name"].rsplit("-", 1)[0] for d in docs if d["kind"] == "Secret") == [
        "gfs-admin-token",
        "gfs-command-secret",
        "gfs-db-migrate",
        "gfs-db-preemption",
        "gfs-db-quota",
    ]
    # Kafka and Postgres are external: nothing here runs a broker or a database.
    images = {c["image"] for w in _workloads(docs) for c in _containers(w)}
    assert not any("kafka" in i or "postgres" in i for i in images)
    assert all(d["metadata"].get("namespace") == "gfs" for d in docs if d["kind"] != "Namespace")


@pytest.mark.parametrize(
    ("kind", "where", "value"),
    [
        # A misspelled field, a wrong type, a probe without a handler: the core schemas.
        (
            "Deployment",
            ["spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet", "paht"],
            "/readyz",
        ),
        ("Deployment", ["spec", "replicas"], "two"),
        ("DaemonSet", ["spec", "template", "spec", "containers", 0, "ports", 0, "containerPort"], "9101"),
        ("PodDisruptionBudget", ["spec", "minAvailabel"], 1),
        # The ServiceMonitor: its CRD's schema.
        ("ServiceMonitor", ["spec", "endpoints", 0, "intervall"], "30s"),
        ("ServiceMonitor", ["spec", "endpoints", 0, "interval"], "thirty seconds"),
        ("ServiceMonitor", ["spec", "selector"], "app=gfs"),
    ],
)
def test_the_validation_rejects_a_broken_object(
    docs: list[dict[str, Any]], kind: str, where: list[Any], value: Any
) -> None:
    doc = copy.deepcopy(next(d for d in docs if d["kind"] == kind))
    validate(doc)  # valid before the change
    node: Any = doc
    for step in where[:-1]:
        node = node[step]
    node[where[-1]] = value
    with pytest.raises((kubernetes_validate.ValidationError, jsonschema.ValidationError)):
        validate(doc)


def test_the_images_are_the_rendered_parameters(docs: list[dict[str, Any]]) -> None:
    for workload in _workloads(docs):
        for container in _containers(workload):
            name, _, tag = container["image"].rpartition(":")
            assert tag == TAG and name.rpartition("/")[0] == REGISTRY, container["image"]
            assert name.rpartition("/")[2] in IMAGES


# ---------------------------------------------------------------------------------------------
# Cross-checks against the services' code


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


def test_selectors_reach_their_pods(docs: list[dict[str, Any]]) -> None:
    pods = {
        w["metadata"]["name"]: (w["spec"]["template"]["metadata"]["labels"], _containers(w))
        for w in docs
        if w["kind"] in ("Deployment", "DaemonSet")
    }

    def matching(selector: dict[str, str]) -> list[str]:
        return [n for n, (labels, _) in pods.items() if selector.items() <= labels.items()]

    pdb = _one(docs, "PodDisruptionBudget", "gfs-preemption")
    assert matching(pdb["spec"]["selector"]["matchLabels"]) == ["gfs-preemption"]
    assert (
        pdb["spec"]["minAvailable"] == 1
        and _one(docs, "Deployment", "gfs-preemption")["spec"]["replicas"] >= 2
    )
    monitor = _one(docs, "ServiceMonitor", "gfs")
    services = [d for d in docs if d["kind"] == "Service"]
    assert len(services) == 4
    for service in services:
        # The ServiceMonitor selects every Service, on a port name the Service has.
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
            p["name"] for p in service["spec"]["ports"]
        }
        targets = matching(service["spec"]["selector"])
        assert targets == [service["metadata"]["name"]]
        container_ports = {p["name"] for c in pods[targets[0]][1] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= container_ports
    agent = _one(docs, "DaemonSet", "gfs-node-agent")["spec"]["template"]["spec"]
    assert (
        agent["nodeSelector"] == {"nvidia.com/gpu.present": "true"} and agent["runtimeClassName"] == "nvidia"
    )


def test_node_key_prints_each_nodes_hmac_key() -> None:
    master = "k8s-test-master-secret-0123456789"
    env = {**os.environ, "GFS_COMMAND_SECRET": master}
    gfs = str(Path(sys.executable).parent / "gfs")
    out = subprocess.run(
        [gfs, "stack", "node-key", "gpu-a", "gpu-b"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    # docs/protocol.md: node key = HMAC-SHA256(master, "gfs/node-command-key/v1" NUL node).
    label = b"gfs/node-command-key/v1\x00"
    keys = [
        hmac.new(master.encode(), label + node.encode(), hashlib.sha256).hexdigest()
        for node in ("gpu-a", "gpu-b")
    ]
    want = [f"gpu-a {keys[0]}", f"gpu-b {keys[1]}"]
    assert out.stdout.splitlines() == want
    env.pop("GFS_COMMAND_SECRET")
    missing = subprocess.run([gfs, "stack", "node-key", "gpu-a"], env=env, capture_output=True, text=True)
    assert missing.returncode == 2 and "GFS_COMMAND_SECRET is not set" in missing.stderr


def check_restricted(workload: dict[str, Any]) -> None:
    """The main rules of the Pod Security "restricted" level (the namespace warns on it)."""
    name = workload["metadata"]["name"]
    pod = workload["spec"]["template"]["spec"]
    assert pod.get("securityContext", {}).get("seccompProfile", {}).get("type") == "RuntimeDefault", name
    assert not any("hostPath" in v for v in pod.get("volumes", [])), f"{name}: hostPath"
    for container in _containers(workload):
        context = container.get("securityContext", {})
        non_root = context.get("runAsNonRoot", pod["securityContext"].get("runAsNonRoot"))
        assert non_root is True, f"{name}/{container['name']}: runAsNonRoot"
        assert context.get("allowPrivilegeEscalation") is False, f"{name}/{container['name']}: escalation"
        assert context.get("capabilities", {}).get("drop") == ["ALL"], f"{name}/{container['name']}: drop ALL"
        assert not context.get("capabilities", {}).get("add"), (
            f"{name}/{container['name']}: added capabilities"
        )


def test_every_workload_but_the_node_agent_meets_the_restricted_pod_security_level(
    docs: list[dict[str, Any]],
) -> None:
    for workload in _workloads(docs):
        if workload["metadata"]["name"] != "gfs-node-agent":
            check_restricted(workload)
    # The agent cannot (hostPath, a root init container): the namespace enforces "privileged".
    with pytest.raises(AssertionError, match="hostPath"):
        check_restricted(_one(docs, "DaemonSet", "gfs-node-agent"))
    labels = _one(docs, "Namespace", "gfs")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    broken = copy.deepcopy(_one(docs, "Deployment", "gfs-quota"))
    del broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"]
    with pytest.raises(AssertionError, match="escalation"):
        check_restricted(broken)
