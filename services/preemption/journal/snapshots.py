"""Snapshots of a partition's pools, so a claim replays at most one snapshot interval (issue 25).

Without them a new owner rebuilds every pool of a partition by replaying the partition's whole
journal (service.py, `Decider.take`), so failover time grows with history. The live owner now
writes, every `preemption_snapshot_rows` journal rows or `preemption_snapshot_s` seconds, the state
of its controllers as they are after a committed batch (memory equals what is durable then: a
failed commit drops the partition) together with the last journal row that state includes. A
claim restores the newest usable snapshot and replays only the rows after it.

Format: a pickle (protocol 5) of `Image`. Pickle rather than a serialiser per class: the state is
the controller's and the core runtime's own objects (dataclasses, dicts, heaps), which change as
the scheduler grows; a hand-written codec would have to follow every change, and one it missed
would restore a subtly wrong pool. The price is that a pickle is only safe to read with the code
that wrote it, so a snapshot is versioned by what it depends on (`version_of`):
- `FORMAT` (bumped when this module changes what an image holds), the pickle protocol;
- the controller settings (another policy or window decides differently from the same inputs);
- a digest of the source of every module one of the pickled objects' classes, or one of their
  base classes, comes from (the modules are collected while pickling, stored with the snapshot
  and hashed again at load), and of every module of the controller package: the controller is
  composed of collaborators, a class per module, and some of its behaviour lives in functions no
  pickled object is an instance of (services/preemption/controller/periods.py).
A snapshot whose version differs from the running code's is ignored: the claim replays the whole
journal, as before (correct, only slower, once after an upgrade until the next snapshot). The
bytes come from this deployment's own Postgres, which the journal already trusts.

No I/O at import; the Postgres access is the two functions at the end.
"""

from __future__ import annotations

import hashlib
import io
import logging
import pickle
import pkgutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.settings import ControllerSettings

# 2: the classes moved under the one import package `gfs` (issue 38 item 6), so a format-1 image
# names modules by the names they had before (no `gfs.` in front), which the running code lacks.
FORMAT = 2
PROTOCOL = 5
KEEP = 2  # snapshots kept per partition: the newest, and the one before while it is being read

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Image:
    """What a snapshot holds: the partition's controllers and, per task they still know, the
    trace carrier of its submission (the journal's `submit` rows carry it; a restored owner would
    otherwise start new traces for tasks submitted before the snapshot)."""

    controllers: dict[str, PoolController]
    traces: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Snapshot:
    seq: int  # the last journal row (of the partition) the image includes
    image: Image


@dataclass(frozen=True, slots=True)
class Policy:
    """When the live owner writes a snapshot: after `rows` journal rows or `seconds` seconds with
    at least one row since the last one (0 turns that trigger off; both 0: never)."""

    rows: int = 1_000
    seconds: float = 300.0

    def due(self, rows_since: int, seconds_since: float) -> bool:
        if rows_since <= 0:
            return False
        return (self.rows > 0 and rows_since >= self.rows) or (
            self.seconds > 0 and seconds_since >= self.seconds
        )


class _Collector(pickle.Pickler):
    """A pickler that notes the module of every class whose objects it writes (`reducer_override`
    is called for every object but the builtin scalars and containers)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=PROTOCOL)
        self.modules: set[str] = set()
        self.types: set[type] = set()  # the classes already noted (called once per object)

    def reducer_override(self, obj: Any) -> Any:
        owner = obj if isinstance(obj, type) else type(obj)
        if owner not in self.types:
            self.types.add(owner)
            # Its bases' modules too: a base's code is the object's code.
            self.modules.update(base.__module__ for base in owner.__mro__)
        return NotImplemented  # pickle it the ordinary way


def _controller_modules() -> set[str]:
    """Every module of the controller package (services/preemption/controller): the pool
    controller is one object composed of collaborators there, and a change in any of its modules,
    a collaborator's class or a helper function it calls, changes what the state means."""
    package = sys.modules[PoolController.__module__.rpartition(".")[0]]
    names = {package.__name__}
    names.update(f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__))
    return names


_DIGESTS: dict[str, str] = {}  # module -> digest of its source (the code does not change while it runs)


def _module_digest(name: str) -> str:
    found = _DIGESTS.get(name)
    if found is not None:
        return found
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if module is None:
        digest = "missing"  # a module the running code no longer has: the snapshot cannot load
    elif path is None or not path.endswith(".py"):
        # builtins and compiled modules: their version stands for their source
        digest = f"v{getattr(module, '__version__', sys.version)}"
    else:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    _DIGESTS[name] = digest
    return digest


