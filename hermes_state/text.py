"""Text hygiene shared by every writer and lookup: lone surrogates cannot be bound by sqlite3."""

from __future__ import annotations

import re
from typing import Any

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _replace_surrogates(value: Any, replacement: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE_RE.sub(replacement, value)
    return value


def scrub_surrogates(value: Any) -> Any:
    """Remove lone surrogates from a string (other values pass through unchanged)."""
    return _replace_surrogates(value, "")


def bindable(value: Any) -> Any:
    """Make text safe to bind as a query parameter: lone surrogates become U+FFFD.

    Unlike scrub_surrogates (for stored text), the result never equals a different stored value
    by accident: stored text never contains lone surrogates, so a lookup with one matches nothing.
    """
    return _replace_surrogates(value, "\ufffd")
