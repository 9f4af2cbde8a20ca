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
