"""GFS wire contracts (pydantic v2): the envelope, the payloads, and the topic registry.

Modules: `envelope` (Envelope[P], wrap), `tasks`, `telemetry`, `forecast`, `quota`, `commands`,
`dead_letter` (payloads), `topics` (TOPICS, decode/encode/key_of), `json_schema` (export).
No behaviour beyond validation, no I/O, and no imports from `services` or `ml`.
"""
