"""`hermes sessions browse`: what the full-screen browser shows, read and changed via the library.

This module holds everything but the widgets: the filters, the reads (hits, sessions, the preview
window, transcripts, match counts) and the edits (rename, pin, archive, delete, export), each a
library call, and the rich `Text` every row and message is drawn with. Stored text is untrusted:
it only ever reaches the screen through `render.visible` inside a `Text` (never as markup).
Textual itself is imported by `hermes_cli.browse_app`, and only when the command runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_cli import output, render
from hermes_state.content import content_text

if TYPE_CHECKING:
    from rich.text import Text

    from hermes_state.connection import Store
    from hermes_state.search import MatchCount

HITS_PAGE = 50  # hits fetched per page (more are fetched when the cursor nears the end)
SESSIONS_PAGE = 50
GROUPED_HITS = 500  # hits grouped into the sessions view of a query
WINDOW_BEFORE = 3  # preview: messages shown before and after the hit
WINDOW_AFTER = 3
TRANSCRIPT_MAX = 5000  # messages the transcript screen loads; beyond that, export
TRANSCRIPT_CHUNK = 250
COUNT_BUDGET_S = 1.0
BODY_CHARS = 2000  # a message body in the preview is cut here
COLLAPSED_CHARS = 80
ROLES = ("user", "assistant", "tool")
SINCE_CHOICES: tuple[str | None, ...] = (None, "1h", "24h", "7d", "30d", "90d", "365d")
SCOPES = ("unarchived", "all", "archived", "pinned")
SCOPE_LABELS = {
    "unarchived": "not archived",
    "all": "all, archived too",
    "archived": "archived only",
    "pinned": "pinned only",
}
VIEWS = ("hits", "sessions")
ORDERING_TEXT = {
    "rank": "ranked by relevance",
    "newest": "newest first",
    "oldest": "oldest first",
}
ROUTE_TEXT = {
    "word": "word index",
    "cjk": "CJK index",
    "trigram": "substring index",
    "scan": "scan of recent messages",
    "none": "nothing to search",
}
MATCH_STYLE = "bold reverse"
ROLE_STYLES = {"user": "bold green", "assistant": "bold blue", "tool": "bold magenta"}


class BrowseError(Exception):
    """An expected failure of a read or an edit, as one line for the status bar."""


# --- filters --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """What the hits or sessions are narrowed to."""

    sources: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    since: str | None = None  # an AGE as the user gave it (validated), e.g. "7d"
    scope: str = "unarchived"

    def cutoff(self) -> float | None:
        """Return the moment `since` names, now."""
        from hermes_cli.options import cutoff

        return cutoff(self.since)

    def search_options(self) -> dict[str, Any]:
        """Return the keyword filters of search_messages / count_matches."""
        return {
            "source_filter": list(self.sources) or None,
            "role_filter": list(self.roles) or None,
            "after": self.cutoff(),
            "archived": {"unarchived": False, "archived": True}.get(self.scope),
            "pinned": True if self.scope == "pinned" else None,
        }

    def list_options(self) -> dict[str, Any]:
        """Return the keyword filters of list_sessions / count_sessions."""
        return {
            "sources": list(self.sources) or None,
            "include_archived": self.scope != "unarchived",
            "archived_only": self.scope == "archived",
            "pinned_only": self.scope == "pinned",
            "active_since": self.cutoff(),
        }


def cycled(current: Any, choices: Sequence[Any]) -> Any:
    """Return the choice after current (the first when current is not among them)."""
    options = list(choices)
    if current not in options:
        return options[0] if options else current
    return options[(options.index(current) + 1) % len(options)]


def with_initial(initial: Any, choices: Sequence[Any]) -> list[Any]:
    """Return choices with the value given on the command line second, when it is not one."""
    options = list(choices)
    if initial not in options:
        options.insert(1, initial)
    return options


# --- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One read the screen asks for: a view of a query under filters, from an offset."""

    seq: int
    view: str
    query: str
    filters: Filters
    offset: int = 0

    @property
    def searching(self) -> bool:
        """Whether the query has text to search (else the session list is shown)."""
        return bool(self.query.strip())


