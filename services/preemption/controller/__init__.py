"""The pool controller: one pool in the live scheduler, wire events in, the core's runtime decides,
wire effects out.

`PoolController` (pool.py) is the preemption service's I/O-free heart. The service shell feeds it
decoded payloads with the wall-clock time they are handled at; the controller drives the core's
`PoolDriver` (services/core/driver: the runtime, the pass trigger, the guarantee-period and
quota-expiry timers, the held starts and ending attempts with their deadlines, the same driver the
simulator's engine uses) and returns `Effects`: lifecycle events, unsigned node commands, and
decision records with their explanation. It reads no clock, makes no random choice and does no
I/O, so replaying the same inputs at the same times rebuilds the same state: the shell journals
every input and rebuilds a pool after a restart or a failover by replaying its journal, or from a
snapshot of the pickled controller (snapshots.py).

**Who owns what.** `PoolController` is a façade and the composition root of collaborators, each
owning its state and given what it needs when it is built (the same driver, task table, id source
and ledger are lent to those that need them):
- `pool.PoolController`: the task table (`tasks`: the tasks accepted here, queued or running), the
  SRE controls in force, the clock ticks applied; it routes each input to its collaborator, runs
  the timers (`tick`) and the scheduling pass (`schedule`);
- `ids.CommandIds`: the counter and salt command ids are derived from;
- `ledger.CommandLedger`: every command a node agent may answer (binds, evictions, the aliases of
  re-issued evictions) and the check that binds an ack to its command (`refusal`);
- `quota.PoolQuota`: the version of the SpotQuota in force and the last one received;
- `binds.Binder`: the BindCommands of held starts (a start becomes binds, held or sent);
- `endings.Endings`: the evicted attempts whose end is not known yet (how a stopped run ends);
- `acks.AckHandler`: applies acks, handing those of an ending attempt to the endings;
- `reconcile.Reconciler`: each node's last report and the unknown work seen there;
- `admission.Admission`: the task ids seen (duplicates), accepting, rejecting and cancelling;
- `periods`: the GuaranteePeriodClosed events of a run; `types`: the effects, decision records and
  per-task, bind, eviction and ending records; `settings`: the settings and the SRE controls;
- what a pass publishes: `demand_levels` (the servable demand series), `pool_views` (the status the
  API and dashboard read), `reclaim_warnings` (the spot reclaim warnings);
- pure rules that own no state of the pool and import nothing here: `attempts` (one run of a task
  as a state machine), `reconcile_rules` (a node's report against what the pool holds),
  `seen_tasks` (the task ids a pool answered), `survival_quote`, `tenant_budgets`,
  `work_conservation` (idle GPUs while work fits) and `explanations` (decisions as JSON).
Imports go one way (a layers contract in pyproject.toml): `pool` over `admission | acks |
reconcile` over `endings` over `binds` over `ledger | periods | quota | ids` and the published
views over `settings | types` over the pure rules. This module imports nothing: import the parts
themselves.

**ids.** Command ids are derived from the pool, an id salt and a counter (ids.py): the shell sets
the salt to the owner's fencing epoch (the one recorded with each journal row on replay), so a
replay re-derives the ids of journaled commands while commands decided again after a lost commit
get ids never used before.

**Rules** (docs/services.md, "Preemption service"):
- **Held binds.** An HP task placed by preemption gets its BindCommands held until every victim's
  EvictAck came back, or the grace period plus a margin passed (then the agent has killed them
  anyway).
- A task is TaskStarted when every worker reported WorkerStarted, and finished when every worker
  exited on its own (TaskFinished carries the first non-zero exit code).
- Attempts (docs/attempts.md, `gfs.services.preemption.controller.attempts`): every run of a task has a number
  carried by its bind, evict and ack messages. An eviction does not end a run: its acks and exits
  do. A run whose every worker exited on its own finished, even with an eviction in flight (no
  TaskEvicted, no failed guarantee period, the requeue withdrawn); otherwise TaskEvicted and the
  guarantee periods are reported once every node answered (or at grace + margin).
- A task's next run is bound only after its previous run ended on every node (its binds are held
  like a preemptor's), so an agent never holds two runs of one task (docs/decisions.md).
- **Acks** are bound to what they acknowledge (`refusal`): command id, task, attempt, worker and
  node must match the command, and the record must come from that node's key; the shell
  dead-letters anything else with the reason.
- Cancel: a queued task is withdrawn; a running one is stopped with reason CANCELLED, never
  requeued.
- A node whose heartbeat stopped is marked down by the shell (`node_down`): its tasks are stopped
  and requeued per the runtime's rule, and every node holding one of their workers gets an
  EvictCommand (reason NODE_LOST, no grace) so no task ever runs twice if the node comes back.
- **Quota.** When the quota in force expires (valid_until passed, no newer SpotQuota), the quota is
  frozen at the spot GPUs running then: no new spot admissions above what runs, and no eviction.
  Before the first SpotQuota a pool admits no spot task.
- SRE controls (`control`, a journaled entry, so a replay restores them): the kill switch turns
  preemption off in every pass; a quota freeze keeps the quota in force (SpotQuota messages are
  recorded, not applied), an override puts given values in force, and clearing either applies the
  last SpotQuota received; the eviction cap is the core's per-pass budget
  (`PoolRuntime.set_eviction_cap`).
"""
