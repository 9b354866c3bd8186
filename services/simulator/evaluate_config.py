"""The evaluation grid's configuration: read from YAML/JSON, frozen with every default expanded.

The frozen form (written into the report header) is itself a valid config: running
`gfs evaluate --config DIR/config.frozen.json` reruns exactly the same grid. Its SHA-256 covers the
generator's full parameter set and the node inventory's content, so two reports with the same
hash were produced from the same workload definitions.

A config with `regimes` is a robustness suite: instead of the grid (seeds x loads), every regime
(a generator, its parameters, a cluster) runs every policy at each of the config's seeds of one
split. `dev_seeds` are for choosing defaults, `test_seeds` (a disjoint set) for the report; both
are fixed in the config, so a default tuned on the dev seeds is scored on seeds it never saw.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gfs.services.core.policies.registry import build_registry
from gfs.services.simulator.traces.gfs_format import read_nodes
from gfs.services.simulator.traces.mmpp_config import MmppConfig
from gfs.services.simulator.traces.synth_config import GeneratorConfig

DEFAULT_POLICIES = ("gfs", "fifo", "k8s-priority", "lyra", "fgd", "chronus")
GENERATORS = ("synth", "mmpp")
SPLITS = ("dev", "test")
# The suite's keys, left out of a grid config's dict so grid configs keep the hash they had.
_SUITE_KEYS = ("regimes", "dev_seeds", "test_seeds", "baseline")


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
class Regime:
    """One workload of a robustness suite.

    `generator` "synth" (traces/synthetic.py) or "mmpp" (traces/mmpp.py); `params` are that
    generator's config fields (seed excluded: it comes from the suite's seeds). `load` is the HP
    load: for mmpp its `hp_load` (requested HP GPUs / capacity in every pool, over the evaluation
    window unless params set `load_start_day`); for synth the share of the calibrated HP workload
    kept (<= 1, evaluate_trace.thin_hp; more HP than calibrated: a `scale` above the node
    fraction). `node_fraction` (default: the config's) and `pools` (default: all) shape the cluster.
    """

    name: str
    generator: str = "synth"
    params: dict[str, Any] = field(default_factory=dict)
    load: float = 1.0
    node_fraction: float | None = None
    pools: tuple[str, ...] = ()
    note: str = ""


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
    # Robustness suite (module docstring): with regimes, `seeds` and `loads` are unused.
    regimes: tuple[Regime, ...] = ()
    dev_seeds: tuple[int, ...] = ()
    test_seeds: tuple[int, ...] = ()
    baseline: str = "fifo"  # the suite report gives reference / baseline for every metric

    @property
    def is_suite(self) -> bool:
        return bool(self.regimes)

    def split_seeds(self, split: str) -> tuple[int, ...]:
        if split not in SPLITS:
            raise ValueError(f"unknown seed split {split!r}: {' or '.join(SPLITS)}")
        return self.dev_seeds if split == "dev" else self.test_seeds

    def regime(self, name: str) -> Regime:
        for r in self.regimes:
            if r.name == name:
                return r
        raise KeyError(f"no regime {name!r} in config {self.name!r}")

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
        regimes = tuple(_frozen_regime(self, r) for r in self.regimes)
        _check_pools(regimes, resolve_nodes(self.nodes))
        return EvaluateConfig(
            **{**_fields(self), "generator": gen, "nodes_sha256": digest, "regimes": regimes}
        )

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(json.dumps(asdict(self)))  # tuples -> lists, as read back
        if not self.regimes:
            for key in _SUITE_KEYS:
                data.pop(key, None)
        return data

    def digest(self) -> str:
        """Hash of everything that defines the numbers (worker count excluded: it changes none)."""
        data = {k: v for k, v in self.to_dict().items() if k != "workers"}
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _fields(cfg: EvaluateConfig) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in EvaluateConfig.__dataclass_fields__}


def regime_generator(regime: Regime, seed: int) -> GeneratorConfig | MmppConfig:
    """The generator config of `regime` at `seed` (from a frozen config: every field explicit)."""
    params = {**regime.params, "seed": seed}
    if regime.generator == "synth":
        return GeneratorConfig.from_dict(params)
    return MmppConfig.from_dict({**params, "hp_load": regime.load})


def _frozen_regime(cfg: EvaluateConfig, regime: Regime) -> Regime:
    """Every parameter explicit. Defaults taken from the config: the trace length (`days` of the
    config's generator); for synth every other generator field of the config too, and `scale` =
    the regime's node fraction (the calibrated load on the smaller cluster); for mmpp the HP load
    and spot are placed in the evaluation window (the last window_days of the trace)."""
    fraction = cfg.node_fraction if regime.node_fraction is None else regime.node_fraction
    given = dict(regime.params)
    if regime.generator == "synth":
        unknown = sorted(set(given) - set(GeneratorConfig.__dataclass_fields__))
        if unknown:  # from_dict would ignore them silently
            raise ValueError(f"regime {regime.name!r}: unknown synth parameter(s) {', '.join(unknown)}")
        merged = {**cfg.generator, "scale": fraction, **given}
        params = GeneratorConfig.from_dict({k: v for k, v in merged.items() if k != "seed"}).to_dict()
    else:
        days = float(given.get("days", cfg.generator.get("days", MmppConfig().days)))
        window_start = max(0.0, days - cfg.window_days)
        merged = {"days": days, "load_start_day": window_start, "spot_start_day": window_start, **given}
        params = MmppConfig.from_dict({**merged, "hp_load": regime.load}).to_dict()
        params.pop("hp_load")
    params.pop("seed", None)
    return Regime(
        name=regime.name,
        generator=regime.generator,
        params=json.loads(json.dumps(params)),  # tuples -> lists, as a rerun reads them back
        load=regime.load,
        node_fraction=fraction,
        pools=tuple(sorted(regime.pools)),
        note=regime.note,
    )


def _check_pools(regimes: tuple[Regime, ...], nodes_path: Path) -> None:
    """A regime's pools must exist in the inventory (a typo would otherwise give an empty cluster)."""
    asked = {p for r in regimes for p in r.pools}
    if not asked:
        return
    present = {n.gpu_model for n in read_nodes(nodes_path)}
    missing = sorted(asked - present)
    if missing:
        raise ValueError(f"regime pools not in {nodes_path.name}: {', '.join(missing)}")


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
    for key in ("seeds", "loads", "policies", "dev_seeds", "test_seeds"):
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    if kwargs.get("regimes"):
        kwargs["regimes"] = tuple(_parse_regime(r) for r in kwargs["regimes"])
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
    if cfg.is_suite:
        _check_suite(cfg)
    return cfg


def _parse_regime(data: Any) -> Regime:
    if not isinstance(data, dict) or "name" not in data:
        raise ValueError(f"a regime must be a mapping with a name, got {data!r}")
    known = set(Regime.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"regime {data['name']!r}: unknown keys {', '.join(sorted(unknown))}")
    kwargs = dict(data)
    kwargs["pools"] = tuple(kwargs.get("pools") or ())
    kwargs["params"] = dict(kwargs.get("params") or {})
    return Regime(**kwargs)


def _check_suite(cfg: EvaluateConfig) -> None:
    """The rules of a suite, checked before any cell runs."""
    names = [r.name for r in cfg.regimes]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"duplicate regime names: {', '.join(duplicated)}")
    if not cfg.dev_seeds or not cfg.test_seeds:
        raise ValueError(
            "a suite needs both dev_seeds (for choosing defaults) and test_seeds (for reporting)"
        )
    shared = sorted(set(cfg.dev_seeds) & set(cfg.test_seeds))
    if shared:
        raise ValueError(f"dev_seeds and test_seeds must be disjoint; both hold {shared}")
    if cfg.baseline not in cfg.policies:
        raise ValueError(f"baseline policy {cfg.baseline!r} must be one of the policies")
    if cfg.sensitivity is not None:
        raise ValueError("a suite (regimes) has no sensitivity sweeps; run them as a grid config")
    for r in cfg.regimes:
        where = f"regime {r.name!r}"
        if r.generator not in GENERATORS:
            raise ValueError(f"{where}: unknown generator {r.generator!r} ({', '.join(GENERATORS)})")
        if "|" in r.name or not r.name:
            raise ValueError(f"{where}: a name must be non-empty and without '|'")
        if r.node_fraction is not None and not 0 < r.node_fraction <= 1:
            raise ValueError(f"{where}: node_fraction must be in (0, 1]")
        if "seed" in r.params:
            raise ValueError(f"{where}: no seed in params (the suite's dev/test seeds set it)")
        if r.generator == "synth" and not 0 < r.load <= 1:
            raise ValueError(
                f"{where}: a synth load keeps that share of the HP jobs, so it is in (0, 1] "
                "(for more HP than calibrated, set params.scale above the node fraction)"
            )
        if r.generator == "mmpp" and "hp_load" in r.params:
            raise ValueError(f"{where}: give the HP load as the regime's load, not params.hp_load")
        if r.generator == "mmpp" and r.load < 0:
            raise ValueError(f"{where}: load must be >= 0")


def load_config(path: Path) -> EvaluateConfig:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return parse_config(data)
