"""`python -m services ...` is `gfs ...` (tests start services this way with the venv's python)."""

from services.entry import main

main()
