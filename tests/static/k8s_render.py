"""The production overlay of infra/k8s rendered as an operator would, and each object validated:
shared by test_k8s_manifests.py (the objects are valid and fit together) and
test_k8s_code_agreement.py (they agree with the services' code). The rendered objects are the
session fixture `docs` (tests/static/conftest.py), rendered once for both.

The dry-run render is the real one: kustomize (pinned in infra/k8s/kustomize-tool, built from the
Go module proxy by build.sh when missing) builds the production overlay from a copy of the tree
with generated secret files and `kustomize edit set image`. Each object is validated, strictly
(unknown fields rejected), against the Kubernetes JSON schemas of `kubernetes-validate`
(offline), and the ServiceMonitor against the vendored prometheus-operator CRD (infra/crds) with
jsonschema.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

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


def build_kustomize() -> Path:
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


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def _workloads(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (d for d in docs if d["kind"] in WORKLOAD_KINDS)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]
