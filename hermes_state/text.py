"""Text hygiene shared by every writer: lone surrogates cannot be bound by sqlite3."""

from __future__ import annotations

import re
from typing import Any

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def scrub_surrogates(value: Any) -> Any:
    """Remove lone surrogates from a string (other values pass through unchanged)."""
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE_RE.sub("", value)
    return value


def bindable(value: Any) -> Any:
    """Make text safe to bind as a query parameter: lone surrogates become U+FFFD.

    Unlike scrub_surrogates (for stored text), the result never equals a different stored value
    by accident: stored text never contains lone surrogates, so a lookup with one matches nothing.
    """
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE_RE.sub("\ufffd", value)
    return value
