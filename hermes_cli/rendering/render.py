"""Output plumbing for people: writing, formatting values, tables, highlights, progress, prompts.

The views built on it live in `session_views` (list, hits, transcripts) and `store_views`
(statistics, maintenance, recovery, backups).

Every stored value passes through `hermes_cli.rendering.sanitize` before it is printed (escape
codes are
shown, never obeyed) and no data is ever handed to rich as markup. Layout follows
`hermes_cli.rendering.output.Settings`: fitted to a terminal's width, or whole for a pipe; colour
is added
last and never changes the layout. rich is imported only for progress bars on stderr.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import typer

from hermes_cli.rendering import output, sanitize
from hermes_cli.rendering.layout import (
    Column,
    display_width,
    dropped_note,
    table_lines,
    truncate,
    wrap_text,
)

__all__ = ["Column", "display_width", "truncate"]

MATCH_OPEN = ">>>"
MATCH_CLOSE = "<<<"
MISSING = "—"
TOOL_ARGS_WIDTH = 400  # a tool call's arguments on a terminal (whole when piped)


# --- where output goes ----------------------------------------------------------------------


def write(text: str, *, err: bool = False) -> None:
    """Write already-safe text (our own words, sanitised data, our colour codes)."""
    (sys.stderr if err else sys.stdout).write(text)


def echo(text: str = "", *, err: bool = False) -> None:
    """Write one line to stdout (or stderr), with any control characters in it shown escaped.

    A line wider than the terminal it goes to is wrapped at spaces to its width (a path or a
    command stays whole); into a pipe or a file every line stays as it is.
    """
    safe = sanitize.multiline(text)
    width = _terminal_width(sys.stderr if err else sys.stdout)
    if width is not None:
        safe = "\n".join(
            part for line in safe.split("\n") for part in wrap_text(line, width, break_words=False)
        )
    write(safe + "\n", err=err)


def _terminal_width(stream: Any) -> int | None:
    """Return the width of the terminal a stream is, or None for a pipe or a file."""
    if not output.isatty(stream):
        return None
    import shutil

    return max(20, shutil.get_terminal_size((80, 24)).columns)


def warn(message: str) -> None:
    """Write a warning line to stderr."""
    echo(f"Warning: {message}", err=True)


def error(message: str, hint: str = "") -> None:
    """Write `Error: message` and, when there is one, a hint line to stderr."""
    echo(f"Error: {message}", err=True)
    if hint:
        echo(f"Hint: {hint}", err=True)


def emit_json(data: Any) -> None:
    """Print data as indented JSON on stdout, and nothing else."""
    output.emit_json(data)


# --- small formatters -----------------------------------------------------------------------


def _finite(ts: Any) -> bool:
    return isinstance(ts, int | float) and not isinstance(ts, bool) and math.isfinite(ts)


def visible(text: str | None, *, newlines: bool = True) -> str:
    """Return stored text with every character that could act on a terminal shown escaped
    (the one rule of :mod:`hermes_cli.rendering.sanitize`); newlines stay unless newlines=False."""
    if newlines:
        return sanitize.multiline(text)
    raw = "" if text is None else str(text)
    return sanitize.multiline(raw).replace("\n", "\\n")


def relative_time(ts: float | None, *, now: float | None = None) -> str:
    """Say how long ago ts was: `just now`, `5m ago`, `3h ago`, `yesterday`, `4d ago`, a date."""
    if not _finite(ts):
        return "?"
    now = time.time() if now is None else now
    age = now - ts  # type: ignore[operator]
    if age < 60:
        return "just now"
    if age < 3600:
        return f"{int(age // 60)}m ago"
    if age < 86400:
        return f"{int(age // 3600)}h ago"
    if age < 2 * 86400:
        return "yesterday"
    if age < 7 * 86400:
        return f"{int(age // 86400)}d ago"
    return local_time(ts, "%Y-%m-%d")


MINUTE_FORMAT = "%Y-%m-%d %H:%M"
_MINUTES: dict[int, str] = {}  # UTC minute -> its local MINUTE_FORMAT text (a transcript's times)
_MINUTES_KEPT = 4096
_WHOLE_MINUTE_OFFSETS = 1e9  # from 2001 every zone's UTC offset is whole minutes


def local_time(ts: float | None, fmt: str = MINUTE_FORMAT) -> str:
    """Return ts as local `YYYY-MM-DD HH:MM`, or a dash when missing or out of range."""
    if not _finite(ts):
        return MISSING
    if fmt == MINUTE_FORMAT and ts > _WHOLE_MINUTE_OFFSETS:  # type: ignore[operator]
        # Every second of a UTC minute shows the same local minute: format each minute once.
        minute = int(ts // 60)  # type: ignore[operator]
        text = _MINUTES.get(minute)
        if text is None:
            if len(_MINUTES) >= _MINUTES_KEPT:
                _MINUTES.clear()
            text = _MINUTES[minute] = _format_time(ts, fmt)
        return text
    return _format_time(ts, fmt)


def _format_time(ts: Any, fmt: str) -> str:
    """Return ts formatted in local time, or `?` when the platform cannot represent it."""
    try:
        return datetime.fromtimestamp(ts).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return "?"


def when(ts: float | None, settings: output.Settings, *, now: float | None = None) -> str:
    """Return a time as people read it on a terminal (`3h ago`), or absolute when piped."""
    return relative_time(ts, now=now) if settings.terminal else local_time(ts)


def compact_number(n: float | None) -> str:
    """Return a count as 950, 12.3k or 4.5M."""
    n = n or 0
    if abs(n) < 1000:
        return str(int(n))
    if abs(n) < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def count(n: Any, settings: output.Settings) -> str:
    """Return a count compact on a terminal (12.3k) and exact when piped (12345)."""
    try:
        value = int(n or 0)
    except (TypeError, ValueError):
        return sanitize.one_line(n)
    return compact_number(value) if settings.terminal else str(value)


def human_bytes(n: float | None) -> str:
    """Return a size as 512 B, 3.4 KiB, 1.2 MiB, 2.0 GiB or 1.5 TiB (powers of 1024)."""
    size = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def plural(n: int, word: str) -> str:
    """Return `1 file`, `2 files`."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def money(value: Any) -> str:
    """Return a cost in dollars, or a dash when unknown."""
    if not _finite(value):
        return MISSING
    return f"${value:,.2f}"


