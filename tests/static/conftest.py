"""Static-test fixtures: the rendered Kubernetes manifests (k8s_render.py), rendered once for the
session and shared by test_k8s_manifests.py and test_k8s_code_agreement.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def kustomize() -> Path:
    """The pinned kustomize, built once (cached under .stack/bin, like Jaeger)."""
    from k8s_render import build_kustomize

    return build_kustomize()


@pytest.fixture(scope="session")
def docs(kustomize: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every object of the production overlay, rendered with generated secrets and set images."""
    from k8s_render import render

    return render(kustomize, tmp_path_factory.mktemp("k8s"))
