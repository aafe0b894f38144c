"""
The ``format`` values agent_fsm checks, and how.

JSON Schema 2020-12 makes ``format`` an annotation unless a validator opts in;
agent_fsm opts in for the formats below, because a tool that declares
``"format": "date"`` means it, and a model that sends ``"next Tuesday"``
should hear so before the handler runs. Formats not listed are annotations
only (not checked). Every check is a bounded scan of a string; none
backtracks, and none consults the network.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

__all__ = ["FORMAT_CHECKS", "checked_formats", "format_error"]

# Fixed-width pieces only (no nested quantifiers), so these run in linear time.
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIME = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))", re.ASCII)
_DOT_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*", re.ASCII)
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*", re.ASCII)
_URI_CHARS = re.compile(r"([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*", re.ASCII)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)
_OCTET = re.compile(r"0|[1-9][0-9]{0,2}", re.ASCII)


def _is_date(text: str) -> bool:
    # RFC 3339 full-date; date.fromisoformat alone would also take "20240101" and week dates.
    match = _DATE.fullmatch(text)
    if match is None:
        return False
    try:
        datetime.date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return False
    return True


def _is_time(text: str) -> bool:
    # RFC 3339 full-time: the offset is required; a leap second is only 23:59:60 in UTC.
    match = _TIME.fullmatch(text)
    if match is None:
        return False
    hour, minute, second = int(match[1]), int(match[2]), int(match[3])
    if hour > 23 or minute > 59 or second > 60:
        return False
    offset_hour, offset_minute = (int(match[6]), int(match[7])) if match[6] is not None else (0, 0)
    if offset_hour > 23 or offset_minute > 59:
        return False
    if second == 60:
        sign = -1 if match[5].startswith("-") else 1
        utc = (hour * 60 + minute - sign * (offset_hour * 60 + offset_minute)) % (24 * 60)
        return utc == 23 * 60 + 59
    return True


def _is_date_time(text: str) -> bool:
    if len(text) < 11 or text[10] not in "Tt":
        return False
    return _is_date(text[:10]) and _is_time(text[11:])


def _is_hostname(text: str) -> bool:
    labels = text.split(".")
    return len(text) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def _is_email(text: str) -> bool:
    # RFC 5321 mailbox, ASCII (idn-email is a different format): dot-atom local part,
    # then a host name or a bracketed IP address literal.
    local, at, domain = text.rpartition("@")
    if not at or not local or len(local) > 64 or _DOT_ATOM.fullmatch(local) is None:
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        try:
            if literal.lower().startswith("ipv6:"):
                ipaddress.IPv6Address(literal[5:])
            else:
                ipaddress.IPv4Address(literal)
        except ValueError:
            return False
        return True
    return _is_hostname(domain)


def _is_uri(text: str) -> bool:
    # RFC 3986 URI: a scheme, then only the characters the grammar allows (non-ASCII must be
    # percent-encoded), with brackets only around an IP literal host.
    scheme, colon, _rest = text.partition(":")
    if not colon or _SCHEME.fullmatch(scheme) is None or _URI_CHARS.fullmatch(text) is None:
        return False
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (raises ValueError on a port that is not a number in range)
    except ValueError:
        return False
    host = parts.netloc.rpartition("@")[2]
    brackets = text.count("[") + text.count("]")
    if brackets == 0:
        return True
    if brackets != 2 or not host.startswith("[") or "]" not in host:
        return False
    try:
        ipaddress.IPv6Address(host[1 : host.index("]")])
    except ValueError:
        return False
    return True


def _is_uuid(text: str) -> bool:
    if _UUID.fullmatch(text) is None:
        return False
    uuid.UUID(text)
    return True


def _is_ipv4(text: str) -> bool:
    # Dotted quad, decimal, no leading zeros (an octal reading is how "010" surprises people).
    octets = text.split(".")
    return len(octets) == 4 and all(_OCTET.fullmatch(o) is not None and int(o) <= 255 for o in octets)


FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {
    "date": _is_date,
    "date-time": _is_date_time,
    "time": _is_time,
    "email": _is_email,
    "uri": _is_uri,
    "uuid": _is_uuid,
    "ipv4": _is_ipv4,
}
"""Each checked format's predicate over a string (non-strings are not this keyword's business)."""


def checked_formats() -> frozenset[str]:
    """
    The ``format`` values a tool schema's arguments are checked against.

    Any other ``format`` is an annotation: shown to the model, not enforced.
    Generators of valid arguments (such as ``agent_fsm.testing``) ask this.
    """
    return frozenset(FORMAT_CHECKS)


def format_error(format_name: str, value: object) -> str | None:
    """Why ``value`` is not a ``format_name``, or ``None`` if it is (or the format is not checked)."""
    check = FORMAT_CHECKS.get(format_name)
    if check is None or not isinstance(value, str) or check(value):
        return None
    return f"{value!r} is not a {format_name!r}"
