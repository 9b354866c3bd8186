"""Each node's key, derived from the master secret once per node (signing.node_key): the decider
signs the commands it sends a node with it (outgoing.py), and checks the node's acks and telemetry
against it (report_auth.py, wired in service.py)."""

from __future__ import annotations

from gfs.services.platform.signing import node_key


class NodeKeys:
    """Owns the master secret and the keys derived from it so far (node -> key)."""

    __slots__ = ("_keys", "_secret")

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._keys: dict[str, bytes] = {}

    def key(self, node: str) -> bytes:
        """`node`'s key (signing.node_key of the master secret), derived once."""
        found = self._keys.get(node)
        if found is None:
            found = self._keys[node] = node_key(self._secret, node)
        return found
