"""What the tools around the services (parity, demo, faults, livebench) share to run the live
services from outside: starting each service as its own `python -m gfs.services ...` process group and
stopping it (processes.py), probing their HTTP endpoints (probes.py), starting a run's fresh consumer
groups at the topics' end (consumer_groups.py) and publishing a flat HP-demand forecast so the quota
admits spot work (forecasts.py).

The tools may not import one another (pyproject's import contracts); they import this instead. It
imports the wire (schemas) and the platform only, never a tool, a service's internals or the core,
and nothing the services run imports it.
"""
