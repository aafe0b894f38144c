"""Shared test configuration: Hypothesis profiles sized so the whole suite stays fast."""

import os

from hypothesis import HealthCheck, settings

# "ci" is used when CI is set (as it is in .ci/run); "dev" for a quick local loop;
# "thorough" for a long hunt: HYPOTHESIS_PROFILE=thorough python -m pytest
settings.register_profile("ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=5000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
