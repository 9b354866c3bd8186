"""Where commands and services write by default: a per-user state folder, never the checkout.

Defaults used to be `.stack/...` and `runs/...` inside the source checkout (issue 26, item 8): a
read-only install (a wheel, a container image) could not run them, and a checkout filled up with
run output. Now every default write goes under

    $GFS_STATE_DIR                      when set,
    else $XDG_STATE_HOME/gfs            (the XDG base-directory rule for state),
    else ~/.local/state/gfs

and each command's --help names its folder. Explicit paths (--workdir, --state-dir,
AGENT_STATE_ROOT, FORECAST_DATADIR...) behave as before. The commands whose job is to regenerate
checked-in files (`gfs schemas topics-yaml|protocol|openapi`) still default to the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_HELP = "$GFS_STATE_DIR, else $XDG_STATE_HOME/gfs, else ~/.local/state/gfs"


def state_home() -> Path:
    """The per-user GFS state folder (read from the environment at each call, nothing created)."""
    explicit = os.environ.get("GFS_STATE_DIR", "").strip()
    if explicit:
        return Path(explicit).expanduser().absolute()
    xdg = os.environ.get("XDG_STATE_HOME", "").strip()
    if xdg and Path(xdg).is_absolute():  # the spec: a relative value is invalid and ignored
        return Path(xdg) / "gfs"
    return Path.home() / ".local" / "state" / "gfs"


def state_dir(*parts: str) -> Path:
    """A sub-folder of `state_home()` (not created: the writer creates what it writes)."""
    return state_home().joinpath(*parts)
