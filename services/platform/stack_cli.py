"""Placeholder sub-app; the owning area replaces this module."""

import typer

app = typer.Typer(no_args_is_help=True)
