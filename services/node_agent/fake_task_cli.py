"""The typer face of `gfs fake-task` (kept apart from `fake_task`, which imports only the standard
library so `python -m gfs.services.node_agent.fake_task` starts as fast as a bare interpreter)."""

from __future__ import annotations

from typing import Annotated

import typer

from gfs.services.node_agent.fake_task import options_from, run_fake_task


def fake_task(
    duration: Annotated[float | None, typer.Option("--duration", help="exit after S seconds")] = None,
    exit_code: Annotated[int, typer.Option("--exit-code", help="exit status when the duration ends")] = 0,
    ignore_sigterm: Annotated[
        bool, typer.Option("--ignore-sigterm", help="note SIGTERM and keep working (forces a SIGKILL)")
    ] = False,
    checkpoint_s: Annotated[
        float | None,
        typer.Option("--checkpoint-s", help="checkpoint every S s (env GFS_CHECKPOINT_INTERVAL_S)"),
    ] = None,
    checkpoint_dir: Annotated[
        str | None,
        typer.Option("--checkpoint-dir", help="where checkpoint.json goes (env GFS_CHECKPOINT_DIR)"),
    ] = None,
    progress_file: Annotated[str | None, typer.Option("--progress-file", help="append progress here")] = None,
    env_file: Annotated[
        str | None, typer.Option("--env-file", help="write the environment (JSON) here")
    ] = None,
    sim_clock: Annotated[
        str | None,
        typer.Option(
            "--sim-clock", help="simulated clock: the time is the float in FILE (env GFS_SIM_CLOCK_FILE)"
        ),
    ] = None,
) -> None:
    """A GPU-free worker: works, checkpoints on SIGTERM (prints `checkpointed`) and exits 0."""
    options = options_from(
        duration_s=duration,
        exit_code=exit_code,
        ignore_sigterm=ignore_sigterm,
        checkpoint_s=checkpoint_s,
        checkpoint_dir=checkpoint_dir,
        progress_file=progress_file,
        env_file=env_file,
        sim_clock=sim_clock,
    )
    raise typer.Exit(run_fake_task(options))
