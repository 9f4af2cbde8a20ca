"""The one place that turns results into text: rich tables on a terminal, plain text, JSON, prompts.

rich is imported only inside the functions that draw, so `hermes --help` never loads it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import sys
import time
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

TITLE_WIDTH = 40
SNIPPET_WIDTH = 100
MATCH_OPEN = ">>>"
MATCH_CLOSE = "<<<"
ELLIPSIS = "…"
MISSING = "—"


# --- where output goes ----------------------------------------------------------------------


def _wants_plain() -> bool:
    """Tell whether the user asked for no colours (NO_COLOR set, or a dumb terminal)."""
    return bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def stdout_is_rich() -> bool:
    """Tell whether stdout gets rich tables and colours (a terminal, NO_COLOR unset)."""
    return _isatty(sys.stdout) and not _wants_plain()


def stderr_is_rich() -> bool:
    """Tell whether stderr gets progress bars (a terminal, NO_COLOR unset)."""
    return _isatty(sys.stderr) and not _wants_plain()


def _console(*, stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(file=sys.stderr if stderr else sys.stdout, highlight=False, soft_wrap=False)


def echo(text: str = "", *, err: bool = False) -> None:
    """Write one line of plain text to stdout (or stderr)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")


def warn(message: str) -> None:
    """Write a warning line to stderr."""
    echo(f"Warning: {message}", err=True)


def error(message: str, hint: str = "") -> None:
    """Write `Error: message` and, when there is one, a hint line to stderr."""
    echo(f"Error: {message}", err=True)
    if hint:
        echo(f"Hint: {hint}", err=True)


# --- JSON -----------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


_LONE_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def emit_json(data: Any) -> None:
    """Print data as indented JSON on stdout, and nothing else."""
    text = json.dumps(data, ensure_ascii=False, indent=2, default=_json_default)
    # A lone surrogate (an undecodable argv byte echoed back) cannot be written as UTF-8;
    # inside a JSON string its \\u escape is valid and loses nothing.
    text = _LONE_SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    sys.stdout.write(text + "\n")