@dataclass
class Row:
    """One line of the list: a hit (message) or a session, with its session's columns."""

    session_id: str
    session: dict[str, Any]
    hit: dict[str, Any] | None = None
    hits_in_session: int = 0  # sessions view of a query: how many of the fetched hits


@dataclass
class Results:
    """What a Request found, ready to draw."""

    request: Request
    rows: list[Row] = field(default_factory=list)
    ordering: str = ""
    route: str = ""
    partial: bool = False
    examined: int = 0  # a partial search: candidates examined, of how many, back to when
    candidates: int = 0
    searched_back_to: float | None = None
    total: int | None = None  # sessions in the listing; None for searches (counted apart)
    more: bool = False  # another page can be fetched
    error: str | None = None
    elapsed_ms: float = 0.0


def _partial_fields(found: Any) -> dict[str, Any]:
    """The fields of Results that say how much of a partial search was examined."""
    return {
        "partial": found.partial,
        "examined": found.examined or 0,
        "candidates": found.candidates or 0,
        "searched_back_to": found.searched_back_to,
    }


# --- the store ------------------------------------------------------------------------------


class Browser:
    """The read-only store the screen browses, plus connections of its own for slow reads.

    Short reads (results, previews) share `store`, one at a time under its lock (the screen
    runs them in worker threads). A count can take a second on a huge store and a transcript
    or an export reads a whole session, so each of those opens its own read-only connection
    and never delays the next keystroke's search. Edits open the store for writing, one short
    connection per edit, as `hermes sessions rename` does.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path: Path = store.path
        self._count_store: Store | None = None
        self._count_lock = threading.Lock()
        self._sources: list[str] | None = None
        self._closed = False

    def close(self) -> None:
        """Stop reading: wait for a read in flight, stop a count, close the count connection.

        Worker threads may still be reading when the screen closes; a connection closed under a
        running statement would crash the process, so every read checks `_closed` under the
        lock it holds while it runs. The main store belongs to the caller.
        """
        self._closed = True  # a running count stops at its next progress check
        with self._count_lock:
            if self._count_store is not None:
                self._count_store.close()
                self._count_store = None
        with self.store.lock:
            pass  # a short read in flight has finished; later ones see _closed

    @contextlib.contextmanager
    def _shared(self) -> Iterator[Store]:
        """Hold the shared connection for one short read (refused once closed)."""
        with self.store.lock:
            if self._closed:
                raise BrowseError("the browser has closed")
            yield self.store

    # reads

    def load(self, request: Request) -> Results:
        """Run a request; a damaged or busy store raises its typed error (before the screen)."""
        started = time.perf_counter()
        with self._shared():
            if request.searching and request.view == "hits":
                results = self._hits(request)
            elif request.searching:
                results = self._grouped(request)
            else:
                results = self._sessions(request)
        results.elapsed_ms = (time.perf_counter() - started) * 1000
        return results

    def fetch(self, request: Request) -> Results:
        """Run a request; a damaged or busy store becomes Results.error, not an exception."""
        try:
            with _reading(self.path):
                return self.load(request)
        except BrowseError as exc:
            return Results(request, error=str(exc))

    @contextlib.contextmanager
    def _own_store(self) -> Iterator[Store]:
        """Open a read-only connection of its own for one slow read."""
        from hermes_state.connection import open_store

        store = open_store(self.path, read_only=True)
        try:
            yield store
        finally:
            store.close()

    def _hits(self, request: Request) -> Results:
        from hermes_state import search, sessions as lib

        found = search.search_messages(
            self.store,
            request.query,
            limit=HITS_PAGE,
            offset=request.offset,
            context=False,
            **request.filters.search_options(),
        )
        infos = lib.get_sessions_by_id(self.store, {h["session_id"] for h in found})
        rows = [Row(h["session_id"], infos.get(h["session_id"], {}), hit=h) for h in found]
        return Results(
            request,
            rows,
            ordering=found.ordering,
            route=found.route,
            more=len(found) == HITS_PAGE,
            **_partial_fields(found),
        )

    def _grouped(self, request: Request) -> Results:
        """The sessions view of a query: one row per session, in the order of its best hit."""
        from hermes_state import search, sessions as lib

        found = search.search_messages(
            self.store,
            request.query,
            limit=GROUPED_HITS,
            context=False,
            **request.filters.search_options(),
        )
        infos = lib.get_sessions_by_id(self.store, {h["session_id"] for h in found})
        rows: dict[str, Row] = {}
        for hit in found:
            sid = hit["session_id"]
            if sid not in rows:
                rows[sid] = Row(sid, infos.get(sid, {}), hit=hit)
            rows[sid].hits_in_session += 1
        return Results(
            request,
            list(rows.values()),
            ordering=found.ordering,
            route=found.route,
            **_partial_fields(found),
        )

    def _sessions(self, request: Request) -> Results:
        from hermes_state import sessions as lib

        options = request.filters.list_options()
        listed = lib.list_sessions(
            self.store, limit=SESSIONS_PAGE, offset=request.offset, order="active", **options
        )
        total = lib.count_sessions(self.store, **options)
        rows = [Row(r["id"], r) for r in listed]
        return Results(
            request,
            rows,
            ordering="active",
            route="list",
            total=total,
            more=request.offset + len(rows) < total,
        )

    def count(self, request: Request, should_stop: Callable[[], bool]) -> MatchCount | None:
        """Count the matches of a search request on the count connection (None on failure)."""
        from hermes_state import search
        from hermes_state.connection import open_store

        try:
            with _reading(self.path), self._count_lock:
                if self._closed:
                    return None
                if self._count_store is None:
                    self._count_store = open_store(self.path, read_only=True)
                return search.count_matches(
                    self._count_store,
                    request.query,
                    budget_s=COUNT_BUDGET_S,
                    should_stop=lambda: self._closed or should_stop(),
                    **request.filters.search_options(),
                )
        except BrowseError:
            return None

    def window(self, row: Row) -> list[dict[str, Any]]:
        """Return the messages to preview for a row: around its hit, or the session's first."""
        from hermes_state import messages

        around = row.hit["id"] if row.hit else None
        with _reading(self.path), self._shared():
            return messages.message_window(
                self.store,
                row.session_id,
                around,
                before=WINDOW_BEFORE if around else 0,
                after=WINDOW_AFTER if around else WINDOW_BEFORE + WINDOW_AFTER,
            )

    def session(self, session_id: str) -> dict[str, Any] | None:
        """Return one session's row (None once it is gone)."""
        from hermes_state import sessions as lib

        with _reading(self.path), self._shared():
            return lib.get_session(self.store, session_id)

    def transcript(self, session_id: str) -> Iterator[dict[str, Any]]:
        """Yield the session's transcript (live and compression-archive rows), at most
        TRANSCRIPT_MAX messages, reading a bounded chunk at a time."""
        from hermes_state import messages

        shown = 0
        with _reading(self.path), self._own_store() as store:
            for msg in messages.iter_messages(
                store, session_id, include_inactive=True, chunk=TRANSCRIPT_CHUNK
            ):
                if not (msg.get("active", 1) or msg.get("compacted")):
                    continue
                yield msg
                shown += 1
                if shown >= TRANSCRIPT_MAX:
                    return

    def sources(self) -> list[str]:
        """Return the sources the store holds, most sessions first (read once)."""
        from hermes_state import stats

        if self._sources is None:
            with _reading(self.path), self._shared():
                self._sources = [r["source"] for r in stats.counts_by_source(self.store)]
        return self._sources

    def changed_marker(self) -> tuple[int, ...]:
        """Return a cheap fingerprint of the store files: it changes when a writer commits."""
        marker: list[int] = []
        for suffix in ("", "-wal"):
            try:
                st = os.stat(f"{self.path}{suffix}")
            except OSError:
                marker += [0, 0]
                continue
            marker += [st.st_mtime_ns, st.st_size]
        return tuple(marker)

    # edits: each one opens the store for writing, as the plain commands do

    def rename(self, session_id: str, title: str) -> str | None:
        """Give the session a new title (unique, sanitised); return the stored title."""
        from hermes_state import sessions as lib

        with _writing(self.path) as store:
            return lib.set_session_title(store, session_id, title)

    def set_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin or unpin the session; return False when it is gone."""
        from hermes_state import sessions as lib

        with _writing(self.path) as store:
            return lib.set_session_pinned(store, session_id, pinned)

    def set_archived(self, session_id: str, archived: bool) -> bool:
        """Archive or unarchive the session; return False when it is gone."""
        from hermes_state import sessions as lib

        with _writing(self.path) as store:
            return lib.set_session_archived(store, session_id, archived)

    def delete(self, session_id: str) -> int:
        """Delete exactly this session and its messages; return how many messages went."""
        from hermes_state import maintenance

        with _writing(self.path) as store:
            return maintenance.delete_session(store, session_id)

    def export(self, session_id: str, target: str) -> tuple[Path, int]:
        """Export one session to a new file (.md: Markdown, else JSON Lines); (path, messages)."""
        from hermes_state import portability

        path = Path(target).expanduser()
        writer = portability.write_markdown if path.suffix == ".md" else portability.write_jsonl
        with _reading(self.path), self._own_store() as store:
            checked = portability.check_export_target(path)
            records = portability.export_all(store, session_ids=[session_id])
            counts = portability.export_to_path(records, checked, writer)
        return checked, counts.messages


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Turn a failed read into a BrowseError carrying the one-line message the CLI would print."""
    try:
        yield
    except Exception as exc:
        message = _problem(exc, path)
        if message is None:
            raise
        raise BrowseError(message) from exc


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[Store]:
    """Open the store for one edit, as the write commands do; failures become BrowseError."""
    from hermes_cli import stores

    try:
        with stores.write_store(path) as store:
            yield store
    except Exception as exc:
        message = _problem(exc, path)
        if message is None:
            raise
        raise BrowseError(message) from exc


