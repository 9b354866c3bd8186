"""The `gfs` program's entry point: the command line if its extra is installed, else a clear error.

The base install is the producers' client (`pip install gfs`: schemas, `GfsClient`); the command
line and everything it runs come with the extras (pyproject.toml). Importing `gfs.services.cli` without
them fails on typer, numpy or another extra's module: say which extra brings it instead of showing
a traceback. Stdlib only here, so this module itself always imports.
"""

from __future__ import annotations

import sys

# The extra that brings each third-party module the command line may miss (the first one imported
# wins: the message names the smallest extra that would have brought it).
_EXTRA_OF = {
    "typer": "sim", "rich": "sim", "numpy": "sim", "matplotlib": "sim", "yaml": "sim",
    "faust": "services", "asyncpg": "services", "aiohttp": "services", "rocksdict": "services",
    "prometheus_client": "services", "pythonjsonlogger": "services",
    "torch": "ml", "pynvml": "nvml",
}  # fmt: skip


def missing_extra_message(module: str) -> str:
    """What to tell a user whose install lacks `module`."""
    top = module.split(".", 1)[0]
    extra = _EXTRA_OF.get(top)
    if extra is None and top.startswith("opentelemetry"):
        extra = "services"
    if extra is None:
        return f"gfs: the module {module!r} is missing from this installation (reinstall gfs)"
    return (
        f"gfs: this command needs the {extra!r} extra (missing module {top!r}): "
        f"pip install 'gfs[{extra}]' (or 'gfs[all]')"
    )


def main() -> None:
    try:
        from gfs.services.cli import main as cli_main
    except ModuleNotFoundError as exc:
        sys.exit(missing_extra_message(exc.name or str(exc)))
    try:
        cli_main()
    except ModuleNotFoundError as exc:  # a sub-command imports its heavy modules when it runs
        if exc.name and exc.name.split(".", 1)[0] in _EXTRA_OF:
            sys.exit(missing_extra_message(exc.name))
        raise
