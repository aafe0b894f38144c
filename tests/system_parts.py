"""What a test does when a system part it needs (a program, a server, a browser) is missing."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    """Skip with how to get the part, or fail under CI, whose .ci/run installs every part."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