def as_plain(value: Any) -> Any:
    """Return a dataclass (or anything JSON can take) as plain JSON-ready data."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=_json_default))


# --- small formatters -----------------------------------------------------------------------


# Characters that would act on a terminal instead of being shown: C0/C1 controls (ESC starts
# escape sequences, 0x9b is a one-byte CSI), DEL, bidi overrides that reorder what follows, line
# separators and lone surrogates (which cannot be encoded at all).
_UNSAFE_RE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str | None, *, newlines: bool = True) -> str:
    """Return stored text with every character that could act on a terminal shown escaped.

    ESC becomes the four characters \\x1b, a bidi override \\u202e; tabs stay, and newlines
    stay unless newlines=False (then they are escaped too).
    """
    out = _UNSAFE_RE.sub(_escaped, str(text or ""))
    return out if newlines else out.replace("\n", "\\n")


def display_width(text: str) -> int:
    """Return how many terminal cells text takes (wide CJK characters count two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def truncate(text: str | None, width: int) -> str:
    """Cut text to at most width cells on one line, ending with an ellipsis when cut."""
    flat = " ".join(str(text or "").split())
    if display_width(flat) <= width:
        return flat
    out, used = [], 0
    for ch in flat:
        w = display_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + ELLIPSIS


def relative_time(ts: float | None, *, now: float | None = None) -> str:
    """Say how long ago ts was: `just now`, `5m ago`, `3h ago`, `yesterday`, `4d ago`, a date."""
    if not isinstance(ts, int | float) or not math.isfinite(ts):
        return "?"
    now = time.time() if now is None else now
    age = now - ts
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
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d")


def local_time(ts: float | None) -> str:
    """Return ts as local `YYYY-MM-DD HH:MM`, or a dash when missing."""
    if not isinstance(ts, int | float) or not math.isfinite(ts):
        return MISSING
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def compact_number(n: float | None) -> str:
    """Return a count as 950, 12.3k or 4.5M."""
    n = n or 0
    if abs(n) < 1000:
        return str(int(n))
    if abs(n) < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


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


def money(value: float | None) -> str:
    """Return a cost in dollars, or a dash when unknown."""
    return MISSING if value is None else f"${value:,.2f}"


# --- tables ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One table column: header, alignment and optional rich style."""

    header: str
    justify: str = "left"
    style: str | None = None


def _pad(text: str, width: int, justify: str) -> str:
    gap = " " * max(0, width - display_width(text))
    return gap + text if justify == "right" else text + gap


def table(columns: Sequence[Column], rows: Sequence[Sequence[Any]], *, title: str = "") -> None:
    """Print rows as a rich table on a terminal, else as plain fixed-width columns."""
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    if stdout_is_rich():
        from rich import box
        from rich.table import Table

        t = Table(title=title or None, box=box.SIMPLE_HEAD, title_justify="left")
        for col in columns:
            t.add_column(col.header, justify=col.justify, style=col.style, no_wrap=True)  # type: ignore[arg-type]
        for row in cells:
            t.add_row(*row)
        _console().print(t)
        return
    if title:
        echo(title)
    widths = [display_width(c.header) for c in columns]
    for row in cells:
        widths = [max(w, display_width(v)) for w, v in zip(widths, row, strict=True)]
    lines = [[c.header for c in columns], *cells]
    for line in lines:
        parts = [_pad(v, w, c.justify) for v, w, c in zip(line, widths, columns, strict=True)]
        echo("  ".join(parts).rstrip())


def key_values(pairs: Sequence[tuple[str, Any]], *, title: str = "") -> None:
    """Print aligned `key: value` lines (bold keys on a terminal)."""
    if title:
        heading(title)
    width = max((len(k) for k, _ in pairs), default=0)
    rich = stdout_is_rich()
    console = _console() if rich else None
    for key, value in pairs:
        shown = MISSING if value is None or value == "" else str(value)
        if console is not None:
            from rich.markup import escape

            console.print(f"[bold]{escape(key + ':'):<{width + 1}}[/bold] {escape(shown)}")
        else:
            echo(f"{key + ':':<{width + 1}} {shown}")


def heading(text: str) -> None:
    """Print a section heading."""
    if stdout_is_rich():
        from rich.markup import escape

        _console().print(f"[bold underline]{escape(text)}[/]")
    else:
        echo(text)


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


def plain_snippet(snippet: str | None) -> str:
    """Return a snippet on one line with its >>>match<<< markers kept (no colours)."""
    return " ".join(str(snippet or "").split())


def _rich_snippet(snippet: str) -> Any:
    from rich.text import Text

    text = Text()
    for piece, is_match in split_matches(" ".join(snippet.split())):
        text.append(piece, style="bold reverse yellow" if is_match else None)
    return text


# --- progress and prompts -------------------------------------------------------------------


class ProgressBar:
    """A progress bar on stderr, or nothing when stderr is not a terminal."""

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
                fields["description"] = description
            self._bar.update(self._task, **fields)


@contextlib.contextmanager
def progress(description: str, total: int | None = None) -> Iterator[ProgressBar]:
    """Show a progress bar on stderr while the block runs, when stderr is a terminal."""
    if not stderr_is_rich():
        yield ProgressBar()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=_console(stderr=True),
        transient=True,
    )
    with bar:
        yield ProgressBar(bar, bar.add_task(description, total=total))


def confirm(question: str, *, assume_yes: bool) -> None:
    """Ask `question [y/N]` on stderr; anything but y/yes (EOF included) aborts with exit 1."""
    if assume_yes:
        return
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if answer.strip().lower() in ("y", "yes"):
        return
    if not answer:
        sys.stderr.write("\n")  # EOF: end the prompt line
    echo("Aborted", err=True)
    raise typer.Exit(1)


