"""The fault harness (`gfs faults run`): the live pipeline under kills and outages, then checked."""
