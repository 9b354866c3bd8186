"""The preemption instances `gfs bench pipeline` measures: `--instances` processes of
`gfs serve preemption` sharing one inbox and both consumer groups (issue 37 item 3), each with an
API port and a log of its own.

The router group starts at the topics' ends (committed before the instances start), and nothing of
the run is sent before both groups are stable with every instance in them
(services/livebench/instances.py says why). The run's pool names
land on distinct inbox partitions (the bench picks its run id so), so no two pools are tied to one
instance by a hash collision and the split over instances is the group assignor's alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gfs.services.livebench.instances import until_pools, until_split, until_stable
from gfs.services.livebench.proc_stats import cpu_s
from gfs.services.platform.kafka.topic_admin import ensure_topics
from gfs.services.platform.paths import state_dir
from gfs.services.preemption.router.routing import inbox_spec
from gfs.services.producers.partitioning import partition_for_key
from gfs.services.toolkit.processes import ServiceProcess, stop_all


def distinct_partitions(names: list[str], partitions: int) -> bool:
    """Whether the pools `names` land on distinct inbox partitions."""
    return len({partition_for_key(n.encode(), partitions) for n in names}) == len(names)


@dataclass(slots=True)
class UnderTest:
    """N service processes; `start`, `ready`, then `cpu_s()` around the measured phase, `stop`."""

    run: str
    env: dict[str, str]
    ports: list[int]
    partitions: int
    profile: Path | None = None
    procs: list[ServiceProcess] = field(default_factory=list)
    owned: list[list[int]] = field(default_factory=list)  # inbox partitions per instance

    @property
    def groups(self) -> list[str]:
        return [self.env["PREEMPTION_GROUP"], self.env["PREEMPTION_ROUTER_GROUP"]]

    async def start(self, servers: str | list[str]) -> None:
        inbox = replace(inbox_spec(self.partitions), name=self.env["PREEMPTION_INBOX_TOPIC"])
        await ensure_topics(servers, [inbox])  # before the instances, so none races another to it
        for i, port in enumerate(self.ports):
            log_path = state_dir(f"bench-preemption-{self.run}-{i}.log")  # not the checkout
            log_path.parent.mkdir(parents=True, exist_ok=True)
            own = {"PREEMPTION_API_PORT": str(port), "PREEMPTION_INSTANCE": f"bench-{self.run}-{i}"}
            proc = ServiceProcess(
                f"preemption-{i}",
                ["serve", "preemption"],
                self.env | own,
                log_path,
                python_args=self._profiler(i),
            )
            proc.start()
            self.procs.append(proc)
            print(f"instance {i}: pid {proc.pid}, port {port}, log {log_path}")

    def _profiler(self, i: int) -> list[str]:
        if self.profile is None:
            return []
        one = len(self.ports) == 1
        out = self.profile if one else self.profile.with_suffix(f".{i}{self.profile.suffix}")
        return ["-m", "cProfile", "-o", str(out)]

    async def ready(self, servers: str | list[str]) -> None:
        self.owned = await until_split(self.ports, self.partitions)
        await until_stable(servers, self.groups, len(self.ports))
        print("inbox partitions per instance: " + " / ".join(str(o) for o in self.owned))

    def cpu_s(self) -> list[float]:
        return [cpu_s(p.pid) for p in self.procs]

    def stop(self) -> None:
        # SIGTERM, so a profiled instance writes its profile on the way out.
        stop_all(self.procs, timeout_s=20.0)

    async def until_registered(self, nodes: int, timeout: float = 600.0) -> dict[str, int]:
        """Every node and every pool's quota in, over all instances; returns the pools each owns
        (pool -> instance)."""

        def ready(owned: list[dict[str, Any]]) -> bool:
            seen = sum(p["nodes"] for o in owned for p in o.values())
            return seen >= nodes and all(p["quota_version"] for o in owned for p in o.values())

        owned = await until_pools(self.ports, ready, "register every node", timeout)
        return {pool: i for i, o in enumerate(owned) for pool in o}
