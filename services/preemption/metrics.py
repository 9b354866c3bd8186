"""The preemption service's metric families (served on the SRE API's `/metrics`).

Named by the Prometheus and OpenTelemetry rules (docs/operations.md, "Metrics and alerts"): a
cumulative count is a counter (exported with `_total`, so `rate()` and `increase()` handle a
restart's reset), a unit is in the name (`_seconds`, `_ratio`), a gauge is a level. Every family
has a description, because `promtool check metrics` warns on a family without help text
(tests/static/test_metrics_exposition.py renders them and runs it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry.metrics import CallbackOptions, Meter, Observation

if TYPE_CHECKING:
    from gfs.services.preemption.decider import Decider


def register_metrics(meter: Meter, decider: Decider) -> None:
    """Create the decider's instruments on `meter`: the ones it writes to (decision latency, the
    decisions, node-loss holds, refused and unsigned reports) are set on its `instruments`
    (counters.py); the rest are read from its live state at each scrape."""
    instruments = decider.instruments
    instruments.latency_hist = meter.create_histogram(
        "gfs_preemption_decision_latency_seconds", unit="s",
        description="From reading an inbox batch to its decisions, journal and commands committed",
    )  # fmt: skip
    stages = meter.create_histogram(
        "gfs_preemption_stage_seconds", unit="s",
        description="A task event's latency by stage, from the router's fetch to the command handed to "
        "the producer (services/platform/stage_stamps.py names the stages); per stamped command",
    )  # fmt: skip
    decider.commit_times.on_stages = lambda found: [stages.record(v, {"stage": k}) for k, v in found.items()]
    instruments.decisions_counter = meter.create_counter(
        "gfs_preemption_decisions", description="Decision records by kind"
    )  # exported as gfs_preemption_decisions_total
    instruments.held_counter = meter.create_counter(
        "gfs_preemption_node_loss_held",
        description="Times a pool's silent nodes were kept, not declared lost, by reason "
        "(input_lag, mass_silence, kill_switch): a stall is not a failure",
    )  # exported as gfs_preemption_node_loss_held_total
    instruments.refused_counter = meter.create_counter(
        "gfs_preemption_acks_refused",
        description="Acks and telemetry refused and dead-lettered, by type and reason: unmatched (not "
        "the command they claim to answer), unsigned, malformed_signature, signature_mismatch",
    )  # exported as gfs_preemption_acks_refused_total
    instruments.unsigned_counter = meter.create_counter(
        "gfs_preemption_acks_unsigned",
        description="Unsigned acks and telemetry applied because PREEMPTION_REQUIRE_SIGNED_ACKS is off",
    )  # exported as gfs_preemption_acks_unsigned_total

    def tasks(_: CallbackOptions) -> list[Observation]:
        out = []
        for name, controller in decider.owned_pools().items():
            for key, value in controller.running_and_queued().items():
                cls, state = key.split("_")
                out.append(Observation(value, {"pool": name, "class": cls, "state": state}))
        return out

    def evictions(_: CallbackOptions) -> list[Observation]:
        # A count since the process started: a counter, so rate() sees a restart as a reset.
        return [
            Observation(v, {"reason": r, "pool": p})
            for (r, p), v in sorted(decider.evictions_by_reason.items())
        ]

    def dead_letters(_: CallbackOptions) -> list[Observation]:
        return [Observation(decider.stats.dead_lettered)]

    topic = decider.settings.preemption_inbox_topic

    def owned(_: CallbackOptions) -> list[Observation]:
        # Not labelled `instance`: Prometheus' own target label would rename it (exported_instance).
        return [Observation(len(decider.partitions), {"decider": decider.instance, "topic": topic})]

    def inbox_partitions(_: CallbackOptions) -> list[Observation]:
        return [Observation(decider.settings.preemption_inbox_partitions, {"topic": topic})]

    def idle_fit(_: CallbackOptions) -> list[Observation]:
        return [
            Observation(gpus, {"pool": name, "reason": reason})
            for name, c in decider.owned_pools().items()
            for reason, gpus in c.idle_fit.gpus.items()
        ]

    def idle_fit_seconds(_: CallbackOptions) -> list[Observation]:
        return [
            Observation(seconds, {"pool": name, "reason": reason})
            for name, c in decider.owned_pools().items()
            for reason, seconds in c.idle_fit.gpu_seconds.items()
        ]

    meter.create_observable_gauge(
        "gfs_preemption_idle_while_work_fits_gpus", callbacks=[idle_fit],
        description="Idle GPUs a queued task would fit on, at the pool's last status, by the reason "
        "that held the work (reservation, claimed, quota:eta|floor|forecast, order, no-fit)",
    )  # fmt: skip
    meter.create_observable_counter(
        "gfs_preemption_idle_while_work_fits_gpu_seconds", callbacks=[idle_fit_seconds],
        description="GPU-seconds idle while a queued task would fit, by pool and reason, since the "
        "process started (integrated over the pool's statuses)",
    )  # fmt: skip

    def quota(_: CallbackOptions) -> list[Observation]:
        return [
            Observation(q, {"pool": name, "guarantee_hours": str(h)})
            for name, c in decider.owned_pools().items()
            for h, q in c.runtime.quota.items()
        ]

    def quota_stale(_: CallbackOptions) -> list[Observation]:
        # No SpotQuota in force: none received yet (no spot admitted), or the last one expired
        # (frozen at the spot GPUs in use). A quota an SRE froze or overrode is not stale: it is
        # in force by decision (controls.py), and GET /controls shows it.
        return [
            Observation(
                int(c.controls.quota_mode is None and (c.quota_valid_until is None or c.quota_frozen)),
                {"pool": name},
            )
            for name, c in sorted(decider.owned_pools().items())
        ]

    meter.create_observable_gauge(
        "gfs_preemption_tasks", callbacks=[tasks], description="Running and queued tasks per pool and class"
    )
    meter.create_observable_counter(
        "gfs_preemption_evictions", callbacks=[evictions],
        description="Tasks evicted (TaskEvicted), by pool and reason, since the process started",
    )  # fmt: skip
    meter.create_observable_counter(
        "gfs_preemption_dead_letters", callbacks=[dead_letters],
        description="Inbox records sent to the dead-letter topic since the process started",
    )  # fmt: skip
    meter.create_observable_gauge(
        "gfs_preemption_partitions_owned", callbacks=[owned],
        description="Inbox partitions this decider owns",
    )  # fmt: skip
    meter.create_observable_gauge(
        "gfs_preemption_inbox_partitions", callbacks=[inbox_partitions],
        description="Partitions of the inbox topic (every one should have an owner)",
    )  # fmt: skip
    meter.create_observable_gauge(
        "gfs_preemption_quota_gpus", callbacks=[quota],
        description="Spot quota in force per pool and guarantee duration, in GPUs",
    )  # fmt: skip
    meter.create_observable_gauge(
        "gfs_preemption_quota_stale", callbacks=[quota_stale],
        description="1 when the pool has no SpotQuota in force (none yet, or the last one expired)",
    )  # fmt: skip
