"""The router: every instance reads the inputs (task submissions and cancels, node telemetry, agent
acks and reports, quotas) in one consumer group, validates them once, and re-keys each by pool onto
the inbox topic whose partitions the deciders own.

Owns: the task routes (a cancel finds its task's pool; `expiry`: when a route is deleted), how far
it has heard each input (`heard`), the in-memory handoff of validated records to this instance's
decider (`handoff`), which storage failures a record itself causes (`poison`) and which agent
messages may be applied (`report_auth`). `routing` is the consume loop that uses them; the decider
imports the parts, never the loop. This module imports nothing: import the parts themselves.
"""
