"""The one place that turns results into text for people: tables, transcripts, hits, prompts.

Every stored value passes through `hermes_cli.sanitize` before it is printed (escape codes are
shown, never obeyed) and no data is ever handed to rich as markup. Layout follows
`hermes_cli.output.Settings`: fitted to a terminal's width, or whole for a pipe; colour is added
last and never changes the layout. rich is imported only for progress bars on stderr.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import typer

from hermes_cli import output, sanitize
from hermes_cli.layout import (
    Column,
    display_width,
    dropped_note,
    paint_pieces,
    table_lines,
    truncate,
    wrap_pieces,
)

__all__ = ["Column", "display_width", "truncate"]

MATCH_OPEN = ">>>"
MATCH_CLOSE = "<<<"
MISSING = "—"
TOOL_ARGS_WIDTH = 400  # a tool call's arguments on a terminal (whole when piped)


# --- where output goes ----------------------------------------------------------------------


def _write(text: str, *, err: bool = False) -> None:
    """Write already-safe text (our own words, sanitised data, our colour codes)."""
    (sys.stderr if err else sys.stdout).write(text)


def echo(text: str = "", *, err: bool = False) -> None:
    """Write one line to stdout (or stderr), with any control characters in it shown escaped."""
    _write(sanitize.multiline(text) + "\n", err=err)


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
    (the one rule of :mod:`hermes_cli.sanitize`); newlines stay unless newlines=False."""
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


