"""Who may read and write what on a secured broker: the one ACL table (docs/operations.md, "Kafka
security").

One SCRAM principal per service (`preemption`, `quota`, `forecast`, `producer`) and one per node
agent (`agent-<node>`); `admin` is the broker's super user (inter-broker traffic, topic creation by
`gfs stack topics`) and needs no row. A principal gets exactly the topics of its row: the topic
names come from `gfs.schemas.topics`, the flows from docs/live-pipeline.md ("Services"). Nothing else is
allowed (StandardAuthorizer, `allow.everyone.if.no.acl.found=false`), so:

- only `preemption` writes the command topics (bind, evict) and the lifecycle and pool status;
- only agents write telemetry and the acks (evict, worker, clock), and an agent may join only its
  own consumer group (`gfs-agent-<node>`); an ack for another node still passes the broker, which
  cannot see inside a record: the preemption service refuses it by its per-node HMAC
  (services/node_agent/security.py), the second half of "an agent acks only for its own node";
- only producers write submissions;
- every consumer writes the dead-letter topic (a bad record is parked, never dropped).

`python -m gfs.services.platform.kafka.acls NODE...` prints one `kafka-acls` argument line per rule,
for infra/kafka/secure.sh (no import-time side effects: printing happens only under `__main__`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

from gfs.schemas.topics import (
    BIND_TOPIC,
    CLOCK_ACK_TOPIC,
    CLOCK_TOPIC,
    DEAD_LETTER_TOPIC,
    EVICT_ACK_TOPIC,
    EVICT_TOPIC,
    FORECASTS_TOPIC,
    POOL_DEMAND_TOPIC,
    POOL_STATUS_TOPIC,
    QUOTAS_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    TASK_SUBMIT_TOPIC,
    TELEMETRY_TOPIC,
    WORKER_ACK_TOPIC,
)

Operation = Literal["Read", "Write", "Create", "AlterConfigs", "All"]
Resource = Literal["topic", "group"]
Pattern = Literal["literal", "prefixed"]

SUPER_USER = "admin"
SERVICES = ("preemption", "quota", "forecast", "producer")
AGENT = "agent"  # expanded to one principal per node: agent-<node>

# Names owned by one service but not in the registry: the preemption inbox (one per deployment,
# `PREEMPTION_INBOX_TOPIC`, all starting with this) and Faust's changelog/repartition topics,
# which Faust names after its app id (`FORECAST_APP_ID`).
PREEMPTION_PREFIX = "gfs-preemption"
FORECAST_PREFIX = "gfs-forecast"


@dataclass(frozen=True, slots=True)
class Rule:
    """Allow each of `principals` the `operations` on every resource in `names` (one kafka-acls
    call: it adds the whole product, so rows shared by all agents cost one JVM start, not one each)."""

    principals: tuple[str, ...]
    operations: tuple[Operation, ...]
    resource: Resource
    names: tuple[str, ...]
    pattern: Pattern = "literal"

    def acl_args(self) -> list[str]:
        """The `kafka-acls --add` arguments of this rule (bootstrap and auth are the caller's)."""
        args = ["--resource-pattern-type", self.pattern]
        for principal in self.principals:
            args += ["--allow-principal", f"User:{principal}"]
        for operation in self.operations:
            args += ["--operation", operation]
        for name in self.names:
            args += [f"--{self.resource}", name]
        return args


def service_rules() -> tuple[Rule, ...]:
    """The services' rows (agents: `agent_rules`)."""
    return (
        Rule(("preemption",), ("Read",), "topic",
             (TASK_SUBMIT_TOPIC, QUOTAS_TOPIC, TELEMETRY_TOPIC, EVICT_ACK_TOPIC, WORKER_ACK_TOPIC,
              CLOCK_TOPIC)),
        Rule(("preemption",), ("Write",), "topic",
             (TASK_LIFECYCLE_TOPIC, BIND_TOPIC, EVICT_TOPIC, POOL_STATUS_TOPIC, POOL_DEMAND_TOPIC,
              DEAD_LETTER_TOPIC)),
        # The inbox: created by the service at start (its configs re-applied when it exists), written
        # by its router, read by its deciders.
        Rule(("preemption",), ("Read", "Write", "Create", "AlterConfigs"), "topic",
             (PREEMPTION_PREFIX,), "prefixed"),
        Rule(("preemption",), ("Read",), "group", (PREEMPTION_PREFIX,), "prefixed"),
        Rule(("quota",), ("Read",), "topic", (FORECASTS_TOPIC, POOL_STATUS_TOPIC, TASK_LIFECYCLE_TOPIC)),
        Rule(("quota",), ("Write",), "topic", (QUOTAS_TOPIC, DEAD_LETTER_TOPIC)),
        Rule(("quota",), ("Read",), "group", ("gfs-quota",), "prefixed"),
        Rule(("forecast",), ("Read",), "topic",
             (TASK_SUBMIT_TOPIC, TASK_LIFECYCLE_TOPIC, POOL_DEMAND_TOPIC, CLOCK_TOPIC)),
        Rule(("forecast",), ("Write",), "topic", (FORECASTS_TOPIC, DEAD_LETTER_TOPIC)),
        Rule(("forecast",), ("All",), "topic", (FORECAST_PREFIX,), "prefixed"),
        Rule(("forecast",), ("Read",), "group", (FORECAST_PREFIX,), "prefixed"),
        # A producer submits and watches its tasks' outcomes (assigned partitions, no group).
        Rule(("producer",), ("Write",), "topic", (TASK_SUBMIT_TOPIC,)),
        Rule(("producer",), ("Read",), "topic", (TASK_LIFECYCLE_TOPIC,)),
    )  # fmt: skip


def agent_principal(node: str) -> str:
    return f"{AGENT}-{node}"


def agent_rules(nodes: tuple[str, ...]) -> tuple[Rule, ...]:
    """The node agents' rows: their commands in, their telemetry and acks out, and each agent its
    own consumer group only (`gfs-agent-<node>`, services/node_agent/command_reader.py)."""
    if not nodes:
        return ()
    agents = tuple(agent_principal(node) for node in nodes)
    return (
        Rule(agents, ("Read",), "topic", (BIND_TOPIC, EVICT_TOPIC, CLOCK_TOPIC)),
        Rule(agents, ("Write",), "topic",
             (TELEMETRY_TOPIC, EVICT_ACK_TOPIC, WORKER_ACK_TOPIC, CLOCK_ACK_TOPIC, DEAD_LETTER_TOPIC)),
        *(Rule((agent_principal(node),), ("Read",), "group", (f"gfs-agent-{node}",)) for node in nodes),
    )  # fmt: skip


def rules(nodes: tuple[str, ...]) -> tuple[Rule, ...]:
    """The whole table for a cluster whose agents run on `nodes`."""
    return service_rules() + agent_rules(nodes)


def principals(nodes: tuple[str, ...]) -> tuple[str, ...]:
    """Every SCRAM user the secured broker needs: the super user, the services, one per agent."""
    return (SUPER_USER, *SERVICES, *(agent_principal(node) for node in nodes))


def main(argv: list[str]) -> int:
    """`principals NODE...` prints the users one a line; `rules NODE...` one kafka-acls argument
    line per rule (tab-separated, so names never need quoting)."""
    if not argv or argv[0] not in ("principals", "rules"):
        print("usage: python -m gfs.services.platform.kafka.acls principals|rules NODE...", file=sys.stderr)
        return 2
    nodes = tuple(argv[1:])
    if argv[0] == "principals":
        print("\n".join(principals(nodes)))
    else:
        print("\n".join("\t".join(rule.acl_args()) for rule in rules(nodes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
