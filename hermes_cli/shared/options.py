"""Options shared by several commands (formats, colour, filters, ages, `--yes`), declared once,
and the command class that gives every command readable usage and examples in its help."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from hermes_cli.rendering.output import ColorMode, Format
from hermes_cli.shared.durations import ACCEPTED_FORMS, DurationError, parse_cutoff

JSON_HELP = "Same as --format json."
# What --json says on a command that has no --format (HermesCommand puts it in).
JSON_ONLY_HELP = "Print the result as one JSON document on stdout, and nothing else."
FORMAT_HELP = (
    "table (for people; the default), json (one document), jsonl (one record per line), "
    "csv (RFC 4180, with a header line) or tsv (a header line, then one record per line; tab, "
    "newline and backslash written as \\t, \\n, \\\\). Keys: see hermes(1)."
)
AGE_HELP = (
    "AGE: 90 (days), 90d, 12h, 30m, 2w, 1mo, 1y, '2 weeks ago', yesterday, 'last monday', "
    "'last month', a month (2026-11) or an ISO date."
)
WHEN_HELP = (
    "WHEN: a duration back from now (7d, 12h, 2w, 1mo, 1y, '2 weeks ago'), or the local "
    "midnight that starts a day, week (from Monday), month or year: today, yesterday, "
    "'last monday', 'this week', 'last week', 'this month', 'last month', 'this year', a month "
    "(2026-11: its 1st), an ISO date (2026-01-31)."
)
# One rule for every command: a title names the session with exactly that title (a session
# compression continued keeps its title; the continuation is `TITLE #2`).
ID_HELP = "Session id, unique id prefix, or exact title (a continuation is 'TITLE #2')."
ROLES = ("user", "assistant", "tool", "system")
UNLIMITED = 2**31  # what --limit 0 asks for


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


def validate_roles(values: list[str] | None) -> list[str] | None:
    """Reject, at parse time, a --role that no message can have (exit 2)."""
    for value in values or ():
        if value not in ROLES:
            raise typer.BadParameter(f"{value!r} is not a role; roles are {', '.join(ROLES)}")
    return values


def validate_texts(values: list[str] | None) -> list[str] | None:
    """Reject, at parse time, a value that is not valid text (undecodable bytes; exit 2)."""
    for value in values or ():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raw = os.fsencode(value).decode("ascii", "backslashreplace")  # the bytes as given
            raise typer.BadParameter(f"'{raw}' is not valid UTF-8 text") from None
    return values


def validate_text(value: str | None) -> str | None:
    """Reject, at parse time, one option value that is not valid text (exit 2)."""
    validate_texts(None if value is None else [value])
    return value


def cutoff(value: str | None) -> float | None:
    """Return the epoch moment an (already validated) AGE option names, or None."""
    return None if value is None else parse_cutoff(value)


def output_format(fmt: Format | None, as_json: bool) -> Format:
    """Return the chosen format: --json is --format json; the two must not disagree (exit 2)."""
    if as_json and fmt not in (None, Format.json):
        raise typer.BadParameter(f"--json and --format {fmt.value} disagree; give one of them")
    return Format.json if as_json else (fmt or Format.table)


JsonFlag = Annotated[bool, typer.Option("--json", help=JSON_HELP)]


def fields_of(value: str | None) -> list[str] | None:
    """Split --fields' comma-separated list (None: every field; blank entries dropped)."""
    if value is None:
        return None
    fields = [f.strip() for f in value.split(",") if f.strip()]
    if not fields:
        raise typer.BadParameter("--fields needs at least one field name, e.g. --fields id,title")
    return fields


FieldsOption = Annotated[
    str | None,
    typer.Option(
        "--fields",
        metavar="F,F...",
        help="Machine formats: only these fields, in this order (`--json=id,title` is short "
        "for `--json --fields id,title`).",
    ),
]
FormatOption = Annotated[
    Format | None, typer.Option("--format", help=f"Output format: {FORMAT_HELP}")
]
ColorOption = Annotated[
    ColorMode,
    typer.Option(
        "--color",
        help="Colour: auto (on a terminal, unless NO_COLOR is set; FORCE_COLOR forces it), "
        "always, or never. Colour changes only how a search match looks (reverse video, or "
        ">>>marked<<< without colour).",
    ),
]
NoPagerFlag = Annotated[
    bool,
    typer.Option(
        "--no-pager", help="Print straight to the terminal, even when the output is long."
    ),
]
YesFlag = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
ForceFlag = Annotated[
    bool, typer.Option("--force", help="Proceed even while another process holds the store.")
]
Sources = Annotated[
    list[str] | None,
    typer.Option(
        "--source",
        metavar="S",
        callback=validate_texts,
        help="Only sessions from source S (repeatable).",
    ),
]
ExcludeSources = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude-source",
        metavar="S",
        callback=validate_texts,
        help="Leave out sessions from source S (repeatable).",
    ),
]
Roles = Annotated[
    list[str] | None,
    typer.Option(
        "--role",
        metavar="R",
        callback=validate_roles,
        help="Only messages of role R: user, assistant, tool, system (repeatable).",
    ),
]
SessionRef = Annotated[str, typer.Argument(metavar="ID", help=ID_HELP)]
ExactSessionRef = SessionRef  # every command resolves a session the same way


