"""The per-pool runtime: one pool at run time, the state both the simulator and the live
preemption service drive.

A `PoolRuntime` holds the pool's allocation state, its HP and spot queues, the tasks it knows, its
capacity version and clock, and the collaborators it is composed of, each owning its own state and
given what it needs per call (modules of this package; none imports the runtime):
- `guarantee_book`: the guarantee accounting of spot runs (periods logged, the ledger's successes
  and failures, the tenants' budgets);
- `stops`: how runs end (a stop and its accounting, lease-released runs);
- `run_records`: what explanations read (each task's last stop and preemptions, what a pass skipped);
- `reservations`: the head-of-queue reservation over time;
- `eviction_cap`: the SRE's eviction cap and the evictions it counts;
- `quota_keeper`: the quota in force, eta, and what they were computed from;
- `servable_view`: the servable demand's views and the idle GPUs queued work would fit on. It
also holds the guarantee ledger, the eviction log behind node scores, the tenants' eviction budgets
and GPU device indices. Drivers feed it events (submit, cancel, finish, period tick, node down/up,
quota update, lease renewal) and ask it to schedule; it returns what happened so the driver can
record it (simulator) or emit it (service). Time always comes in as an argument and never goes
back; the runtime reads no clock and does no I/O.

Rules the drivers rely on (docs/core-api.md):
- `schedule` runs one pass of the core's `schedule_pool` and applies its decisions in order:
  evictions requeue their victims at the back of the spot queue (a failed guarantee period each),
  starts bind device indices.
- The capacity `version` changes whenever GPUs are freed, the quota changes, or a node goes down
  or up: queue memos from an older version are retried.
- A node going down stops every task with a worker on it (a gang cannot run in part): HP tasks go
  back to the HP queue, spot tasks to the spot queue. Completed guarantee periods count as
  successes; the interrupted period counts as neither success nor failure, since the eviction
  feedback and the node cost measure preemptions, not hardware. The down node offers no GPUs to
  placement or preemption until it is up again.
- A cancelled task leaves its queue, or stops if running (completed periods count, the
  interrupted one is void, as for a node loss).
- Eviction cap (`set_eviction_cap(max_evictions, interval_s)`, off by default): each pass gets the
  budget max_evictions - (preemption evictions in the last interval_s) and the victim search
  respects it (`cycle.py`); a change of the budget is a new capacity version, so an HP task held by
  the cap is retried when the window slides.
- Tenant eviction budgets (`tenant_evictions.set_budget(tenant, budget)`, none by default): each pass gives
  the victim search what each budgeted tenant has left (core/tenant_budget.py); soft, so no HP
  task waits for them and no capacity version changes with them.
"""

from __future__ import annotations

from gfs.services.core.outcomes import Finished, Outcome, PassResult, RuntimeSettings, Started, Stopped
from gfs.services.core.runtime.pool_runtime import PoolRuntime

__all__ = ["Finished", "Outcome", "PassResult", "PoolRuntime", "RuntimeSettings", "Started", "Stopped"]
