"""Parsing ages and dates given on the command line: `90`, `90d`, `12h`, `2w`, `1mo`, `1y`, ISO
dates and months (`2026-11`), and the natural forms `today`, `yesterday`, `2 weeks ago`,
`last monday`, `this month`, `last week`.

One rule: every form names a moment, and --since/--until both take that moment. A duration
(`30d`, `1mo`, `2 weeks ago`) counts back from now; a calendar word names the local midnight that
starts its day, week (weeks start on Monday), month or year: `this month` is the 1st of this month,
`last month` the 1st of the month before, `last week` the Monday before this week's. So
`--since 'last month' --until 'this month'` is exactly last month, and `--since 2026-11 --until
2026-12` is November.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta

ACCEPTED_FORMS = (
    "90 (days), 90d, 12h, 30m, 2w, 1mo, 1y, '2 weeks ago', today, yesterday, 'last monday', "
    "'this week', 'last month', 'this year', a month like 2026-11, or an ISO date like "
    "2026-01-31 or 2026-01-31T14:30"
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
_CALENDAR_RE = re.compile(r"(\d+)\s*(mo|y)", re.ASCII)  # 1mo, 2y: calendar months back
_MONTH_RE = re.compile(r"(\d{4})-(\d{2})", re.ASCII)  # 2026-11: the month's first midnight
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
    """Return the epoch seconds of an ISO date or date-time (naive means local time), or of the
    first local midnight of a month written YYYY-MM."""
    month = _MONTH_RE.fullmatch(text.strip())
    if month is not None:
        try:
            return datetime(int(month.group(1)), int(month.group(2)), 1).timestamp()
        except ValueError:
            raise DurationError(text) from None
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


def _period_start(midnight: datetime, unit: str, back: int) -> datetime:
    """Return the midnight that starts the week, month or year `back` periods before this one."""
    if unit == "week":
        return midnight - timedelta(days=midnight.weekday() + 7 * back)
    if unit == "month":
        return _months_back(midnight.replace(day=1), back)
    return midnight.replace(year=midnight.year - back, month=1, day=1)


def parse_natural(text: str, *, now: float) -> float:
    """Return the moment a natural phrase names: today, yesterday, `2 weeks ago`, `last friday`,
    `this month`, `last week`.

    `today` and `yesterday` are local midnights; `last monday` (or `monday`) is the midnight
    that starts the most recent Monday before today; `this week|month|year` and `last
    week|month|year` are the midnights that start those calendar periods (weeks start on
    Monday). `N units ago` counts back from now.
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
    which, _, unit = phrase.partition(" ")
    if which in ("this", "last") and unit in ("week", "month", "year"):
        return _period_start(midnight, unit, 0 if which == "this" else 1).timestamp()
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
    calendar = _CALENDAR_RE.fullmatch(text.strip().lower())
    if calendar is not None:
        months = int(calendar.group(1)) * (12 if calendar.group(2) == "y" else 1)
        return _months_back(datetime.fromtimestamp(now), months).timestamp()
    try:
        return parse_natural(text, now=now)
    except DurationError:
        return parse_iso(text)


def cutoff_to_days(cutoff: float, *, now: float | None = None) -> float:
    """Return how many days before now a cutoff moment lies (never negative)."""
    now = time.time() if now is None else now
    return max(0.0, (now - cutoff) / 86400.0)
