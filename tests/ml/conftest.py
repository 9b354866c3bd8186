"""ml tests share the machine: one torch thread keeps them predictable and polite."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> None:
    import torch

    torch.set_num_threads(1)