def version_of(settings: ControllerSettings, modules: list[str]) -> str:
    """The version a snapshot of controllers with `settings`, pickling objects of `modules`, has
    under the running code."""
    code = hashlib.sha256()
    for name in sorted(modules):
        code.update(f"{name}={_module_digest(name)};".encode())
    return f"f{FORMAT}/p{PROTOCOL}/{settings!r}/{code.hexdigest()[:24]}"


def encode(image: Image, settings: ControllerSettings) -> tuple[bytes, str, list[str]]:
    """(the pickle, its version, the modules it depends on)."""
    buffer = io.BytesIO()
    pickler = _Collector(buffer)
    pickler.dump(image)
    modules = sorted(pickler.modules | _controller_modules())
    return buffer.getvalue(), version_of(settings, modules), modules


def decode(blob: bytes, version: str, modules: list[str], settings: ControllerSettings) -> Image | None:
    """The image, or None when it was written by other code or settings (then: a full replay)."""
    if not version.startswith(f"f{FORMAT}/"):  # before importing what it names: another format's modules
        log.warning(
            "preemption: snapshot version %s is not format %d: replaying the journal", version, FORMAT
        )
        return None
    for name in modules:  # a class of the snapshot whose module is not loaded yet: load it first
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                return None
    expected = version_of(settings, modules)
    if version != expected:
        log.warning("preemption: snapshot version %s is not this code's %s: replaying the journal",
                    version, expected)  # fmt: skip
        return None
    try:
        image = pickle.loads(blob)
    except Exception:  # a version match that still does not load: never worse than a replay
        log.exception("preemption: snapshot did not load: replaying the journal")
        return None
    return image if isinstance(image, Image) else None


# ----- Postgres ---------------------------------------------------------------------------------
async def save(
    connection: asyncpg.Connection,
    *,
    topic: str,
    partition: int,
    epoch: int,
    image: Image,
    settings: ControllerSettings,
) -> int | None:
    """Write `image` as the state after the partition's newest journal row, if `epoch` is still the
    partition's: its row is locked first, so no other owner writes journal rows between the check
    and the read of the newest row. The snapshot's seq; None when fenced (nothing written). Older
    snapshots but the newest `KEEP` are deleted in the same transaction."""
    started = time.perf_counter()
    blob, version, modules = encode(image, settings)
    async with connection.transaction():
        ours = await connection.fetchval(
            """SELECT 1 FROM preemption_partition
               WHERE inbox_topic = $1 AND partition = $2 AND epoch = $3 FOR UPDATE""",
            topic, partition, epoch,
        )  # fmt: skip
        if ours is None:
            return None
        seq = await connection.fetchval(
            "SELECT max(seq) FROM preemption_journal WHERE inbox_topic = $1 AND partition = $2",
            topic, partition,
        )  # fmt: skip
        if seq is None:
            return None  # nothing journaled: nothing a snapshot would save
        await connection.execute(
            """INSERT INTO preemption_snapshot (inbox_topic, partition, seq, epoch, version, modules, state)
               VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING""",
            topic, partition, seq, epoch, version, modules, blob,
        )  # fmt: skip
        await connection.execute(
            """DELETE FROM preemption_snapshot WHERE inbox_topic = $1 AND partition = $2 AND seq < (
                   SELECT min(seq) FROM (SELECT seq FROM preemption_snapshot
                       WHERE inbox_topic = $1 AND partition = $2 ORDER BY seq DESC LIMIT $3) AS newest)""",
            topic, partition, KEEP,
        )  # fmt: skip
    log.info("preemption: partition %d snapshot at journal row %d (%d bytes, %.3fs)",
             partition, seq, len(blob), time.perf_counter() - started)  # fmt: skip
    return int(seq)


async def load(
    connection: asyncpg.Connection, *, topic: str, partition: int, settings: ControllerSettings
) -> Snapshot | None:
    """The newest snapshot of the partition this code can read (None: replay the whole journal)."""
    row = await connection.fetchrow(
        """SELECT seq, version, modules, state FROM preemption_snapshot
           WHERE inbox_topic = $1 AND partition = $2 ORDER BY seq DESC LIMIT 1""",
        topic, partition,
    )  # fmt: skip
    if row is None:
        return None
    image = decode(bytes(row["state"]), str(row["version"]), list(row["modules"]), settings)
    return None if image is None else Snapshot(int(row["seq"]), image)
