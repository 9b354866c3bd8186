"""The journal: what a partition's decider persisted, and how it is read back.

Owns: the typed journal entries, one frozen class per input kind with its row format (`entries`);
the one function that applies an entry to a pool's controller, live or in replay (`inputs`);
Postgres access for partitions, epochs, the journal, decisions and task routes (`store`); snapshots
of a partition's pools (`snapshots`); the SRE controls in force as the desired state every decider
syncs to (`desired_controls`); and tasks' trace ids for links to Jaeger (`trace_ids`). It sits
under the router and the decider and over the per-pool controller, whose inputs it records. This
module imports nothing: import the parts themselves.
"""