def _problem(exc: BaseException, path: Path) -> str | None:
    """Return the one-line message for an expected failure (None: a bug, let it raise)."""
    from hermes_state.errors import HermesStateError, translate_sqlite_error

    if isinstance(exc, HermesStateError):
        return exc.message + (f" ({exc.hint})" if exc.hint else "")
    if isinstance(exc, sqlite3.Error):
        typed = translate_sqlite_error(exc, path)
        if typed is not None:
            return typed.message + (f" ({typed.hint})" if typed.hint else "")
        return f"{path.name}: {exc}"
    return None


# --- drawing --------------------------------------------------------------------------------


def _text() -> type[Text]:
    from rich.text import Text

    return Text


def line(text: Text, width: int) -> Text:
    """Cut a one-line Text to width cells, ending with an ellipsis when cut."""
    text.no_wrap = True
    if width > 0 and text.cell_len > width:
        text.truncate(width, overflow="ellipsis")
    return text


def flat(value: Any) -> str:
    """Return stored text on one line, every unsafe character escaped."""
    return " ".join(render.visible(str(value or "")).split())


def marked(snippet: str | None, base: str | None = None) -> Text:
    """Return a >>>marked<<< snippet as a Text with its matches highlighted (data never markup)."""
    text = _text()(style=base or "")
    for piece, is_match in render.split_matches(flat(snippet)):
        text.append(piece, style=MATCH_STYLE if is_match else None)
    return text


