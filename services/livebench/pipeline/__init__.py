"""The load and the read-back shared by `gfs bench pipeline` / `gfs livebench preemption` and the
scale bench: `load` offers task events and models the cluster, `readback` reads the commands back
and reports, `ramp` finds the highest rate the service sustains."""
