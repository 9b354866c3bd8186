"""The node agent (`gfs serve node-agent`): one per GPU node. It carries out this node's signed
bind and evict commands on processes it starts itself, journals them locally, acknowledges each
worker and eviction, and publishes NVML (or fake) telemetry as the node's heartbeat. See
`docs/services.md` ("Node agent"); `fake_task` is the GPU-free worker for demos and tests."""
