"""The numbered SQL migrations (`NNNN_name.sql`), shipped as package data so that a non-editable
install (a wheel, a container image) finds them through `importlib.resources`."""
