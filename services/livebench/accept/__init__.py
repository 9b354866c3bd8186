"""`gfs livebench accept`: submit -> TaskAccepted latency on the live stack. `bench` runs it,
`agents` plays the node agents, `readback` reads the run back into stage timings and summaries."""
