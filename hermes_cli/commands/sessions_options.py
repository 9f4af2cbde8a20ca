"""Options, enums and checks shared by the `hermes sessions` commands."""

from enum import StrEnum
from typing import Any

import typer

from hermes_cli.rendering import output, records
from hermes_cli.shared.options import (
    UNLIMITED,
    output_format,
)


class ListSort(StrEnum):
    """Orderings of `sessions list`."""

    started = "started"
    active = "active"


class SearchSort(StrEnum):
    """Orderings of `sessions search`."""

    rank = "rank"
    newest = "newest"
    oldest = "oldest"


class PrintWhat(StrEnum):
    """What `sessions browse` prints for the chosen session."""

    id = "id"
    resume = "resume"


class ExportFormat(StrEnum):
    """Formats `sessions export` writes."""

    jsonl = "jsonl"
    json = "json"
    md = "md"


class Conflict(StrEnum):
    """What `sessions import` does with a session id that already exists."""

    skip = "skip"
    replace = "replace"  # type: ignore[assignment]  # the member, not str.replace


class TitleClash(StrEnum):
    """What `sessions import` does with a title another session of the store has."""

    fail = "fail"
    rename = "rename"
    skip = "skip"


def setup(
    fmt: output.Format | None, as_json: bool, color: output.ColorMode, *, pager: bool = False
) -> output.Settings:
    """Decide this command's output settings from its flags and stdout."""
    return output.configure(output_format(fmt, as_json), color=color, pager=pager)


LIMIT_HELP = "Show at most N {what} (0: all). Default: 20 on a terminal, all in --json/--format."


DEFAULT_LIMIT = 20  # rows a person sees by default; machine formats get every row


def limit_option(what: str) -> Any:
    """Return the -n/--limit option of a listing of `what`."""
    return typer.Option("-n", "--limit", min=0, metavar="N", help=LIMIT_HELP.format(what=what))


def limit_for(limit: int | None, settings: output.Settings) -> int:
    """Return the row limit: as given (0 = all), else 20 for people and all for programs."""
    if limit is None:
        return UNLIMITED if settings.machine else DEFAULT_LIMIT
    return limit or UNLIMITED


def check_fields(fields: list[str], keys: tuple[str, ...]) -> None:
    """Refuse, as a usage error, a --fields name the records of this command do not have."""
    try:
        records.pick((), keys, fields)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fields") from None


def check_sources(store: Any, sources: list[str] | None) -> None:
    """Refuse a --source no session of this store has, naming the sources it does have."""
    import difflib

    from hermes_state.records import session_list

    if not sources:
        return
    known = session_list.distinct_sources(store)
    unknown = [s for s in sources if s not in known]
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], known, n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    have = ", ".join(known) if known else "no sessions yet"
    raise typer.BadParameter(
        f"no session comes from {unknown[0]!r}{guess}; this store has: {have}",
        param_hint="'--source'",
    )


def check_models(store: Any, models: list[str] | None) -> None:
    """Refuse a --model no session of this store has, naming the closest it does have."""
    import difflib

    from hermes_state.records import session_list

    if not models:
        return
    known = session_list.distinct_models(store)
    unknown = [m for m in models if m not in known]
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.4)
    close += [k for k in known if unknown[0].lower() in k.lower()][:1]
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    have = ", ".join(known) if known else "no sessions yet"
    raise typer.BadParameter(
        f"no session used model {unknown[0]!r}{guess}; this store has: {have}",
        param_hint="'--model'",
    )
