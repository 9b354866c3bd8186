"""The preemption service's decider: it owns the inbox partitions this instance holds (their
claims, their pools' controllers, the offset read next, what it heard) and turns every inbox
record and every timer tick into journaled, committed decisions, events and signed commands
(the service's module doc, service.py, tells the whole flow).

Collaborators, each owning its own state and handed the rest at construction (decider.py is the
composition root; imports go one way, down this list: a layers contract in pyproject.toml):
- decider.py: `Decider`, the composition root and the one object the service holds: the lock,
  the counters, the ports the service wires.
- inbox.py: a batch decided and committed; a poisoned record dead-lettered alone (owns the
  suspects). timers.py: the periodic tick, the wake's path, pool statuses (owns `last_status`).
- reading.py: a batch's records read into entries (owns the report check). claims.py: taking a
  partition (claim, snapshot, replay) and giving it up. hearing.py: how far the input was heard,
  nodes declared lost, when reconciliation may act. due_wake.py: `DueWake`, the wake at the pools'
  due times (owns its own timer state).
- transaction.py: the one commit of a batch or a tick, and snapshots (owns the eviction counts).
  dead_letters.py: records not applied, refused reports (owns the letters' producer).
- outgoing.py: commands signed, messages wrapped and traced.
- partition.py: `PartitionState`, the explicit per-partition context every part is handed, and
  `OwnedPartitions`, the registry of the states held. traces.py: tasks' trace contexts and the
  quota spans. node_keys.py: nodes' keys from the master secret.
- counters.py: `Stats` and `Instruments`. names.py: producer, tracer and logger names.
"""

from gfs.services.preemption.decider.decider import Decider
from gfs.services.preemption.decider.due_wake import DueWake
from gfs.services.preemption.decider.node_keys import NodeKeys

__all__ = ["Decider", "DueWake", "NodeKeys"]
