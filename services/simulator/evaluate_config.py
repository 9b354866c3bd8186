"""The evaluation grid's configuration: read from YAML/JSON, frozen with every default expanded.

The frozen form (written into the report header) is itself a valid config: running
`gfs evaluate --config DIR/config.frozen.json` reruns exactly the same grid. Its SHA-256 covers the
generator's full parameter set and the node inventory's content, so two reports with the same
hash were produced from the same workload definitions.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from services.core.policies.registry import build_registry
from services.simulator.traces.synth_config import GeneratorConfig

DEFAULT_POLICIES = ("gfs", "fifo", "k8s-priority", "lyra", "fgd", "chronus")


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """GFS's sensitivity to the guarantee rate p, the guarantee hours H (spec 6.5) and the target
    eviction rate of the quota feedback (issue 10), at each of `loads`. The grid's own cells of
    `policy` are the default point (p = 0.9, H = 1, target 1 - p) of every sweep."""

    policy: str = "gfs"
    loads: tuple[float, ...] = (1.0,)
    seeds: tuple[int, ...] = (0,)
    guarantee_rates: tuple[float, ...] = (0.8, 0.85, 0.9, 0.95, 0.99)
    guarantee_hours: tuple[int, ...] = (1, 2, 4)
    target_rates: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class EvaluateConfig:
    name: str = "default"
    nodes: str = "data/gfs-v2026/node_info_df.csv"  # relative paths resolve against GFS_SHARED_DIR
    # Keep every round(1/node_fraction)-th node of each pool (file order): a smaller cluster with the
    # same shape. Pair it with generator.scale = node_fraction to keep the calibrated load.
    node_fraction: float = 1.0
    generator: dict[str, Any] = field(default_factory=dict)  # GeneratorConfig fields (seed ignored)
    seeds: tuple[int, ...] = (0, 1, 2)
    loads: tuple[float, ...] = (0.8, 0.9, 1.0)  # HP arrivals and t = 0 HP population x load
    policies: tuple[str, ...] = DEFAULT_POLICIES
    reference: str = "gfs"
    forecast: str = "persistence"
    window_days: float = 31.0
    drain_days: float = 7.0
    workers: int = 2
    sensitivity: Sensitivity | None = None
    nodes_sha256: str = ""  # filled when frozen; checked on a rerun

    def base_generator(self) -> GeneratorConfig:
        return GeneratorConfig.from_dict({k: v for k, v in self.generator.items() if k != "seed"})

    def frozen(self) -> EvaluateConfig:
        """Every generator default expanded and the node file's hash recorded."""
        gen = self.base_generator().to_dict()
        gen.pop("seed", None)
        digest = file_sha256(resolve_nodes(self.nodes))
        if self.nodes_sha256 and self.nodes_sha256 != digest:
            raise ValueError(
                f"node inventory {self.nodes} changed: "
                f"sha256 {digest[:12]} != frozen {self.nodes_sha256[:12]}"
            )
        return EvaluateConfig(**{**_fields(self), "generator": gen, "nodes_sha256": digest})

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(json.dumps(asdict(self)))  # tuples -> lists, as read back
        return data

    def digest(self) -> str:
        """Hash of everything that defines the numbers (worker count excluded: it changes none)."""
        data = {k: v for k, v in self.to_dict().items() if k != "workers"}
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _fields(cfg: EvaluateConfig) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in EvaluateConfig.__dataclass_fields__}


def shared_dir() -> Path:
    env = os.environ.get("GFS_SHARED_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared"


def resolve_nodes(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else shared_dir() / p


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def parse_config(data: dict[str, Any]) -> EvaluateConfig:
    known = set(EvaluateConfig.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown evaluate config keys: {', '.join(sorted(unknown))}")
    kwargs: dict[str, Any] = dict(data)
    for key in ("seeds", "loads", "policies"):
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    sens = kwargs.get("sensitivity")
    if sens is not None:
        sens = dict(sens)
        if "load" in sens:  # configs written before the sweeps took several loads
            sens["loads"] = [sens.pop("load")]
        for key in ("loads", "seeds", "guarantee_rates", "guarantee_hours", "target_rates"):
            if key in sens:
                sens[key] = tuple(sens[key])
        kwargs["sensitivity"] = Sensitivity(**sens)
    cfg = EvaluateConfig(**kwargs)
    if not 0 < cfg.node_fraction <= 1:
        raise ValueError("node_fraction must be in (0, 1]")
    # Checked here, not in the worker: a misspelt policy would otherwise fail only when its first
    # cell runs, after the cells before it have spent their minutes.
    known_policies = build_registry()
    asked = set(cfg.policies) | ({cfg.sensitivity.policy} if cfg.sensitivity else set())
    unknown_policies = sorted(asked - set(known_policies))
    if unknown_policies:
        raise ValueError(
            f"unknown policies: {', '.join(unknown_policies)}; known: {', '.join(sorted(known_policies))}"
        )
    if cfg.reference not in cfg.policies:
        raise ValueError(f"reference policy {cfg.reference!r} must be one of the policies")
    if cfg.workers < 1:
        raise ValueError("workers must be >= 1")
    return cfg


def load_config(path: Path) -> EvaluateConfig:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return parse_config(data)