# --- sessions -------------------------------------------------------------------------------

SESSION_JSON_KEYS = (
    "id",
    "title",
    "preview",
    "source",
    "model",
    "message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "estimated_cost_usd",
    "started_at",
    "ended_at",
    "end_reason",
    "last_active",
    "parent_session_id",
    "archived",
    "pinned",
    "profile",
)


def session_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return a listed session with exactly the documented JSON keys."""
    return {k: row.get(k) for k in SESSION_JSON_KEYS}


def _tokens(row: Mapping[str, Any]) -> int:
    return int(row.get("input_tokens") or 0) + int(row.get("output_tokens") or 0)


def session_label(row: Mapping[str, Any]) -> str:
    """Return a session's title, else its preview, else a dash."""
    return row.get("title") or row.get("preview") or MISSING


def session_list(rows: Sequence[Mapping[str, Any]], *, with_profile: bool = False) -> None:
    """Print listed sessions: ID, title or preview, source, model, messages, tokens, last active."""
    now = time.time()
    columns = [Column("ID", style="cyan")]
    if with_profile:
        columns.append(Column("Profile"))
    columns += [
        Column("Title / preview"),
        Column("Source"),
        Column("Model"),
        Column("Msgs", "right"),
        Column("Tokens", "right"),
        Column("Last active", "right"),
    ]
    body = []
    for r in rows:
        cells: list[Any] = [r["id"]]
        if with_profile:
            cells.append(r.get("profile") or "default")
        cells += [
            truncate(session_label(r), TITLE_WIDTH),
            r.get("source") or MISSING,
            truncate(r.get("model") or MISSING, 24),
            r.get("message_count") or 0,
            compact_number(_tokens(r)),
            relative_time(r.get("last_active"), now=now),
        ]
        body.append(cells)
    table(columns, body)


def more_rows_hint(shown: int, offset: int, total: int, limit: int) -> None:
    """Tell on stderr that a listing has more rows than it printed, and how to see them."""
    if offset + shown < total:
        echo(
            f"Showing {offset + 1}-{offset + shown} of {total} sessions; "
            f"see more with --offset {offset + shown} or --limit {limit * 2}.",
            err=True,
        )


def search_hits(hits: Sequence[Mapping[str, Any]], titles: Mapping[str, str | None]) -> None:
    """Print search hits: session, role, time and the snippet with matches highlighted."""
    now = time.time()
    if stdout_is_rich():
        from rich import box
        from rich.table import Table

        t = Table(box=box.SIMPLE_HEAD)
        t.add_column("Session", style="cyan", no_wrap=True)
        t.add_column("Role", no_wrap=True)
        t.add_column("When", justify="right", no_wrap=True)
        t.add_column("Snippet", overflow="fold")
        for h in hits:
            label = h["session_id"]
            title = titles.get(h["session_id"])
            if title:
                label += "\n" + truncate(title, 30)
            role = h["role"] + (f" ({h['tool_name']})" if h.get("tool_name") else "")
            t.add_row(
                label, role, relative_time(h.get("timestamp"), now=now), _rich_snippet(h["snippet"])
            )
        _console().print(t)
        return
    columns = [
        Column("Session"),
        Column("Title"),
        Column("Role"),
        Column("When"),
        Column("Snippet"),
    ]
    body = []
    for h in hits:
        role = h["role"] + (f" ({h['tool_name']})" if h.get("tool_name") else "")
        body.append(
            [
                h["session_id"],
                truncate(titles.get(h["session_id"]) or MISSING, 30),
                role,
                relative_time(h.get("timestamp"), now=now),
                plain_snippet(h.get("snippet")),
            ]
        )
    table(columns, body)


def hit_json(hit: Mapping[str, Any], title: str | None) -> dict[str, Any]:
    """Return a search hit with its documented keys plus the session title."""
    from hermes_state.search import HIT_KEYS

    out = {k: hit.get(k) for k in HIT_KEYS}
    out["session_title"] = title
    return out


