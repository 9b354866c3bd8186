"""The preemption service (drives the core's `PoolRuntime` from Kafka and the wall clock). It
arrives with the live pipeline; the package exists now so the import contracts already hold it
apart from the other services."""