def session_label(session: dict[str, Any]) -> str:
    """Return a session's title, else its preview, else '(untitled)'."""
    return flat(session.get("title") or session.get("preview")) or "(untitled)"


def _tags(session: dict[str, Any]) -> list[tuple[str, str]]:
    tags = []
    if session.get("pinned"):
        tags.append((" [pinned]", "bold"))
    if session.get("archived"):
        tags.append((" [archived]", "dim"))
    return tags


def row_lines(row: Row, width: int, *, now: float | None = None) -> tuple[Text, Text]:
    """Return the two lines a row shows: when, source, id, title; then the snippet or summary."""
    Text = _text()
    now = time.time() if now is None else now
    s = row.session
    when_ts = row.hit["timestamp"] if row.hit else s.get("last_active")
    # Title first and the id last: at narrow widths the id is what gets cut (the preview's
    # header always shows it).
    first = Text()
    first.append(f"{render.relative_time(when_ts, now=now):>10}  ", style="dim")
    first.append(session_label(s), style="bold")
    for tag, style in _tags(s):
        first.append(tag, style=style)
    first.append("  ")
    first.append(flat(s.get("source") or (row.hit or {}).get("source") or "?"), style="cyan")
    first.append("  ")
    first.append(flat(row.session_id), style="dim")
    second = Text("    ")
    if row.hit:
        hit = row.hit
        role = flat(hit.get("role") or "?")
        if hit.get("tool_name"):
            role += f" ({flat(hit['tool_name'])})"
        second.append(role + ": ", style=ROLE_STYLES.get(hit.get("role") or "", "bold"))
        if row.hits_in_session > 1:
            second.append(f"[{row.hits_in_session} hits] ", style="dim")
        second.append_text(marked(hit.get("snippet")))
    else:
        msgs = s.get("message_count") or 0
        second.append(f"{msgs} message{'s' if msgs != 1 else ''}", style="dim")
        if s.get("model"):
            second.append(f" · {flat(s['model'])}", style="dim")
        if s.get("title") and s.get("preview"):
            second.append(f" · {flat(s['preview'])}", style="dim")
    return line(first, width), line(second, width)


