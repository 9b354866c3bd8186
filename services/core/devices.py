"""GPU device indices per node, for the node agent's CUDA_VISIBLE_DEVICES.

The pool counts GPUs; a node agent needs to know *which* GPUs. This allocator turns each placement
into device indices on its node, deterministically (lowest free index first), and frees them
exactly once when the task finishes, is evicted or is stopped.

Shared GPUs: the pool names a shared GPU by its pool-wide `slot` (opened at the node's lowest
unshared slot number), which says nothing about the whole-GPU workers already on that node. So the
slot is mapped to a physical device when it is first opened (the lowest index not in use on the
node) and keeps that device until its last fractional worker leaves. The pool's accounting
guarantees that whole GPUs plus shared GPUs never exceed the node's GPUs, so an index is always
free; running out is a broken invariant and raises.
"""

from __future__ import annotations

from typing import NamedTuple

from gfs.services.core.decisions import WorkerPlacement
from gfs.services.core.ids import TaskId


class DeviceBinding(NamedTuple):
    """One placement with its device indices: `devices` are whole GPUs on `node`; for a fractional
    worker `devices` is the one shared GPU and `fraction` its share of it."""

    node: int
    devices: tuple[int, ...]
    fraction: float = 0.0
    slot: int = -1


_FIRST = tuple(tuple(range(n)) for n in range(17))


class DeviceAllocator:
    """Per-node bitmasks of GPU indices in use, plus the tasks' bindings."""

    def __init__(self, node_gpus: tuple[int, ...] | list[int]) -> None:
        self._cap = [int(g) for g in node_gpus]
        self._used = [0] * len(self._cap)  # bit i set: device i of that node is in use
        self._slot_device: dict[int, int] = {}  # open shared slot -> its physical device
        self._slot_users: dict[int, int] = {}  # open shared slot -> fractional placements on it
        self._bindings: dict[TaskId, tuple[DeviceBinding, ...]] = {}

    def add_node(self, gpus: int) -> None:
        """A node appended to the pool (`PoolState.add_node`): all its indices free."""
        self._cap.append(int(gpus))
        self._used.append(0)

    def _take(self, node: int, count: int) -> tuple[int, ...]:
        """The `count` lowest free indices on `node` (hot path: one call per placement)."""
        mask = self._used[node]
        if mask == 0:  # the common case: an idle node hands out 0..count-1
            taken = _FIRST[count] if count < len(_FIRST) else tuple(range(count))
            mask = (1 << count) - 1
        else:
            out = []
            for _ in range(count):
                low = ~mask & (mask + 1)
                mask |= low
                out.append(low.bit_length() - 1)
            taken = tuple(out)
        if mask >> self._cap[node]:
            raise RuntimeError(f"node {node}: no free GPU index (the pool's accounting is broken)")
        self._used[node] = mask
        return taken

    def assign(self, task_id: TaskId, placements: tuple[WorkerPlacement, ...]) -> tuple[DeviceBinding, ...]:
        if task_id in self._bindings:
            raise ValueError(f"task {task_id} already holds devices")
        out = []
        for p in placements:
            if p.slot >= 0:
                device = self._slot_device.get(p.slot)
                if device is None:
                    device = self._slot_device[p.slot] = self._take(p.node, 1)[0]
                self._slot_users[p.slot] = self._slot_users.get(p.slot, 0) + 1
                out.append(DeviceBinding(p.node, (device,), p.fraction, p.slot))
            elif self._used[p.node] == 0 and p.gpus <= self._cap[p.node]:  # an idle node: 0..g-1
                self._used[p.node] = (1 << p.gpus) - 1
                out.append(
                    DeviceBinding(p.node, _FIRST[p.gpus] if p.gpus < len(_FIRST) else tuple(range(p.gpus)))
                )
            else:
                out.append(DeviceBinding(p.node, self._take(p.node, p.gpus)))
        bindings = tuple(out)
        self._bindings[task_id] = bindings
        return bindings

    def release(self, task_id: TaskId) -> tuple[DeviceBinding, ...]:
        """Free the task's devices; a second release of the same task raises (freed exactly once)."""
        bindings = self._bindings.pop(task_id)
        for b in bindings:
            if b.slot >= 0:
                left = self._slot_users[b.slot] - 1
                if left:
                    self._slot_users[b.slot] = left
                    continue
                del self._slot_users[b.slot]
                del self._slot_device[b.slot]
            mask = self._used[b.node]
            for d in b.devices:
                mask &= ~(1 << d)
            self._used[b.node] = mask
        return bindings

    def bindings(self, task_id: TaskId) -> tuple[DeviceBinding, ...] | None:
        return self._bindings.get(task_id)

    def in_use(self, node: int) -> frozenset[int]:
        mask, cap = self._used[node], self._cap[node]
        return frozenset(i for i in range(cap) if mask >> i & 1)

    def holders(self) -> dict[TaskId, tuple[DeviceBinding, ...]]:
        return dict(self._bindings)