def local_time(ts: float | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
    """Return ts as local `YYYY-MM-DD HH:MM`, or a dash when missing or out of range."""
    if not _finite(ts):
        return MISSING
    try:
        return datetime.fromtimestamp(ts).strftime(fmt)  # type: ignore[arg-type]
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
    """Return a size as 512 B, 3.4 KB, 1.2 MB or 2.0 GB (powers of 1024)."""
    size = float(n or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(size) < 1024 or unit == "GB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"  # pragma: no cover - loop always returns


def plural(n: int, word: str) -> str:
    """Return `1 file`, `2 files`."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def money(value: Any) -> str:
    """Return a cost in dollars, or a dash when unknown."""
    if not _finite(value):
        return MISSING
    return f"${value:,.2f}"


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
    _write("".join(line + "\n" for line in lines))
    if dropped:
        _write("".join(line + "\n" for line in dropped_note(dropped, settings)))


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
        _write(label + " " * (width - display_width(key) + 1) + shown + "\n")


def heading(text: str, settings: output.Settings | None = None) -> None:
    """Print a section heading."""
    settings = settings or output.current()
    _write(output.paint(sanitize.one_line(text), "heading", settings) + "\n")


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
    """Return a snippet as safe styled pieces: matches coloured, or >>>marked<<< uncoloured."""
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


def confirm(question: str, *, assume_yes: bool) -> None:
    """Ask `question [y/N]` on stderr; anything but y/yes (EOF included) aborts with exit 1."""
    if assume_yes:
        return
    sys.stderr.write(f"{sanitize.multiline(question)} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if answer.strip().lower() in ("y", "yes"):
        return
    if not answer:
        sys.stderr.write("\n")  # EOF: end the prompt line
    echo("Aborted", err=True)
    raise typer.Exit(1)


# --- sessions -------------------------------------------------------------------------------

# `sessions list`: the title shrinks (to 16 cells) and the model (to 10) before anything is
# dropped; then whole columns go in this order: Model, Source, Tokens, Msgs, Profile, Last active.
# The ID and the title are never dropped, and the ID is never cut.
LIST_DROP_ORDER = ("Model", "Source", "Tokens", "Msgs", "Profile", "Last active")


def session_label(row: Mapping[str, Any]) -> str:
    """Return a session's title, else its preview, else a dash."""
    return row.get("title") or row.get("preview") or MISSING


def _tokens(row: Mapping[str, Any]) -> int:
    try:
        return int(row.get("input_tokens") or 0) + int(row.get("output_tokens") or 0)
    except (TypeError, ValueError):
        return 0


def list_columns(*, with_profile: bool) -> list[Column]:
    """Return the columns of `sessions list` with their shrink widths and drop ranks."""
    rank = {name: i + 1 for i, name in enumerate(LIST_DROP_ORDER)}
    columns = [Column("ID", style="id")]
    if with_profile:
        columns.append(Column("Profile", drop=rank["Profile"]))
    columns += [
        Column("Title / preview", shrink_to=16, prefer=40),
        Column("Source", shrink_to=10, drop=rank["Source"]),
        Column("Model", shrink_to=10, prefer=24, drop=rank["Model"]),
        Column("Msgs", "right", drop=rank["Msgs"]),
        Column("Tokens", "right", drop=rank["Tokens"]),
        Column("Last active", "right", drop=rank["Last active"]),
    ]
    return columns


def session_list(rows: Sequence[Mapping[str, Any]], *, with_profile: bool = False) -> None:
    """Print listed sessions: ID, title or preview, source, model, messages, tokens, last active."""
    settings = output.current()
    now = time.time()
    body = []
    for r in rows:
        cells: list[Any] = [r.get("id")]
        if with_profile:
            cells.append(r.get("profile") or "default")
        cells += [
            session_label(r),
            r.get("source") or MISSING,
            r.get("model") or MISSING,
            count(r.get("message_count"), settings),
            count(_tokens(r), settings),
            when(r.get("last_active"), settings, now=now),
        ]
        body.append(cells)
    table(list_columns(with_profile=with_profile), body, settings=settings)


def more_rows_hint(shown: int, offset: int, total: int, limit: int) -> None:
    """Tell on stderr that a listing has more rows than it printed, and how to see them."""
    if offset + shown < total:
        echo(
            f"Showing {offset + 1}-{offset + shown} of {total} sessions; "
            f"see more with --offset {offset + shown}, --limit {limit * 2}, or --limit 0 for all.",
            err=True,
        )


def _role_label(row: Mapping[str, Any]) -> str:
    role = sanitize.one_line(row.get("role") or "?")
    tool = row.get("tool_name")
    return f"{role} ({sanitize.one_line(tool)})" if tool else role


def _role_style(role: str) -> str | None:
    return role if role in ("user", "assistant", "tool", "system") else None


SEP = " · "
SNIPPET_INDENT = "    "


def search_hits(hits: Sequence[Mapping[str, Any]], titles: Mapping[str, str | None]) -> None:
    """Print hits as blocks: `id · title · role · when`, then the snippet wrapped to the width.

    On a narrow terminal the title is cut (then left out); the id is never cut. Piped, every
    header and snippet is whole, one line each, with absolute times.
    """
    settings = output.current()
    now = time.time()
    for i, h in enumerate(hits):
        if i:
            _write("\n")
        sid = sanitize.one_line(h.get("session_id"))
        role = _role_label(h)
        stamp = when(h.get("timestamp"), settings, now=now)
        title = sanitize.one_line(titles.get(str(h.get("session_id"))) or "")
        fixed = display_width(sid) + display_width(SEP + role + SEP + stamp)
        if title and settings.width is not None:
            room = settings.width - fixed - len(SEP)
            title = truncate(title, room) if room >= 8 else ""
        head: list[tuple[str, str | None]] = [(sid, "id")]
        if title:
            head += [(SEP, "dim"), (title, "title")]
        head += [(SEP, "dim"), (role, _role_style(str(h.get("role")))), (SEP, "dim")]
        head += [(stamp, "dim")]
        _write(paint_pieces(head, settings) + "\n")
        pieces = snippet_pieces(h.get("snippet"), settings)
        if settings.width is None:
            lines = [pieces]
        else:
            lines = wrap_pieces(pieces, settings.width - len(SNIPPET_INDENT))
        for line in lines:
            _write(SNIPPET_INDENT + paint_pieces(line, settings) + "\n")


def search_notes(result: Any, *, sort: str) -> None:
    """Say on stderr when hits are not the whole answer: budget cut, or ranked among the newest."""
    if result.partial:
        back = (
            f" (back to {local_time(result.searched_back_to)})" if result.searched_back_to else ""
        )
        echo(
            f"Note: partial result: the search stopped at its work budget after examining "
            f"{result.examined or 0:,} of {result.candidates or 0:,} candidate messages{back}; "
            "--all examines them all.",
            err=True,
        )
    elif result.ordering == "rank_recent":
        echo(
            f"Note: ranked among the newest {result.ranked:,} matches; older matches were not "
            "ranked (--all ranks every match).",
            err=True,
        )
    elif result and sort == "rank" and result.ordering == "newest":
        kind = "substring" if result.route == "trigram" else "scanned"
        echo(f"Note: newest first: {kind} matches have no relevance rank.", err=True)


def content_text(content: Any) -> str:
    """Return message content as text (structured parts one per line; see hermes_state.content)."""
    from hermes_state.content import content_text as text_of

    return text_of(content)


def _tool_call_lines(tool_calls: Any, settings: output.Settings) -> list[str]:
    lines = []
    width = TOOL_ARGS_WIDTH if settings.terminal else None
    for call in tool_calls or []:
        if not isinstance(call, Mapping):
            continue
        fn: Mapping[str, Any] = (
            call["function"] if isinstance(call.get("function"), Mapping) else {}
        )
        name = fn.get("name") or call.get("name") or "?"
        args = fn.get("arguments", call.get("arguments", ""))
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        lines.append(f"→ {sanitize.one_line(name)}({truncate(sanitize.one_line(args), width)})")
    return lines


def _flags(msg: Mapping[str, Any]) -> str:
    if msg.get("compacted"):
        return " [compacted]"
    if not msg.get("active", 1):
        return " [inactive]"
    return ""


def _message_counts(live: int, stored: int) -> str:
    """Say live and stored message counts the one way every command says them."""
    if live == stored:
        return f"{live:,}"
    return f"{live:,} live, {stored:,} stored (all generations)"


def session_header(
    session: Mapping[str, Any], counts: Any = None, *, include_all: bool = False
) -> None:
    """Print the summary lines of one session (counts: its MessageCounts, when known)."""
    messages: Any = session.get("message_count")
    if counts is not None:
        messages = _message_counts(counts.live, counts.stored)
        if counts.shown != counts.live and not include_all:
            messages += f"; shown below: {counts.shown:,} (live and compacted history)"
        if counts.shown < counts.stored and not include_all:
            messages += "; --all shows every stored one"
    pairs = [
        ("Session", session.get("id")),
        ("Title", session.get("title")),
        ("Source", session.get("source")),
        ("Model", session.get("model")),
        ("Started", local_time(session.get("started_at"))),
        ("Ended", local_time(session.get("ended_at")) if session.get("ended_at") else None),
        ("Messages", messages),
    ]
    if session.get("parent_session_id"):
        pairs.append(("Parent", session["parent_session_id"]))
    key_values(pairs)


def _rule(head: list[tuple[str, str | None]], settings: output.Settings) -> str:
    """Return a message header line: `── user · 09:15 ─────` filled to the terminal width."""
    text = "── " + "".join(t for t, _ in head) + " "
    fill = ""
    if settings.width is not None:
        fill = "─" * max(0, settings.width - display_width(text))
    return paint_pieces([("── ", "dim"), *head, (" " + fill if fill else "", "dim")], settings)


def transcript(
    messages: Iterable[Mapping[str, Any]], *, reasoning: bool = False, skipped: int = 0
) -> int:
    """Print messages one by one (streamed, so huge sessions stay cheap); return how many."""
    settings = output.current()
    if skipped:
        _write(output.paint(f"… {skipped} earlier message(s) not shown", "dim", settings) + "\n")
    n = 0
    for msg in messages:
        n += 1
        role = str(msg.get("role") or "?")
        head: list[tuple[str, str | None]] = [(_role_label(msg), _role_style(role))]
        head.append((f" · {local_time(msg.get('timestamp'))}{_flags(msg)}", None))
        thought = msg.get("reasoning") or msg.get("reasoning_content")
        if thought and not reasoning:
            head.append((" · reasoning hidden", "dim"))
        _write(_rule(head, settings) + "\n")
        if thought and reasoning:
            text = sanitize.multiline(content_text(thought))
            for line in text.split("\n"):
                _write(output.paint("│ " + line, "dim", settings) + "\n")
        body = content_text(msg.get("content"))
        if body:
            _write(sanitize.multiline(body) + "\n")
        for line in _tool_call_lines(msg.get("tool_calls"), settings):
            _write(output.paint(line, "dim", settings) + "\n")
    return n


# --- statistics -----------------------------------------------------------------------------


def stats(report: Mapping[str, Any], *, title: str = "") -> None:
    """Print one profile's statistics (documented shape): totals, sources, models, top sessions."""
    from hermes_state.home import display_hermes_home

    settings = output.current()
    store = report["store"]
    files = store.get("files") or {}
    key_values(
        [
            ("Sessions", report["session_count"]),
            ("Messages", _message_counts(report["message_count"], report["stored_message_count"])),
            ("Store", display_hermes_home(store["path"]) if store.get("path") else None),
            ("Database file", human_bytes(files.get("db"))),
            ("WAL file", human_bytes(files.get("wal")) if files.get("wal") else None),
            ("Schema version", store.get("schema_version")),
        ],
        title=title,
    )
    _write("\n")
    table(
        [
            Column("Source", shrink_to=10),
            Column("Sessions", "right"),
            Column("Live msgs", "right"),
            Column("Stored msgs", "right"),
        ],
        [
            [r["source"], r["session_count"], r["message_count"], r["stored_message_count"]]
            for r in report["by_source"]
        ],
        title="By source",
    )
    if report["by_model"]:
        _write("\n")
        table(
            [
                Column("Model", shrink_to=12, prefer=32),
                Column("Sessions", "right", drop=4),
                Column("Input", "right", drop=2),
                Column("Output", "right", drop=3),
                Column("Cost", "right", drop=5),
            ],
            [
                [
                    r["model"],
                    r["session_count"],
                    count(r["input_tokens"], settings),
                    count(r["output_tokens"], settings),
                    money(r["cost_usd"]),
                ]
                for r in report["by_model"]
            ],
            title="By model",
        )
    if report["top_sessions"]:
        _write("\n")
        table(
            [
                Column("ID", style="id"),
                Column("Title", style="title", shrink_to=12, prefer=40),
                Column("Tokens", "right", drop=2),
                Column("Cost", "right", drop=1),
            ],
            [
                [
                    r["id"],
                    r.get("title") or MISSING,
                    count(r["total_tokens"], settings),
                    money(r.get("cost_usd")),
                ]
                for r in report["top_sessions"]
            ],
            title="Top sessions by tokens",
        )
    files = store.get("files") or {}
    _write("\n")
    table(
        [Column("File"), Column("Size", "right")],
        [[name, human_bytes(size)] for name, size in files.items()],
        title="Files",
    )


# --- maintenance results --------------------------------------------------------------------


def prune_preview(result: Any, *, limit: int = 15) -> None:
    """Print what a prune would delete (the first few sessions) and what it keeps."""
    what = f"ended sessions last active before {local_time(result.cutoff)}"
    sources = getattr(result, "sources", ()) or ((result.source,) if result.source else ())
    if sources:
        what += " from " + ", ".join(sources)
    if getattr(result, "exclude_sources", ()):
        what += " except from " + ", ".join(result.exclude_sources)
    if getattr(result, "started_after", None) is not None:
        what += f", started since {local_time(result.started_after)}"
    if not result.sessions:
        echo(f"No {what}.")
    else:
        echo(
            f"{result.sessions} {what}: {result.messages} stored messages (every "
            f"generation), about {human_bytes(result.bytes_reclaimable)} of data."
        )
        for sid in result.session_ids[:limit]:
            echo(f"  {sid}")
        if result.sessions > limit:
            echo(f"  … and {result.sessions - limit} more")
    for busy in result.busy:
        echo(f"Kept {busy['session_id']}: {busy['message']}", err=True)
    if result.kept_for_lineage:
        echo(
            f"Kept {len(result.kept_for_lineage)} compression ancestor(s) of sessions that stay.",
            err=True,
        )


def prune_result(result: Any, optimized: Any = None) -> None:
    """Print what a prune deleted and how much space came back."""
    echo(f"Pruned {result.sessions} session(s) ({result.messages} stored messages).")
    if result.children_repointed:
        echo(f"Re-pointed {result.children_repointed} child session(s) to their grandparent.")
    if optimized is not None:
        optimize_result(optimized)


def optimize_result(result: Any) -> None:
    """Print the database and WAL file sizes before and after a space reclaim."""
    change = result.reclaimed
    how = f"reclaimed {human_bytes(change)}" if change >= 0 else f"grew by {human_bytes(-change)}"
    line = (
        f"Database file: {human_bytes(result.db_bytes_before)} -> "
        f"{human_bytes(result.db_bytes_after)}"
    )
    if result.wal_bytes_before or result.wal_bytes_after:
        line += (
            f"; WAL file: {human_bytes(result.wal_bytes_before)} -> "
            f"{human_bytes(result.wal_bytes_after)}"
        )
    echo(f"{line} ({how}).")
    if result.vacuum_skipped:
        warn(result.vacuum_skipped)
        echo(
            "Hint: run `hermes db optimize` while the other processes are stopped, or pass "
            "--force to rewrite the file now (their writes wait until it is done).",
            err=True,
        )
    if result.forced and result.other_processes:
        warn("rewrote the store while in use by: " + ", ".join(result.other_processes))


def migrate_result(outcome: Any) -> None:
    """Print what `db migrate` did, and which agent releases can use the store afterwards."""
    path, result = outcome.path, outcome.result
    if not outcome.existed:
        echo(f"Created {path} at schema v{result.after}.")
    elif not result.changed:
        echo(f"{path} is already at schema v{result.after} with everything hermes needs.")
    elif result.before == result.after:
        echo(f"Upgraded {path} (schema v{result.after}):")
    else:
        echo(f"Migrated {path} from schema v{result.before} to v{result.after}:")
    if outcome.existed:
        for step in result.steps:
            echo(f"  - {step}")
    echo("Compatible with: " + ", ".join(result.compatible_releases) + ".")


def lock_report(report: Any) -> None:
    """Print who holds locks on, or has open, the store files."""
    from hermes_state.home import display_hermes_home

    where = display_hermes_home(report.db_path)
    if not report.supported:
        echo(f"Lock owners cannot be inspected here: {report.note}")
        return
    if not report.files:
        echo(f"No store files at {where}.")
        return
    if not report.holders and not report.open_files:
        echo(f"No process holds or has open {where}.")
    if report.holders:
        table(
            [
                Column("PID", "right"),
                Column("Command", shrink_to=16, prefer=50),
                Column("File"),
                Column("Lock", drop=2),
                Column("Access", drop=1),
            ],
            [
                [h.pid if h.pid is not None else "OFD", h.command, h.file, h.kind, h.access]
                for h in report.holders
            ],
            title="Locks held",
        )
    if report.open_files:
        if report.holders:
            _write("\n")
        table(
            [Column("PID", "right"), Column("Command", shrink_to=16, prefer=50), Column("File")],
            [[o.pid, o.command, o.file] for o in report.open_files],
            title="Open without a lock",
        )
    if report.uninspectable:
        pids = ", ".join(str(p) for p in report.uninspectable)
        label = "PID" if len(report.uninspectable) == 1 else "PIDs"
        warn(f"could not inspect the open files of {label} {pids} (permission denied?)")
    if report.note:
        echo(report.note, err=True)


def check_report(result: Mapping[str, Any]) -> None:
    """Print the findings of `db check`, one line per check."""
    for check in result["checks"]:
        mark = "warn" if check["ok"] and check.get("warning") else "ok" if check["ok"] else "FAIL"
        echo(f"{mark:<4}  {check['name']}: {check['detail']}")
    echo("Store is healthy." if result["ok"] else "Problems found; see above.")


def recovery_report(report: Any) -> None:
    """Print a recovery's per-table counts, exclusions, skipped ranges and verdict."""
    table(
        [
            Column("Table"),
            Column("Source rows", "right"),
            Column("Copied", "right"),
            Column("Status"),
        ],
        [
            [name, "?" if t.source_rows is None else t.source_rows, t.copied, t.status]
            for name, t in report.tables.items()
        ],
    )
    if report.excluded:
        echo(
            "Excluded (runtime ledger, not copied): "
            + ", ".join(f"{k} ({'?' if v is None else v} rows)" for k, v in report.excluded.items())
        )
    for name, rows in report.not_copied.items():
        count = "?" if rows is None else rows
        echo(f"Lost: table {name} ({count} rows) could not be copied", err=True)
    for name, t in report.tables.items():
        if t.columns_dropped:
            echo(f"Lost: columns {', '.join(t.columns_dropped)} of table {name}", err=True)
    for r in report.skipped_ranges[:20]:
        echo(f"Skipped {r.table} rowids {r.first_rowid}..{r.last_rowid}: {r.error}", err=True)
    for note in report.notes:
        echo(note, err=True)
    v = report.verification
    echo(
        f"Verification: {'ok' if v.ok else 'FAILED'} (integrity {', '.join(v.integrity) or '?'}, "
        f"{v.foreign_key_violations} foreign key violations, "
        f"{len(v.fts_problems)} search index problems, schema v{v.schema_version})"
    )
    echo(f"Wrote {report.target}; report: {report.report_path}")
    if report.accepted:
        echo(
            "The live store was not replaced. To use the recovered copy, stop Hermes and move it "
            "into place yourself."
        )
    elif report.partial and report.verified:
        echo(
            f"Some data could not be read or kept (see above). The partial copy was kept at "
            f"{report.target}; do not install it unless those losses are acceptable (to accept "
            "such a copy, run again with --allow-partial and a new --to path).",
            err=True,
        )


# --- backup and restore ---------------------------------------------------------------------


def backup_result(result: Any) -> None:
    """Print where a backup went, what it holds, what was rotated away and what is missing."""
    from hermes_state.home import display_hermes_home

    echo(
        f"Wrote {display_hermes_home(result.archive)} ({human_bytes(result.archive_bytes)}, "
        f"{plural(len(result.members), 'file')}, {result.duration_s:.1f}s)"
    )
    for name, info in result.databases.items():
        tables = info.get("tables") or {}
        echo(
            f"  {name}: schema v{info.get('schema_version')}, {tables.get('sessions', 0)} "
            f"sessions, {tables.get('messages', 0)} messages"
        )
    for path in result.removed:
        echo(f"Removed old archive {display_hermes_home(path)}")
    for path in result.cleaned:
        echo(f"Removed {display_hermes_home(path)} (left by a backup that was killed)")
    for note in result.warnings:
        warn(note)
    if not result.complete:
        missing = len(result.skipped) + len(result.damaged)
        error(
            f"Backup incomplete: {plural(missing, 'file')} could not be archived whole "
            f"({', '.join([*result.skipped, *result.damaged])}).",
            "The archive was written and marked incomplete; older archives were kept.",
        )


def _store_state(state: Any) -> str:
    """Say what a store holds: `12 sessions, 53 messages, 261.0 KB`."""
    if state is None:
        return "nothing yet"
    parts = []
    if state.sessions is not None:
        parts.append(f"{state.sessions:,} sessions")
    if state.messages is not None:
        parts.append(f"{state.messages:,} messages")
    parts.append(human_bytes(state.bytes))
    return ", ".join(parts)


def restore_plan(plan: Any) -> None:
    """Print what a restore will replace, store by store (now -> after), before it is confirmed."""
    from hermes_state.home import display_hermes_home

    made = []
    if plan.profile:
        made.append(f"profile {plan.profile}")
    if plan.created_at:
        made.append(f"made {plan.created_at}")
    origin = f" ({', '.join(made)})" if made else ""
    echo(f"Archive: {display_hermes_home(plan.archive)}{origin}")
    echo(f"Restore into {display_hermes_home(plan.home)}:")
    for change in plan.databases:
        now = _store_state(change.before)
        if change.before_problem:
            now = f"unreadable ({change.before_problem})"
        echo(f"  {change.name}: now {now} -> {_store_state(change.after)}")
        for note in change.notes:
            echo(f"    note: {note}")
        if change.shrinks:
            warn(f"{change.name}: the archive holds fewer sessions or messages than the store now")
    for name in plan.files_replaced:
        echo(f"  {name}: replaces the current file")
    for name in plan.files_new:
        echo(f"  {name}: new file")
    for name in plan.kept:
        echo(f"  {name}: kept as it is (runtime file of a running gateway)")
    for change in plan.databases:
        if change.before is not None or change.before_problem:
            echo(f"The current {change.name} will be kept as {change.name}.pre-restore-<date>.")
    for path in plan.cleaned:
        echo(f"Removed {display_hermes_home(path)} (left by a restore that was killed)")
    if plan.forced and plan.holders:
        warn(f"restoring while in use by: {plan.holders}")


def restore_result(result: Any) -> None:
    """Print what a restore put back, and where the replaced stores are kept."""
    from hermes_state.home import display_hermes_home

    echo(
        f"Restored {len(result.databases)} store(s) and {len(result.files)} file(s) "
        f"from {display_hermes_home(result.archive)} into {display_hermes_home(result.home)}"
    )
    for change in result.changes:
        line = f"  {change.name}: {_store_state(change.after)}"
        copy = result.pre_restore.get(change.name)
        if copy is not None:
            line += f"; the replaced one is kept at {display_hermes_home(copy)}"
        echo(line)
    for name in result.kept:
        echo(f"  kept the current {name} (runtime file)")
    if result.forced and result.holders:
        warn(f"restored while in use by: {result.holders}")
    for note in result.warnings:
        warn(note)
