"""The producers' tools: `GfsClient` (submit, cancel, follow a task) and `gfs replay` (a GFS-format
trace's submissions published in scaled time).

A producer only speaks the wire contracts (`schemas`) through the platform's Kafka producer; it
never imports the simulator's engine, and the simulator never imports it (the simulator may not
touch Kafka). `replay` reads traces with the simulator's format reader only.
"""