def _body(msg: dict[str, Any]) -> str:
    return content_text(msg.get("content"))


def _collapsed(label: str, detail: str) -> str:
    detail = " ".join(detail.split())
    if len(detail) > COLLAPSED_CHARS:
        detail = detail[:COLLAPSED_CHARS] + "…"
    return f"▸ {label}: {detail}" if detail else f"▸ {label}"


def _reasoning(msg: dict[str, Any]) -> str:
    for key in ("reasoning", "reasoning_content"):
        value = msg.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def message_text(
    msg: dict[str, Any],
    *,
    expanded: bool = False,
    is_hit: bool = False,
    pattern: re.Pattern[str] | None = None,
    limit: int | None = BODY_CHARS,
) -> Text:
    """Return one transcript message: a header line, the body (matches highlighted), then tool
    calls and reasoning, collapsed to one line each unless expanded."""
    Text = _text()
    role = str(msg.get("role") or "?")
    head = Text()
    head.append("» " if is_hit else "  ", style="bold")
    head.append(flat(role), style=ROLE_STYLES.get(role, "bold"))
    if msg.get("tool_name"):
        head.append(f" ({flat(msg['tool_name'])})", style="magenta")
    head.append(f" · {render.local_time(msg.get('timestamp'))}", style="dim")
    if msg.get("compacted"):
        head.append(" [compacted]", style="dim")
    elif not msg.get("active", 1):
        head.append(" [inactive]", style="dim")
    if is_hit:
        head.append("  ← hit", style="bold")
    out = Text()
    out.append_text(head)
    reasoning = _reasoning(msg)
    if reasoning:
        out.append("\n")
        if expanded:
            out.append(render.visible(reasoning), style="italic dim")
        else:
            out.append(
                render.visible(_collapsed(f"reasoning ({len(reasoning):,} chars)", reasoning)),
                style="dim",
            )
    body = _body(msg)
    if body:
        shown = body if limit is None or len(body) <= limit else body[:limit] + " …"
        out.append("\n")
        out.append_text(_highlighted(render.visible(shown), pattern))
    for call in msg.get("tool_calls") or []:
        text = _call_line(call)
        out.append("\n")
        if expanded:
            out.append(render.visible(text), style="dim")
        else:
            out.append(render.visible(_collapsed("tool call", text)), style="dim")
    return out


