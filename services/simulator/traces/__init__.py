"""Trace loaders and generators: one module per format, each producing `records.Trace`."""
