"""The GPU backend behind the agent's telemetry: NVML on GPU nodes, a fake one elsewhere.

The agent only needs a model name, the device count and a per-device reading; allocations (which
task holds which share) come from the agent's own bookkeeping, not from the backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    utilisation_pct: float
    memory_used_mib: float
    memory_total_mib: float
    # (pid, used MiB) of the processes holding memory on the device.
    processes: tuple[tuple[int, float], ...] = ()


class GpuBackend(Protocol):
    @property
    def model(self) -> str: ...

    @property
    def count(self) -> int: ...

    def read(self) -> list[GpuReading]: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class FakeGpuBackend:
    """`count` idle devices of `model`: for machines without GPUs (demos, tests, benchmarks)."""

    model: str
    count: int
    memory_mib: float = 81_920.0
    # Tests may set a device's (utilisation %, memory used MiB).
    loads: dict[int, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a node has at least one GPU (got {self.count})")

    def read(self) -> list[GpuReading]:
        out = []
        for index in range(self.count):
            utilisation, used = self.loads.get(index, (0.0, 0.0))
            out.append(GpuReading(index, utilisation, min(used, self.memory_mib), self.memory_mib))
        return out

    def close(self) -> None:
        return None


_MIB = 1024 * 1024


NVML_MISSING = (
    "the node agent reads real GPUs through NVML, which needs the 'nvml' extra (nvidia-ml-py): "
    "pip install 'gfs[nvml]'; on a machine without GPUs run it with --fake-gpus"
)


def nvml_installed() -> bool:
    """Whether the NVML bindings can be imported (checked before an agent starts)."""
    try:
        import pynvml  # noqa: F401 (the import is the check)
    except ModuleNotFoundError:
        return False
    return True


class NvmlMissingError(RuntimeError):
    """The NVML bindings are not installed (the `nvml` extra)."""


class NvmlBackend:
    """The node's real GPUs through NVML (the `nvml` extra: nvidia-ml-py).

    `pynvml` is imported here, not at module import, so the agent runs with the fake backend on
    machines where the library (or the driver) is absent.
    """

    def __init__(self) -> None:
        try:
            import pynvml
        except ModuleNotFoundError as exc:
            raise NvmlMissingError(NVML_MISSING) from exc

        self._nvml: Any = pynvml
        pynvml.nvmlInit()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        if not self._handles:
            pynvml.nvmlShutdown()
            raise RuntimeError("NVML reports no GPU on this node (use --fake-gpus without GPUs)")
        name = pynvml.nvmlDeviceGetName(self._handles[0])
        self._model = name.decode() if isinstance(name, bytes) else str(name)

    @property
    def model(self) -> str:
        return self._model

    @property
    def count(self) -> int:
        return len(self._handles)

    def read(self) -> list[GpuReading]:
        nvml = self._nvml
        out = []
        for index, handle in enumerate(self._handles):
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            utilisation = nvml.nvmlDeviceGetUtilizationRates(handle)
            try:
                running = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except nvml.NVMLError:
                running = []
            processes = tuple(
                (int(p.pid), float(p.usedGpuMemory or 0) / _MIB) for p in running if p.pid is not None
            )
            out.append(
                GpuReading(
                    index=index,
                    utilisation_pct=float(utilisation.gpu),
                    memory_used_mib=float(memory.used) / _MIB,
                    memory_total_mib=float(memory.total) / _MIB,
                    processes=processes,
                )
            )
        return out

    def close(self) -> None:
        self._nvml.nvmlShutdown()
