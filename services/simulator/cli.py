"""Placeholder; the simulator area replaces this module with the real `gfs simulate`."""


def simulate() -> None:
    """Not built yet."""
    raise SystemExit("gfs simulate is not built yet")