def content_text(content: Any) -> str:
    """Return message content as text (structured parts joined, other values as JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("text")]
        if texts and len(texts) == len(content):
            return "\n".join(str(t) for t in texts)
    return json.dumps(content, ensure_ascii=False)


def _tool_call_lines(tool_calls: Any) -> list[str]:
    lines = []
    for call in tool_calls or []:
        if not isinstance(call, Mapping):
            continue
        fn = call.get("function") if isinstance(call.get("function"), Mapping) else {}
        name = fn.get("name") or call.get("name") or "?"
        args = fn.get("arguments", call.get("arguments", ""))
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        lines.append(f"→ {name}({truncate(args, 400)})")
    return lines


def _flags(msg: Mapping[str, Any]) -> str:
    if msg.get("compacted"):
        return " [compacted]"
    if not msg.get("active", 1):
        return " [inactive]"
    return ""


def session_header(session: Mapping[str, Any]) -> None:
    """Print the summary lines of one session."""
    pairs = [
        ("Session", session.get("id")),
        ("Title", session.get("title")),
        ("Source", session.get("source")),
        ("Model", session.get("model")),
        ("Started", local_time(session.get("started_at"))),
        ("Ended", local_time(session.get("ended_at")) if session.get("ended_at") else None),
        ("Messages", session.get("message_count")),
    ]
    if session.get("parent_session_id"):
        pairs.append(("Parent", session["parent_session_id"]))
    key_values(pairs)


def transcript(messages: Iterable[Mapping[str, Any]]) -> int:
    """Print messages one by one (streamed, so huge sessions stay cheap); return how many."""
    rich = stdout_is_rich()
    console = _console() if rich else None
    n = 0
    for msg in messages:
        n += 1
        role = str(msg.get("role") or "?")
        tool = f" ({msg['tool_name']})" if msg.get("tool_name") else ""
        head = f"{role}{tool} · {local_time(msg.get('timestamp'))}{_flags(msg)}"
        body = content_text(msg.get("content"))
        calls = _tool_call_lines(msg.get("tool_calls"))
        if console is not None:
            from rich.markup import escape
            from rich.rule import Rule

            colour = {"user": "green", "assistant": "blue", "tool": "magenta"}.get(role, "white")
            console.print(Rule(f"[bold {colour}]{escape(head)}[/]", align="left"))
            if body:
                console.print(escape(body))
            for line in calls:
                console.print(f"[dim]{escape(line)}[/]")
        else:
            echo(f"── {head}")
            if body:
                echo(body)
            for line in calls:
                echo(line)
    return n


# --- statistics -----------------------------------------------------------------------------


def stats(report: Mapping[str, Any], *, title: str = "") -> None:
    """Print one profile's statistics: totals, sources, models, top sessions, file sizes."""
    store = report["store"]
    key_values(
        [
            ("Total sessions", report["total_sessions"]),
            ("Total messages", report["total_messages"]),
            ("Store", store.get("path")),
            ("Database size", human_bytes(store.get("total_bytes"))),
            ("Schema version", store.get("schema_version")),
        ],
        title=title,
    )
    echo()
    table(
        [Column("Source"), Column("Sessions", "right"), Column("Messages", "right")],
        [[r["source"], r["sessions"], r["messages"]] for r in report["by_source"]],
        title="By source",
    )
    if report["by_model"]:
        echo()
        table(
            [
                Column("Model"),
                Column("Sessions", "right"),
                Column("Input", "right"),
                Column("Output", "right"),
                Column("Cost", "right"),
            ],
            [
                [
                    truncate(r["model"], 32),
                    r["session_count"],
                    compact_number(r["input_tokens"]),
                    compact_number(r["output_tokens"]),
                    money(r["cost_usd"]),
                ]
                for r in report["by_model"]
            ],
            title="By model",
        )
    if report["top_sessions"]:
        echo()
        table(
            [Column("ID"), Column("Title"), Column("Tokens", "right"), Column("Cost", "right")],
            [
                [
                    r["id"],
                    truncate(r.get("title") or MISSING, TITLE_WIDTH),
                    compact_number(r["total_tokens"]),
                    money(r.get("cost_usd")),
                ]
                for r in report["top_sessions"]
            ],
            title="Top sessions by tokens",
        )
    files = store.get("files") or {}
    echo()
    table(
        [Column("File"), Column("Size", "right")],
        [[name, human_bytes(size)] for name, size in files.items()],
        title="Files",
    )