def _call_line(call: Any) -> str:
    if not isinstance(call, dict):
        return str(call)
    fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
    name = fn.get("name") or call.get("name") or "?"
    args = fn.get("arguments", call.get("arguments", ""))
    if not isinstance(args, str):
        import json

        args = json.dumps(args, ensure_ascii=False)
    return f"{name}({args})"


def _highlighted(text: str, pattern: re.Pattern[str] | None) -> Text:
    out = _text()(text)
    if pattern is not None:
        for match in pattern.finditer(text):
            if match.end() > match.start():
                out.stylize(MATCH_STYLE, match.start(), match.end())
    return out


def search_highlight(query: str) -> re.Pattern[str] | None:
    """Return the pattern that marks the query's matches in message bodies."""
    from hermes_state.search import highlight_pattern

    return highlight_pattern(query)


def session_header(session: dict[str, Any]) -> Text:
    """Return the line above a preview or transcript: id, title, source, model, size."""
    Text = _text()
    out = Text()
    out.append(flat(session.get("id")), style="bold")
    out.append("  " + session_label(session))
    for tag, style in _tags(session):
        out.append(tag, style=style)
    facts = [
        flat(session.get("source") or "?"),
        f"{session.get('message_count') or 0} messages",
        f"started {render.local_time(session.get('started_at'))}",
        flat(session.get("model") or "—"),
    ]
    out.append("\n" + " · ".join(facts), style="dim")
    return out


def filters_text(filters: Filters, view: str) -> Text:
    """Return the filter bar: each filter with the key that changes it."""
    Text = _text()
    out = Text()
    parts = [
        ("^S source", ",".join(filters.sources) or "any"),
        ("^R role", ",".join(filters.roles) or "any"),
        ("^T since", filters.since or "any time"),
        ("^G", SCOPE_LABELS.get(filters.scope, filters.scope)),
        ("Tab view", view),
    ]
    for i, (key, value) in enumerate(parts):
        if i:
            out.append("  ")
        out.append(key + " ", style="dim")
        out.append(flat(value), style="bold")
    return out


def count_text(count: MatchCount | None, counting: bool) -> str:
    """Say how many matches there are: '412,331 matches', 'over 10,000', or still counting."""
    if count is None or count.count is None:
        return "counting matches…" if counting else "too many matches to count quickly"
    n = count.count
    noun = "match" if n == 1 else "matches"
    return f"{n:,} {noun}" if count.complete else f"at least {n:,} {noun}"


