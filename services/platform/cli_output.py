"""`--output table|json` on the read-only commands an SRE scripts (issue 26, item 8).

One convention for every such command (`gfs deadletter list|show` set it): `table`, the default,
is for people (rich tables or plain lines); `json` prints ONE JSON document on stdout and nothing
else there (progress goes to stderr), so `gfs ... -o json | jq` always parses.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer


class Output(StrEnum):
    table = "table"
    json = "json"


OutputOption = Annotated[
    Output,
    typer.Option(
        "--output", "-o", case_sensitive=False, help="table (for people) or json (one document on stdout)"
    ),
]


def echo_json(data: Any) -> None:
    """`data` as one indented JSON document on stdout (dates and paths as strings)."""
    typer.echo(json.dumps(data, indent=2, default=str))
