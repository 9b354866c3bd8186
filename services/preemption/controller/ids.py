"""The ids of the commands and events a pool controller derives: uuid5 of the pool, an id salt and a
counter, so replaying the same inputs re-derives the same ids (the package doc, "ids").

`CommandIds` owns the counter and the salt; every collaborator that issues a command draws from the
one the controller wires in, so ids come in the order the commands were decided.
"""

from __future__ import annotations

import uuid

# Namespace of the command and event ids the controller derives (uuid5 of pool, salt and counter).
ID_NAMESPACE = uuid.UUID("6a1f4c52-2d0e-4f1b-9a57-0c9e3b8d7e11")


def command_id(pool: str, salt: str, counter: int) -> uuid.UUID:
    """uuid5 of "<pool>/<counter>" (no salt: journals from before salts) or "<pool>/<salt>/<counter>"."""
    name = f"{pool}/{counter}" if not salt else f"{pool}/{salt}/{counter}"
    return uuid.uuid5(ID_NAMESPACE, name)


def id_salt(epoch: int | None) -> str:
    """The id salt of journal rows written under `epoch` (None: rows from before 0006, no salt)."""
    return "" if epoch is None else f"e{epoch}"


class CommandIds:
    """The id source of one pool. Owns `counter` (ids drawn so far: part of the pool's state, a
    replay counts alike) and `salt` (set by the shell to the owner's fencing epoch, `id_salt`: ""
    derives the ids of journals written before salts)."""

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.salt = ""
        self.counter = 0

    def next(self) -> uuid.UUID:
        self.counter += 1
        return command_id(self.pool, self.salt, self.counter)
