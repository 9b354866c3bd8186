"""`python -m gfs.services ...` is `gfs ...` (tests start services this way with the venv's python)."""

from gfs.services.entry import main

main()
