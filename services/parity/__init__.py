"""Sim/live parity: a trace through the live pipeline on the controllable clock, against `gfs simulate`."""
