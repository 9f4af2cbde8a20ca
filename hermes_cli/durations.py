"""Parsing ages and dates given on the command line: `90`, `90d`, `12h`, `2w`, ISO dates, and
the natural forms `today`, `yesterday`, `2 weeks ago`, `last monday`."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta

ACCEPTED_FORMS = (
    "90 (days), 90d, 12h, 30m, 2w, '2 weeks ago', today, yesterday, 'last monday', "
    "or an ISO date like 2026-01-31 or 2026-01-31T14:30"
)

_UNIT_SECONDS = {"m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([mhdw]?)", re.ASCII)
# Words for units, singular and plural: `3 days ago`, `1 hour ago`, `2 weeks`.
_UNIT_WORDS = {
    "min": "m",
    "mins": "m",
    "minute": "m",
    "minutes": "m",
    "hour": "h",
    "hours": "h",
    "day": "d",
    "days": "d",
    "week": "w",
    "weeks": "w",
    "month": "month",
    "months": "month",
    "year": "year",
    "years": "year",
}
_WORDS_RE = re.compile(r"(\d+|an?)\s+([a-z]+)(?:\s+ago)?", re.ASCII)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


class DurationError(ValueError):
    """Text that is neither a duration nor a date this parser knows."""


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


def _months_back(moment: datetime, months: int) -> datetime:
    """Return the same local time `months` calendar months earlier (day clamped to the month)."""
    index = moment.year * 12 + moment.month - 1 - months
    year, month = divmod(index, 12)
    day = moment.day
    while True:
        try:
            return moment.replace(year=year, month=month + 1, day=day)
        except ValueError:
            day -= 1  # 31 March minus one month is 28 or 29 February


def parse_natural(text: str, *, now: float) -> float:
    """Return the moment a natural phrase names: today, yesterday, `2 weeks ago`, `last friday`.

    `today` and `yesterday` are local midnights; `last monday` (or `monday`) is the midnight
    that starts the most recent Monday before today.
    """
    phrase = " ".join(text.strip().lower().split())
    here = datetime.fromtimestamp(now)
    midnight = here.replace(hour=0, minute=0, second=0, microsecond=0)
    if phrase == "now":
        return now
    if phrase == "today":
        return midnight.timestamp()
    if phrase == "yesterday":
        return (midnight - timedelta(days=1)).timestamp()
    day = phrase.removeprefix("last ")
    if day in _WEEKDAYS:
        back = (here.weekday() - _WEEKDAYS.index(day) - 1) % 7 + 1
        return (midnight - timedelta(days=back)).timestamp()
    if phrase in ("last week", "last month", "last year"):
        phrase = "1 " + phrase.removeprefix("last ") + " ago"
    match = _WORDS_RE.fullmatch(phrase)
    if match is None or match.group(2) not in _UNIT_WORDS:
        raise DurationError(text)
    amount = 1 if match.group(1) in ("a", "an") else int(match.group(1))
    unit = _UNIT_WORDS[match.group(2)]
    if unit == "month":
        return _months_back(here, amount).timestamp()
    if unit == "year":
        return _months_back(here, 12 * amount).timestamp()
    return now - amount * _UNIT_SECONDS[unit]


def parse_cutoff(text: str, *, now: float | None = None) -> float:
    """Return the moment an age or date names: `now - duration`, a natural phrase, or a date."""
    now = time.time() if now is None else now
    try:
        return now - parse_age_seconds(text)
    except DurationError:
        pass
    try:
        return parse_natural(text, now=now)
    except DurationError:
        return parse_iso(text)


def cutoff_to_days(cutoff: float, *, now: float | None = None) -> float:
    """Return how many days before now a cutoff moment lies (never negative)."""
    now = time.time() if now is None else now
    return max(0.0, (now - cutoff) / 86400.0)