def message_counts(live: int, stored: int) -> str:
    """Say live and stored message counts the one way every command says them."""
    if live == stored:
        return f"{live:,}"
    return f"{live:,} live, {stored:,} stored (all generations)"


# --- tables and key/value blocks ------------------------------------------------------------


def table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Any]],
    *,
    title: str = "",
    settings: output.Settings | None = None,
) -> None:
    """Print rows as columns fitted to the terminal (whole when piped); name dropped columns."""
    settings = settings or output.current()
    if title:
        heading(title, settings)
    lines, dropped = table_lines(columns, rows, settings)
    write("".join(line + "\n" for line in lines))
    if dropped:
        write("".join(line + "\n" for line in dropped_note(dropped, settings)))


def table_fitting(
    columns: Sequence[Column],
    variants: Sequence[Sequence[Sequence[Any]]],
    *,
    title: str = "",
    settings: output.Settings | None = None,
) -> None:
    """Print the first of several renderings of the same rows (exact counts first, then
    compact ones) that fits the width without leaving a column out; else the last."""
    settings = settings or output.current()
    for rows in variants[:-1]:
        _, dropped = table_lines(columns, rows, settings)
        if not dropped:
            table(columns, rows, title=title, settings=settings)
            return
    table(columns, variants[-1], title=title, settings=settings)


def exact_count(n: Any) -> str:
    """Return a count with thousands separators (6,021), for people."""
    try:
        return f"{int(n or 0):,}"
    except (TypeError, ValueError):
        return sanitize.one_line(n)


def key_values(
    pairs: Sequence[tuple[str, Any]], *, title: str = "", settings: output.Settings | None = None
) -> None:
    """Print aligned `key: value` lines (bold keys when coloured)."""
    settings = settings or output.current()
    if title:
        heading(title, settings)
    width = max((display_width(k) for k, _ in pairs), default=0)
    for key, value in pairs:
        shown = MISSING if value is None or value == "" else sanitize.one_line(value)
        label = output.paint(f"{key}:", "header", settings)
        write(label + " " * (width - display_width(key) + 1) + shown + "\n")


def heading(text: str, settings: output.Settings | None = None) -> None:
    """Print a section heading."""
    settings = settings or output.current()
    write(output.paint(sanitize.one_line(text), "heading", settings) + "\n")


# --- search highlights ----------------------------------------------------------------------


