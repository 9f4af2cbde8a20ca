"""Options shared by several commands (`--json`, `--source`, ages, `--yes`), declared once."""

from __future__ import annotations

from typing import Annotated

import typer

from hermes_cli.durations import ACCEPTED_FORMS, DurationError, parse_cutoff

JSON_HELP = "Print JSON with stable keys (see hermes(1)) and nothing else on stdout."
AGE_HELP = "AGE: 90 (days), 90d, 12h, 30m, 2w, or an ISO date."
ID_HELP = "Session id, unique id prefix, or title."


def validate_age(value: str | None) -> str | None:
    """Reject, at parse time, an age or date that cannot be understood (exit 2)."""
    if value is None:
        return None
    try:
        parse_cutoff(value)
    except DurationError:
        raise typer.BadParameter(
            f"{value!r} is not an age or a date; use {ACCEPTED_FORMS}"
        ) from None
    return value


def cutoff(value: str | None) -> float | None:
    """Return the epoch moment an (already validated) AGE option names, or None."""
    return None if value is None else parse_cutoff(value)


JsonFlag = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
YesFlag = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
ForceFlag = Annotated[
    bool, typer.Option("--force", help="Proceed even while another process holds the store.")
]
Sources = Annotated[
    list[str] | None,
    typer.Option("--source", metavar="S", help="Only sessions from source S (repeatable)."),
]
ExcludeSources = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude-source", metavar="S", help="Leave out sessions from source S (repeatable)."
    ),
]
OneSource = Annotated[
    str | None, typer.Option("--source", metavar="S", help="Only sessions from source S.")
]
SessionRef = Annotated[str, typer.Argument(metavar="ID", help=ID_HELP)]
