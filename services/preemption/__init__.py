"""The preemption service: drives the core's `PoolRuntime` from Kafka and the wall clock.

Folders by role (imports go one way, down this list; layers contracts in pyproject.toml):
- `service.py`: the composition root (builds the router, the decider and the SRE API, runs them);
  `metrics.py`: its metric families; `service_settings.py`: its settings.
- `sre/`: the SRE surface (API, controls, dashboard, trace view, `gfs explain`).
- `decider/`: owns the inbox partitions this instance holds and turns records and ticks into
  journaled, committed decisions, events and signed commands.
- `router/`: validates every input once and re-keys it by pool onto the inbox.
- `journal/`: the typed journal entries, the Postgres store, snapshots, the controls in force.
- `controller/`: one pool, I/O-free: wire events in, the core decides, wire effects out.
- `liveness.py`: when a silent node is lost, and when the silence is the service's own deafness.
"""
