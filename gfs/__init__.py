"""GFS: a preemption-aware GPU scheduler with predictive spot quotas, as one import package.

- `gfs.schemas`: the wire (events, commands, topics), what producers and node agents need;
- `gfs.services`: the policy core, the simulator and the live services;
- `gfs.ml`: the demand forecaster.

In the source tree the three stay top-level folders (docs/architecture.md's layout), and `gfs/`
holds links to them; a built wheel holds them as real folders under `gfs/`, so an install adds
exactly one top-level import package (issue 38 item 6).
"""
