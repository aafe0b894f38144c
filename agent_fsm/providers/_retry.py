"""
Reading how long a server asked us to wait: ``retry-after-ms``, or ``Retry-After`` in seconds or as a date.
"""

from __future__ import annotations

import email.utils
import math
from datetime import UTC, datetime

import httpx

__all__ = ["retry_after"]


def _seconds(text: str, scale: float = 1.0) -> float | None:
    """A finite, non-negative number of seconds, or ``None`` (``nan``, ``inf``, words)."""
    try:
        value = float(text) / scale
    except (ValueError, OverflowError):
        return None
    return max(value, 0.0) if math.isfinite(value) else None


def retry_after(headers: httpx.Headers) -> float | None:
    """
    Seconds the server asked us to wait (``retry-after-ms``, or ``Retry-After`` seconds or date).

    Never raises: a value that is not a finite number or a date counts as not given.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        seconds = _seconds(millis, 1000)
        if seconds is not None:
            return seconds
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)
