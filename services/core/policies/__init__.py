"""Scheduling policies: each one a bundle of pluggable pieces, built by name from the registry."""
