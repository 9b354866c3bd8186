"""Benchmarks of the live services that print numbers (`gfs livebench ...`); never timed tests."""
