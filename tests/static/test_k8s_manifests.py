"""infra/k8s renders, every object validates, and the objects fit together (issue 26): the images
are the rendered parameters, selectors reach their pods, every workload but the node agent meets
the restricted Pod Security level, and `gfs stack node-key` prints each node's HMAC key. The
render and the validation are k8s_render.py; what no schema can see (the manifests against the
services' code: probes, ports, env var names, Secret references) is test_k8s_code_agreement.py.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from k8s_render import IMAGES, REGISTRY, TAG, _containers, _one, _workloads, validate


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
