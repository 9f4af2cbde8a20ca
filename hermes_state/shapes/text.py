"""Text hygiene shared by every writer and lookup: lone surrogates cannot be bound by sqlite3.

Each lone surrogate becomes U+FFFD, as the agent's own store does: the rest of the text is kept
and the place where something unreadable was stays visible.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def scrub_surrogates(value: Any) -> Any:
    """Replace lone surrogates in a string with U+FFFD (other values pass through unchanged)."""
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE_RE.sub("\ufffd", value)
    return value


# Lookups bind text the way writers store it, so a value written with a lone surrogate is found.
bindable = scrub_surrogates
