"""Shared I/O adapters every GFS service is built from (the "shell toolbox").

- `settings`   PlatformSettings: env-driven connection/observability settings; services subclass it.
- `tracing`    OpenTelemetry provider setup and W3C trace context in Kafka headers.
- `kafka`      EnvelopeProducer, the `consume` loop (dead letters, commit-after-effects), topic admin.
- `postgres`   asyncpg pool lifecycle and the transaction helper.
- `migrations` numbered SQL migrations (package data in services/platform/sql), checksummed,
  applied once.
- `stack_cli`, `db_cli`, `schema_cli`: the `gfs stack|db|schemas` sub-commands.

Importing this package does nothing; each module is imported where it is used.
"""
