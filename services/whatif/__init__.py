"""`gfs whatif`: the live log rebuilt as a trace and replayed in the simulator under other policies."""
