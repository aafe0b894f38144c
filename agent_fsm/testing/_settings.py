"""
The settings the kit's one-call checks run under when given none.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase
from hypothesis import settings as Settings

__all__ = ["default_settings"]


def default_settings(**changes: Any) -> Settings:
    """
    The settings the one-call checks use when given none: the active profile
    without the explain phase and the two health checks a whole-run example
    trips on a loaded machine; ``changes`` override any of them.
    """
    quiet = {*Settings().suppress_health_check, HealthCheck.too_slow, HealthCheck.data_too_large}
    chosen: dict[str, Any] = {
        "phases": [p for p in Phase if p is not Phase.explain],
        "suppress_health_check": list(quiet),
        **changes,
    }
    return Settings(**chosen)