def split_matches(snippet: str) -> list[tuple[str, bool]]:
    """Split a >>>marked<<< snippet into (text, is_match) pieces."""
    pieces: list[tuple[str, bool]] = []
    rest = snippet
    while rest:
        start = rest.find(MATCH_OPEN)
        if start < 0:
            pieces.append((rest, False))
            break
        end = rest.find(MATCH_CLOSE, start + len(MATCH_OPEN))
        if end < 0:
            pieces.append((rest, False))
            break
        if start:
            pieces.append((rest[:start], False))
        pieces.append((rest[start + len(MATCH_OPEN) : end], True))
        rest = rest[end + len(MATCH_CLOSE) :]
    return pieces


def snippet_pieces(snippet: str | None, settings: output.Settings) -> list[tuple[str, str | None]]:
    """Return a snippet as safe styled pieces: each match in reverse video in colour, else
    >>>marked<<< (one or the other, never both: the marks are the colourless highlight)."""
    out: list[tuple[str, str | None]] = []
    for text, is_match in split_matches(sanitize.one_line(snippet)):
        if not is_match:
            out.append((text, None))
        elif settings.color:
            out.append((text, "match"))
        else:
            out.append((MATCH_OPEN + text + MATCH_CLOSE, None))
    return out


# --- progress and prompts -------------------------------------------------------------------


class ProgressBar:
    """A progress display on stderr, or nothing when stderr is not a terminal."""

    def __init__(self, bar: Any = None, task: Any = None) -> None:
        self._bar = bar
        self._task = task

    def advance(self, n: int = 1) -> None:
        """Move the bar on by n steps."""
        if self._bar is not None:
            self._bar.update(self._task, advance=n)

    def set(
        self, description: str | None = None, completed: int | None = None, total: int | None = None
    ) -> None:
        """Change what the bar says, how far it is and how far it goes."""
        if self._bar is not None:
            fields: dict[str, Any] = {"completed": completed, "total": total}
            if description is not None:
                fields["description"] = sanitize.one_line(description)
            self._bar.update(self._task, **fields)

    def phase(self, description: str, total: int | None = None) -> None:
        """Start a new phase: a new description, a new total (None: unknown), counting from 0."""
        if self._bar is not None:
            # Draw where the last phase ended, then a fresh task: rich cannot set a known total
            # back to "unknown".
            self._bar.refresh()
            self._bar.remove_task(self._task)
            self._task = self._bar.add_task(sanitize.one_line(description), total=total)


def progress_wanted() -> bool:
    """Tell whether progress may be drawn: stderr is a terminal that can move its cursor."""
    return output.isatty(sys.stderr) and os.environ.get("TERM") != "dumb"


@contextlib.contextmanager
def progress(description: str, total: int | None = None) -> Iterator[ProgressBar]:
    """Show progress on stderr while the block runs, when stderr is a terminal (never on pipes).

    With a total it is a bar with `done/total`; without one, a spinner; both with elapsed time.
    """
    if not progress_wanted():
        yield ProgressBar()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.text import Text

    class Count(ProgressColumn):
        """`done/total` when the total is known, else nothing (never `0/?`)."""

        def render(self, task: Any) -> Text:
            if task.total is None:
                return Text(f"{int(task.completed)}" if task.completed else "")
            return Text(f"{int(task.completed):,}/{int(task.total):,}")

    console = Console(
        file=sys.stderr,
        highlight=False,
        markup=False,
        emoji=False,
        no_color=not output.color_wanted(output.ColorMode.auto, sys.stderr),
    )
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        Count(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with bar:
        yield ProgressBar(bar, bar.add_task(sanitize.one_line(description), total=total))


def stdout_console(settings: output.Settings, width: int) -> Any:
    """Return a rich Console on stdout that never reads markup, emoji or highlights in text
    (stored text is untrusted) and colours only when the settings say so."""
    from rich.console import Console

    return Console(
        file=sys.stdout,
        width=width,
        force_terminal=settings.color,
        no_color=not settings.color,
        color_system="standard" if settings.color else None,
        markup=False,
        highlight=False,
        emoji=False,
    )


def confirm(question: str, *, assume_yes: bool) -> None:
    """Ask `question [y/N]` on stderr; anything but y/yes (EOF included) aborts with exit 1."""
    if assume_yes:
        return
    prompt = f"{sanitize.multiline(question)} [y/N]"
    width = _terminal_width(sys.stderr)
    if width is not None:  # wrapped at spaces, a cell left for the cursor after it
        prompt = "\n".join(
            part
            for line in prompt.split("\n")
            for part in wrap_text(line, width - 1, break_words=False)
        )
    sys.stderr.write(prompt + " ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if answer.strip().lower() in ("y", "yes"):
        return
    if not answer:
        sys.stderr.write("\n")  # EOF: end the prompt line
    echo("Aborted", err=True)
    raise typer.Exit(1)