# --- maintenance results --------------------------------------------------------------------


def prune_preview(result: Any, *, limit: int = 15) -> None:
    """Print what a prune would delete (the first few sessions) and what it keeps."""
    when = local_time(result.cutoff)
    what = f"ended sessions last active before {when}" + (
        f" from source {result.source!r}" if result.source else ""
    )
    if not result.sessions:
        echo(f"No {what}.")
    else:
        echo(
            f"{result.sessions} {what}: {result.messages} messages, "
            f"about {human_bytes(result.bytes_reclaimable)}."
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
    echo(f"Pruned {result.sessions} session(s) ({result.messages} messages).")
    if result.children_repointed:
        echo(f"Re-pointed {result.children_repointed} child session(s) to their grandparent.")
    if optimized is not None:
        optimize_result(optimized)


def optimize_result(result: Any) -> None:
    """Print the store size before and after a space reclaim."""
    change = result.reclaimed
    how = f"reclaimed {human_bytes(change)}" if change >= 0 else f"grew by {human_bytes(-change)}"
    echo(
        f"Database size: {human_bytes(result.bytes_before)} -> {human_bytes(result.bytes_after)} "
        f"({how})."
    )
    if result.forced and result.other_processes:
        warn("rewrote the store while in use by: " + ", ".join(result.other_processes))


def migrate_result(path: str, *, existed: bool, before: int | None, after: int | None) -> None:
    """Print what `db migrate` did."""
    if not existed:
        echo(f"Created {path} at schema v{after}.")
    elif before == after:
        echo(f"{path} is already at schema v{after}.")
    elif before is None:
        echo(f"Upgraded {path} to schema v{after}.")
    else:
        echo(f"Migrated {path} from schema v{before} to v{after}.")


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
                Column("Command"),
                Column("File"),
                Column("Lock"),
                Column("Access"),
            ],
            [
                [
                    h.pid if h.pid is not None else "OFD",
                    truncate(h.command, 50),
                    h.file,
                    h.kind,
                    h.access,
                ]
                for h in report.holders
            ],
            title="Locks held",
        )
    if report.open_files:
        if report.holders:
            echo()
        table(
            [Column("PID", "right"), Column("Command"), Column("File")],
            [[o.pid, truncate(o.command, 50), o.file] for o in report.open_files],
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
        mark = "ok" if check["ok"] else "FAIL"
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
            f"Some rows could not be read (see above). The partial copy was kept at "
            f"{report.target}; do not install it unless those losses are acceptable (to accept "
            "such a copy, run again with --allow-partial and a new --to path).",
            err=True,
        )


# --- backup and restore ---------------------------------------------------------------------


def backup_result(result: Any) -> None:
    """Print where a backup went, what it holds and which old archives were rotated away."""
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
    for note in result.warnings:
        warn(note)


def restore_result(result: Any) -> None:
    """Print what a restore put back."""
    echo(
        f"Restored {len(result.databases)} store(s) and {len(result.files)} file(s) "
        f"from {result.archive} into {result.home}"
    )
    for name in result.kept:
        echo(f"  kept the current {name} (runtime file)")
    if result.forced and result.holders:
        warn(f"restored while in use by: {result.holders}")
    for note in result.warnings:
        warn(note)
