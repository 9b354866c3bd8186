"""Test-wide configuration: hypothesis profiles.

`ci` (the default here) keeps property tests fast on the 2-core CI machine; `dev` explores more.
Select with HYPOTHESIS_PROFILE=dev.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=400, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
