"""A missing extra is named, never a raw ImportError (issue 26 item 6): the `gfs` entry point and
the node agent's NVML backend. Modules are made missing with `sys.modules[name] = None`, which
makes `import name` raise ModuleNotFoundError as an absent package does."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from gfs.services.entry import main, missing_extra_message
from gfs.services.node_agent.gpu import NvmlBackend, NvmlMissingError, nvml_installed


@pytest.mark.parametrize(
    ("module", "extra"),
    [("typer", "sim"), ("numpy.linalg", "sim"), ("asyncpg", "services"),
     ("opentelemetry.exporter.otlp", "services"), ("torch", "ml"), ("pynvml", "nvml")],
)  # fmt: skip
def test_each_missing_module_names_the_extra_that_brings_it(module: str, extra: str) -> None:
    said = missing_extra_message(module)
    assert f"pip install 'gfs[{extra}]'" in said and repr(module.split(".")[0]) in said, said


def test_a_module_no_extra_brings_asks_for_a_reinstall() -> None:
    assert "reinstall gfs" in missing_extra_message("gfs.schemas.tasks")


def test_the_command_line_without_its_extra_exits_with_the_extra_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "gfs.services.cli", raising=False)
    monkeypatch.setitem(sys.modules, "typer", None)
    with pytest.raises(SystemExit) as exited:
        main()
    assert "pip install 'gfs[sim]'" in str(exited.value.code), exited.value.code


def test_nvml_without_its_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert not nvml_installed()
    with pytest.raises(NvmlMissingError, match=r"pip install 'gfs\[nvml\]'.*--fake-gpus"):
        NvmlBackend()


def test_a_node_agent_without_nvml_and_without_fake_gpus_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from gfs.services.serve_cli import app

    monkeypatch.setitem(sys.modules, "pynvml", None)
    result = CliRunner().invoke(app, ["node-agent", "--node", "n1"])
    assert result.exit_code == 2, result.output
    assert "gfs[nvml]" in result.output, result.output
