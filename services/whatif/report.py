"""`gfs whatif`'s comparison: what happened, GFS as it ran (simulated), and the asked policies.

GFS simulated on the rebuilt trace must equal what happened where the live service ran on the
settling clock (the sim/live parity promise, services/parity): `parity` says whether it does, and
which numbers differ. On a wall-clock run it differs by the timing noise of a real cluster: the
simulated GFS is then the baseline the other policies are measured against, beside the real
numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gfs.services.core.quota import QuotaSettings
from gfs.services.whatif.money import MonthlyBenefit, monthly_benefit
from gfs.services.whatif.outcomes import Summary, summarize
from gfs.services.whatif.rebuild import Rebuilt
from gfs.services.whatif.replay import simulate

PARITY_TOLERANCE = 1e-6  # relative: the same schedule gives the same sums up to float rounding


@dataclass(frozen=True, slots=True)
class WhatIf:
    happened: Summary
    gfs: Summary
    policies: Mapping[str, Summary]
    benefit: Mapping[str, MonthlyBenefit]  # per asked policy: what GFS as it ran earned over it
    span_s: float
    tasks: int
    nodes: int
    left_out: Mapping[str, int]

    @property
    def parity_differences(self) -> dict[str, tuple[float, float]]:
        """The headline numbers on which simulated GFS differs from what happened."""
        sim, real = self.gfs.headline(), self.happened.headline()
        return {
            k: (real[k], sim[k])
            for k in real
            if not math.isclose(real[k], sim[k], rel_tol=PARITY_TOLERANCE, abs_tol=PARITY_TOLERANCE)
        }

    def to_json(self) -> dict[str, object]:
        return {
            "span_s": self.span_s,
            "tasks": self.tasks,
            "nodes": self.nodes,
            "left_out": dict(self.left_out),
            "happened": self.happened.to_json(),
            "gfs_simulated": self.gfs.to_json(),
            "parity": not self.parity_differences,
            "parity_differences": {
                k: {"happened": a, "simulated": b} for k, (a, b) in self.parity_differences.items()
            },
            "policies": {name: s.to_json() for name, s in self.policies.items()},
            "monthly_benefit_over": {name: b.to_json() for name, b in self.benefit.items()},
        }

    def describe(self) -> str:
        names = list(self.policies)
        head = ["", "happened", "gfs (sim)", *[f"{n} (sim)" for n in names]]
        rows: list[list[str]] = [head]
        runs = [self.happened, self.gfs, *self.policies.values()]
        for key, label, fmt in (
            ("evictions", "spot evictions", "{:.0f}"),
            ("spot_queue_mean_s", "spot queueing, mean (min)", "{:.1f}"),
            ("hp_queue_mean_s", "HP queueing, mean (min)", "{:.1f}"),
            ("spot_gpu_hours", "spot GPU-hours", "{:.1f}"),
        ):
            scale = 60.0 if key.endswith("_s") else 1.0
            rows.append([label, *[fmt.format(r.headline()[key] / scale) for r in runs]])
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [
            "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in rows
        ]
        out = [
            f"log: {self.span_s / 3600.0:.1f} h, {self.tasks} tasks, {self.nodes} nodes"
            + (
                f"; left out: {', '.join(f'{v} {k}' for k, v in sorted(self.left_out.items()))}"
                if self.left_out
                else ""
            ),
            *lines,
        ]
        diffs = self.parity_differences
        out.append(
            "parity: simulated GFS equals what happened"
            if not diffs
            else "parity: simulated GFS differs from what happened on "
            + ", ".join(f"{k} ({a:g} vs {b:g})" for k, (a, b) in diffs.items())
        )
        for name, b in self.benefit.items():
            per_day = ", ".join(f"{p} {v:+.1f}" for p, v in sorted(b.gpu_hours_per_day.items()))
            sign = "-" if b.usd_per_month < 0 else ""
            money = f"{sign}${abs(b.usd_per_month):,.0f} per 30-day month"
            line = f"GFS over {name}: {money} (spot GPU-hours per day: {per_day})"
            if b.unpriced:
                line += f"; no --price for {', '.join(b.unpriced)}"
            out.append(line)
        return "\n".join(out)


def what_if(
    rebuilt: Rebuilt,
    policies: Sequence[str],
    settings: QuotaSettings | None,
    prices: Mapping[str, float],
    labels: Sequence[str] = (),
) -> WhatIf:
    """`labels`: the `--set` items, appended to the compared policies' names."""
    if not rebuilt.tasks:
        raise ValueError("the log has no task submissions in the asked range and pools: nothing to replay")
    if not rebuilt.trace.nodes:
        raise ValueError(
            "the log has no node telemetry in the asked range and pools: no cluster to replay on"
        )
    gfs, kept = simulate(rebuilt, "gfs")
    happened = summarize(
        {t: i for t, i in rebuilt.tasks.items() if t in kept}, rebuilt.happened, rebuilt.end_s
    )
    suffix = "".join(f" {item}" for item in labels)
    others = {f"{name}{suffix}": simulate(rebuilt, name, settings)[0] for name in policies}
    span = max(rebuilt.span_s, 1.0)
    benefit = {
        name: monthly_benefit(happened.spot_gpu_hours_by_pool, s.spot_gpu_hours_by_pool, prices, span)
        for name, s in others.items()
    }
    return WhatIf(happened, gfs, others, benefit, span, len(kept), len(rebuilt.trace.nodes), rebuilt.left_out)
