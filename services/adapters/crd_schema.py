"""Validate the manifests the adapter would apply against the projects' CRD schemas.

The CRDs live under infra/crds/: Kueue's published ClusterQueue CRD unchanged, and a
hand-written subset of KAI's Queue (sources in infra/crds/README.md).
A CRD's `openAPIV3Schema` is (nearly) JSON Schema; the differences handled here:

- Unknown fields: the API server rejects them under strict field validation (kubectl's default),
  while JSON Schema allows them. Every object schema with `properties` and no
  `additionalProperties` / `x-kubernetes-preserve-unknown-fields` is closed here, so a misspelt
  field fails validation instead of being silently pruned by the server.
- `x-kubernetes-int-or-string` (resource quantities): the CRD already states it as
  `anyOf: [integer, string]` plus a `pattern` that JSON Schema applies to strings only, which is
  exactly the API server's rule; the `x-kubernetes-*` keywords are otherwise ignored.
- CEL rules (`x-kubernetes-validations`) are not evaluated by jsonschema. The one rule the adapter's
  output can break, "flavors must have the same number of resources as the coveredResources"
  (Kueue), is checked by hand in `kueue_cel_errors`; "borrowingLimit must be nil when cohort is
  empty" depends on the live object (the adapter does not set the cohort) and is documented.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator

CRD_DIR = Path(__file__).resolve().parents[2] / "infra" / "crds"
CRD_FILES = {
    "kueue": CRD_DIR / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml",
    "kai": CRD_DIR / "kai" / "scheduling.run.ai_queues.yaml",
}


class ManifestInvalidError(ValueError):
    """A manifest the CRD schema rejects; the message lists every violation with its path."""


def _closed(schema: Any) -> Any:
    """A copy of `schema` where objects with declared properties admit no other field."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields", False)
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@dataclass(frozen=True)
class CrdSchema:
    """One served version of one CRD: its group/version/kind and a validator for its schema."""

    group: str
    version: str
    kind: str
    validator: Draft7Validator

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def errors(self, manifest: dict[str, Any]) -> list[str]:
        found = []
        if manifest.get("apiVersion") != self.api_version or manifest.get("kind") != self.kind:
            found.append(
                f"apiVersion/kind {manifest.get('apiVersion')}/{manifest.get('kind')} is not "
                f"{self.api_version}/{self.kind}"
            )
        for err in sorted(self.validator.iter_errors(manifest), key=lambda e: list(e.absolute_path)):
            where = ".".join(str(p) for p in err.absolute_path) or "(root)"
            found.append(f"{where}: {err.message}")
        if self.kind == "ClusterQueue":
            found.extend(kueue_cel_errors(manifest))
        return found

    def validate(self, manifest: dict[str, Any]) -> None:
        found = self.errors(manifest)
        if found:
            name = manifest.get("metadata", {}).get("name", "?")
            raise ManifestInvalidError(
                f"{self.kind} {name} is invalid against the {self.api_version} CRD schema: "
                + "; ".join(found)
            )


def load_crd(path: Path, version: str) -> CrdSchema:
    """Read a CRD YAML and build the validator of `version`, which must be served."""
    crd = yaml.safe_load(path.read_text())
    spec = crd["spec"]
    served = [v["name"] for v in spec["versions"] if v.get("served")]
    for entry in spec["versions"]:
        if entry["name"] == version and entry.get("served"):
            schema = _closed(copy.deepcopy(entry["schema"]["openAPIV3Schema"]))
            Draft7Validator.check_schema(schema)
            return CrdSchema(spec["group"], version, spec["names"]["kind"], Draft7Validator(schema))
    raise ValueError(f"{path.name} does not serve {version} (served: {served})")


@cache
def crd_for(target: str, api_version: str) -> CrdSchema:
    """The vendored CRD of `target` ("kueue" or "kai") at `api_version` ("group/version")."""
    group, _, version = api_version.partition("/")
    schema = load_crd(CRD_FILES[target], version)
    if schema.group != group:
        raise ValueError(f"{api_version} is not of the {target} CRD's group {schema.group}")
    return schema


def kueue_cel_errors(manifest: dict[str, Any]) -> list[str]:
    """The ClusterQueue CRD's per-resource-group CEL rule, which jsonschema cannot evaluate."""
    found = []
    groups = manifest.get("spec", {}).get("resourceGroups", [])
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        covered = group.get("coveredResources", []) if isinstance(group, dict) else []
        for j, flavor in enumerate(group.get("flavors", []) if isinstance(group, dict) else []):
            resources = flavor.get("resources", []) if isinstance(flavor, dict) else []
            if len(resources) != len(covered):
                found.append(
                    f"spec.resourceGroups.{i}.flavors.{j}: flavors must have the same number of "
                    "resources as the coveredResources"
                )
    return found
