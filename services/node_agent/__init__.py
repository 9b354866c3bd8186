"""The node agent (one per GPU node: carries out bind and evict commands, reads NVML). It arrives
with the live pipeline; the package exists now so the import contracts already hold it apart from
the other services."""