def status_text(
    results: Results | None,
    *,
    count: MatchCount | None = None,
    counting: bool = False,
    changed: bool = False,
    busy: str = "",
) -> Text:
    """Return the status line: route, ordering, match count and how many rows are shown."""
    from hermes_state.search import RANK_CANDIDATES

    Text = _text()
    out = Text()
    if results is None:
        out.append("loading…")
        return out
    if results.error:
        out.append("Error: ", style="bold")
        out.append(render.visible(results.error, newlines=False))
        return out
    shown = len(results.rows)
    req = results.request
    if req.searching:
        route = ROUTE_TEXT.get(results.route, results.route)
        matches = count_text(count, counting)
        if results.ordering == "rank_recent":
            order = f"ranked among the newest {RANK_CANDIDATES:,} of {matches}"
        else:
            order = f"{ORDERING_TEXT.get(results.ordering, results.ordering)} · {matches}"
        if req.view == "sessions":
            order = ORDERING_TEXT.get(results.ordering, results.ordering)
            if results.ordering == "rank_recent":
                order = f"ranked among the newest {RANK_CANDIDATES:,} matches"
            out.append(f"{route} · {order} · {shown:,} sessions in the first {GROUPED_HITS:,} hits")
        else:
            out.append(f"{route} · {order} · {shown:,} hits shown")
        if results.partial:
            back = results.searched_back_to
            since = f", back to {render.local_time(back)}" if back else ""
            out.append(
                f" · partial: {results.examined:,} of {results.candidates:,} candidates "
                f"examined{since}",
                style="bold",
            )
    else:
        total = results.total or 0
        out.append(
            f"{total:,} session{'s' if total != 1 else ''} · newest activity first · "
            f"{shown:,} shown"
        )
    out.append(f" · {results.elapsed_ms:.0f} ms", style="dim")
    if busy:
        out.append(f" · {busy}", style="bold")
    elif changed:
        out.append(" · the store changed: F5 refreshes", style="bold")
    return out


# --- the command ----------------------------------------------------------------------------


PRINT_CHOICES = ("id", "resume")


def resume_line(session_id: str) -> str:
    """Return the `hermes --resume ID` line for the session (with -p for a named profile)."""
    from hermes_state.home import DEFAULT_PROFILE, current_profile_name

    name = current_profile_name()
    profile = f"-p {shlex.quote(name)} " if name != DEFAULT_PROFILE else ""
    return f"hermes {profile}--resume {shlex.quote(session_id)}"


def chosen_line(session_id: str, what: str) -> str:
    """Return what the command prints for the chosen session."""
    text = resume_line(session_id) if what == "resume" else session_id
    # Exact for a pipe or $(...); a person's terminal gets control characters escaped.
    return render.visible(text, newlines=False) if output.isatty(sys.stdout) else text


def run(
    *,
    query: str,
    sources: Sequence[str],
    roles: Sequence[str],
    since: str | None,
) -> str | None:
    """Open the store, read the first results (so a broken store fails before the screen
    starts), run the browser and return the chosen session id (None when quit)."""
    from hermes_cli import stores
    from hermes_state.errors import HermesStateError

    filters = Filters(sources=tuple(sources), roles=tuple(roles), since=since)
    with stores.read_store() as store:
        browser = Browser(store)
        try:
            initial = browser.load(Request(0, "hits", query, filters))
            if not (output.isatty(sys.stdin) and output.isatty(sys.stderr)):
                raise HermesStateError(
                    "sessions browse needs a terminal (stdin and stderr)",
                    hint="In scripts, use hermes sessions search QUERY or hermes sessions list.",
                )
            from hermes_cli.browse_app import BrowseApp

            with _terminal_size_from_the_terminal():
                # Built in here: rich reads COLUMNS/LINES when the app makes its consoles.
                chosen = BrowseApp(browser, initial=initial).run()
        finally:
            browser.close()
    return chosen


@contextlib.contextmanager
def _terminal_size_from_the_terminal() -> Iterator[None]:
    """While the screen runs, let Textual read the size of the real terminal.

    Textual draws on stderr but reads the size through shutil.get_terminal_size(), which
    prefers COLUMNS/LINES from the environment (stale after a resize) and otherwise asks
    stdout, which under $(...) or a redirect is no terminal (80x24). So those variables are
    hidden and file descriptor 1 points at the terminal until the screen closes; the chosen id
    is printed after the original stdout is back.
    """
    hidden = {k: os.environ.pop(k) for k in ("COLUMNS", "LINES") if k in os.environ}
    saved = None
    if not output.isatty(sys.stdout):
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
    try:
        yield
    finally:
        if saved is not None:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        os.environ.update(hidden)


def request_after(results: Results) -> Request:
    """Return the request for the next page of results."""
    return replace(results.request, offset=results.request.offset + len(results.rows))
