"""Where a task event's latency goes (issue 37): wall-clock stamps carried in Kafka headers from
the router to the command a decision sends, so a reader of the command can split submit -> command
into its stages and the tail has a name.

The stamps, each taken by the process that does the step (`time.time()`, one host's clock in the
bench; across hosts the stages inherit the hosts' clock offsets, as any cross-host latency does):

- `gfs-stage-routed`, on an inbox record, set by the router: read (its fetch returned) and sent
  (handed to the producer);
- `gfs-stage-decided`, on a command, set by the decider: the record's two router stamps, inbox
  read, batch start, decided; then `;` and the commit's token;
- `gfs-stage-relayed`, on a command, set by the outbox relay: committed (the batch's transaction
  returned) and relayed (handed to the producer).

The stages between a submission sent at `submitted` and its command read at `received` are the
differences of consecutive stamps (`STAGES`), so they add up to `received - submitted` exactly when
every stamp is there and in order; `breakdown` returns None otherwise. A command whose batch held no
stamped record of its task (a start after a finish freed room, a re-issued bind) carries none.

Only what a decision sends is stamped, and the commit time reaches the relay through `CommitTimes`,
which lives in the process that commits and relays. A row relayed before the decider saw its
commit return (the relay's read runs beside the decider's await, and the row is visible as soon as
Postgres commits), or relayed by another instance, carries no `committed` stamp: `breakdown` then
folds the commit into the relay's stage (`COMMIT_UNKNOWN`).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

ROUTED_HEADER = "gfs-stage-routed"
DECIDED_HEADER = "gfs-stage-decided"
RELAYED_HEADER = "gfs-stage-relayed"
STAMP_HEADERS = frozenset({ROUTED_HEADER, DECIDED_HEADER, RELAYED_HEADER})

# submit -> command, stage by stage: (name, what it holds)
STAGES: tuple[tuple[str, str], ...] = (
    ("to_router", "producer -> broker -> the router's fetch"),
    ("router", "the router: its batch's route lookups, until handed to the producer"),
    ("inbox", "producer -> broker -> the decider's fetch of the inbox"),
    ("batch_wait", "fetched, waiting for the decider (earlier partitions, the lock)"),
    ("decide", "reading the batch and the scheduling passes"),
    ("commit", "the batch's one Postgres transaction"),
    ("relay_wait", "committed, until the outbox relay hands the command to the producer"),
    ("to_reader", "producer -> broker -> the reader's fetch"),
)
STAGE_NAMES = tuple(name for name, _ in STAGES)
COMMIT_UNKNOWN = "commit+relay_wait"  # the row was relayed where its commit time is not known
_KEEP = 20_000  # commit tokens kept for the relay (a batch's rows are relayed within moments)
# At most one relayed command's stages per this long go to `on_stages`: a histogram record with
# attributes costs tens of microseconds per stage (the first profile at 200 events/s spent 3.4 s of
# the service's 70 CPU-s recording every command), and a sample tells the tail as well.
_SAMPLE_EVERY_S = 0.01


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def routed_header(read_at: float, sent_at: float) -> tuple[str, bytes]:
    return ROUTED_HEADER, f"{read_at:.6f},{sent_at:.6f}".encode()


def routed_stamps(headers: Iterable[tuple[str, bytes]]) -> tuple[float, float] | None:
    """The router's two stamps on an inbox record (None: not stamped, or unreadable)."""
    for name, value in headers:
        if name == ROUTED_HEADER:
            try:
                read_at, sent_at = _floats(value.decode())
            except (UnicodeDecodeError, ValueError):
                return None
            return read_at, sent_at
    return None


class BatchStamps(NamedTuple):
    """What the decider knows of one inbox batch: when its fetch returned, when the decider took
    it, when its passes were done; and the router's stamps of its records, by task."""

    fetched_at: float
    began_at: float
    decided_at: float
    routed: Mapping[str, tuple[float, float]]

    def header(self, task_id: str, token: str) -> tuple[str, bytes] | None:
        """The decided header of a message about `task_id` (None: no stamped record of it)."""
        routed = self.routed.get(task_id)
        if routed is None:
            return None
        stamps = (*routed, self.fetched_at, self.began_at, self.decided_at)
        return DECIDED_HEADER, (",".join(f"{v:.6f}" for v in stamps) + f";{token}").encode()


class CommitTimes:
    """Commit token -> when that commit returned, for the relay of the same process (bounded)."""

    __slots__ = ("_at", "_next", "_prefix", "_sampled_at", "on_stages")

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._next = itertools.count()
        self._at: OrderedDict[str, float] = OrderedDict()
        self._sampled_at = float("-inf")
        # Called with the stages a relayed command completed (all but `to_reader`), for at most one
        # command per `_SAMPLE_EVERY_S`: the service's /metrics histogram.
        self.on_stages: Callable[[Mapping[str, float]], None] | None = None

    def token(self) -> str:
        return f"{self._prefix}:{next(self._next)}"

    def committed(self, token: str, at: float) -> None:
        self._at[token] = at
        while len(self._at) > _KEEP:
            self._at.popitem(last=False)

    def restamp(
        self, headers: tuple[tuple[str, bytes], ...], relayed_at: float
    ) -> tuple[tuple[str, bytes], ...]:
        """The relay's headers for a row: a decided row gets the relayed header."""
        decided = next((v for k, v in headers if k == DECIDED_HEADER), None)
        if decided is None:
            return headers
        try:
            token = decided.decode().split(";", 1)[1]
        except (UnicodeDecodeError, IndexError):
            return headers
        committed = self._at.get(token)
        stamp = "" if committed is None else f"{committed:.6f}"
        headers = (*headers, (RELAYED_HEADER, f"{stamp},{relayed_at:.6f}".encode()))
        if self.on_stages is not None and relayed_at - self._sampled_at >= _SAMPLE_EVERY_S:
            self._sampled_at = relayed_at
            found = breakdown(None, headers, None)
            if found is not None:
                self.on_stages(found)
        return headers


def breakdown(
    submitted: float | None, headers: Iterable[tuple[str, bytes]], received: float | None
) -> dict[str, float] | None:
    """The stages (seconds, in `STAGES` order) of a command read at `received` whose submission was
    sent at `submitted` (wall clock); None when the command carries no complete set of stamps. With
    `submitted` or `received` None, the stage that needs it is left out (the service's own view).
    A row relayed where its commit time was not known has `COMMIT_UNKNOWN` for commit + relay."""
    found = {k: v for k, v in headers if k in (DECIDED_HEADER, RELAYED_HEADER)}
    if DECIDED_HEADER not in found or RELAYED_HEADER not in found:
        return None
    try:
        decided = _floats(found[DECIDED_HEADER].decode().split(";", 1)[0])
        committed_text, relayed_text = found[RELAYED_HEADER].decode().split(",")
        relayed = float(relayed_text)
        committed = float(committed_text) if committed_text else None
    except (UnicodeDecodeError, ValueError):
        return None
    if len(decided) != 5:
        return None
    router_read, router_sent, fetched, began, done = decided
    stages: dict[str, float] = {}
    if submitted is not None:
        stages["to_router"] = router_read - submitted
    stages["router"] = router_sent - router_read
    stages["inbox"] = fetched - router_sent
    stages["batch_wait"] = began - fetched
    stages["decide"] = done - began
    if committed is None:
        stages[COMMIT_UNKNOWN] = relayed - done
    else:
        stages["commit"] = committed - done
        stages["relay_wait"] = relayed - committed
    if received is not None:
        stages["to_reader"] = received - relayed
    return stages