def models_option(what: str) -> Any:
    """Return the repeatable --model option of a command that keeps only `what` of model M."""
    return typer.Option("--model", metavar="M", callback=validate_texts, help=f"Only {what}")


def since_option(what: str) -> Any:
    """Return the --since option for a command whose WHEN filters `what`."""
    return typer.Option(
        "--since",
        metavar="WHEN",
        callback=validate_age,
        help=f"Only {what} at or after WHEN. {WHEN_HELP}",
    )


def until_option(what: str, *aliases: str) -> Any:
    """Return the --until option (and its older aliases) for a command filtering `what`."""
    return typer.Option(
        "--until",
        *aliases,
        metavar="WHEN",
        callback=validate_age,
        help=f"Only {what} before WHEN. {WHEN_HELP}",
    )


# --- commands: readable usage lines and examples ---------------------------------------------


class HermesCommand(TyperCommand):
    """A command whose usage line reads `ID`, `QUERY`, `TITLE...` (not `{QUERY}`), and whose
    --json help is true for it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        has_format = any("--format" in getattr(p, "opts", ()) for p in self.params)
        for param in self.params:
            if param.param_type_name == "argument" and param.nargs != 1:
                # One `...` for a variadic argument, however its metavar was written.
                name = (param.metavar or (param.name or "").upper()).removesuffix("...")
                param.metavar = f"{name}..."
            elif getattr(param, "help", None) == JSON_HELP and not has_format:
                param.help = JSON_ONLY_HELP  # type: ignore[attr-defined]

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """Return the pieces of the usage line: [OPTIONS], then each argument as people write it."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                pieces.extend(param.get_usage_pieces(ctx))
                continue
            name = param.metavar or (param.name or "").upper()
            pieces.append(name if param.required else f"[{name}]")
        return pieces


class QueryCommand(HermesCommand):
    """A command whose variadic QUERY may hold `-word` exclusions unquoted after its first word.

    `hermes sessions search docker -build`: a token that starts with one dash, comes after the
    first query word and is not one of the command's options is a query word, not an option.
    The line is reordered to its options, then `--`, then the words in their order.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Move the query words (dash-words after the first word among them) after `--`."""
        return super().parse_args(ctx, query_words_last(args, self.params))


def query_words_last(args: list[str], params: Sequence[Any]) -> list[str]:
    """Return args with every query word after `--` when a `-word` follows the first word."""
    takes_value: set[str] = set()
    known: set[str] = set()
    for param in params:
        if param.param_type_name != "option":
            continue
        names = [*param.opts, *param.secondary_opts]
        known.update(names)
        if not param.is_flag and not param.count:
            takes_value.update(names)
    known.update(("-h", "--help"))
    options: list[str] = []
    words: list[str] = []
    moved = False
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            words.extend(args[i + 1 :])
            break
        name = token.split("=", 1)[0]
        # `-n5` is -n 5; `-nginx` is a query word (a number is all -n ever takes).
        short_value = token[:2] in takes_value and token[1] != "-" and token[2:].isdigit()
        if token.startswith("-") and len(token) > 1 and (name in known or short_value):
            options.append(token)
            if name in takes_value and "=" not in token and not short_value and i + 1 < len(args):
                options.append(args[i + 1])
                i += 1
        elif token.startswith("-") and len(token) > 1 and not token.startswith("--") and words:
            words.append(token)  # `-build` after a query word: an exclusion
            moved = True
        else:
            words.append(token)
        i += 1
    return [*options, "--", *words] if moved else args


def examples_epilog(examples: Sequence[str]) -> str:
    """Return an --help epilog listing examples, one per line, never rewrapped."""
    # \b stops click from rewrapping the paragraph that follows.
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in examples)


def examples_of(epilog: str | None) -> list[str]:
    """Return the example lines of an epilog made by examples_epilog (for the man page)."""
    if not epilog or "Examples:" not in epilog:
        return []
    block = epilog.split("Examples:", 1)[1]
    if "\b" not in block:
        return []
    return [line.strip() for line in block.split("\b", 1)[1].splitlines() if line.strip()]


def command(
    app: typer.Typer,
    name: str,
    *,
    examples: Sequence[str],
    keys: str = "",
    cls: type[HermesCommand] = HermesCommand,
) -> Callable[..., Any]:
    """Register a command on app with readable usage and an Examples section in its help
    (after ``keys``, a block of its own such as the keys of a full-screen command)."""
    epilog = examples_epilog(examples)
    return app.command(name, cls=cls, epilog=f"{keys}\n{epilog}" if keys else epilog)
