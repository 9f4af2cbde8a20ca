"""Parsing ages and dates given on the command line (`90`, `90d`, `12h`, `30m`, `2w`, ISO dates)."""

from __future__ import annotations

import re
import time
from datetime import datetime

ACCEPTED_FORMS = "90 (days), 90d, 12h, 30m, 2w, or an ISO date like 2026-01-31 or 2026-01-31T14:30"

_UNIT_SECONDS = {"m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([mhdw]?)", re.ASCII)


class DurationError(ValueError):
    """Text that is neither a duration nor an ISO date."""


def parse_age_seconds(text: str) -> float:
    """Return the number of seconds a duration names (a bare number means days)."""
    match = _DURATION_RE.fullmatch(text.strip().lower())
    if match is None:
        raise DurationError(text)
    value, unit = match.groups()
    return float(value) * _UNIT_SECONDS[unit or "d"]


def parse_iso(text: str) -> float:
    """Return the epoch seconds of an ISO date or date-time (naive means local time)."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise DurationError(text) from None
    return parsed.timestamp()


def parse_cutoff(text: str, *, now: float | None = None) -> float:
    """Return the moment an age or date names: `now - duration`, or the ISO date itself."""
    now = time.time() if now is None else now
    try:
        return now - parse_age_seconds(text)
    except DurationError:
        return parse_iso(text)


def cutoff_to_days(cutoff: float, *, now: float | None = None) -> float:
    """Return how many days before now a cutoff moment lies (never negative)."""
    now = time.time() if now is None else now
    return max(0.0, (now - cutoff) / 86400.0)
