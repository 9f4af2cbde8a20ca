"""`hermes sessions browse`: what the full-screen browser shows, read and changed via the library.

This module holds everything but the widgets: the filters, the reads (hits, sessions, the preview
window, transcripts, match counts) and the edits (rename, pin, archive, delete, export), each a
library call, and the rich `Text` every row and message is drawn with. Stored text is untrusted:
it only ever reaches the screen through `render.visible` inside a `Text` (never as markup).
Textual itself is imported by `hermes_cli.apps.browse_app`, and only when the command runs.
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

from hermes_cli.rendering import output, render
from hermes_state.shapes.content import content_text

if TYPE_CHECKING:
    from rich.text import Text

    from hermes_state.search.search import MatchCount
    from hermes_state.store.connection import Store

HITS_PAGE = 50  # hits fetched per page (more are fetched when the cursor nears the end)
SESSIONS_PAGE = 50
GROUPED_HITS = 500  # hits grouped into the sessions view of a query
WINDOW_BEFORE = 3  # preview: messages shown before and after the hit
WINDOW_AFTER = 3
TRANSCRIPT_MAX = 5000  # messages the transcript screen loads; beyond that, export
TRANSCRIPT_FIRST = 50  # the first batch handed to the screen: a screenful, at once
TRANSCRIPT_CHUNK = 500
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
        from hermes_cli.shared.options import cutoff

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

    @property
    def vault(self) -> str | None:
        """Return the vault year of the row's session (None: it is in the live store)."""
        year = self.session.get("vault") or (self.hit or {}).get("vault")
        return str(year) if year else None


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

    def __init__(self, store: Store, *, vault_home: Path | None = None) -> None:
        self.store = store
        self.path: Path = store.path
        self.vault_home = vault_home  # the profile whose vault is browsed too (None: live only)
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
        from hermes_state.store.connection import open_store

        store = open_store(self.path, read_only=True)
        try:
            yield store
        finally:
            store.close()

    @contextlib.contextmanager
    def _vault_store(self, year: str) -> Iterator[Store]:
        """Open the vault store of a year read-only for one read (it is never written here)."""
        from hermes_state.vault import vault

        home = self.vault_home if self.vault_home is not None else self.path.parent
        # A store gone meanwhile (its sessions all returned) raises StoreNotFoundError.
        path = vault.vault_dir(home) / f"{year}.db"
        store = vault.open_vault(path, read_only=True, waiting=self.store.waiting)
        try:
            yield store
        finally:
            store.close()

    @contextlib.contextmanager
    def _store_of(self, year: str | None) -> Iterator[Store]:
        """Yield the store a session lives in: its vault store, else the shared live one."""
        if year is None:
            with self._shared() as store:
                yield store
        else:
            with self._vault_store(year) as store:
                yield store

    def _search(self, request: Request, limit: int, offset: int) -> Any:
        """Search the live store, and with vault_home the vault as well (hits marked)."""
        from hermes_state.search import search
        from hermes_state.vault import vault_search

        options = request.filters.search_options()
        if self.vault_home is None:
            return search.search_messages(
                self.store, request.query, limit=limit, offset=offset, context=False, **options
            )
        return vault_search.search_spanning(
            self.store,
            self.vault_home,
            request.query,
            limit=limit,
            offset=offset,
            context=False,
            **options,
        )

    def _infos(self, hits: Any) -> dict[str, dict[str, Any]]:
        """Return the listing columns of the hits' sessions, each read where its hit was found."""
        by_year: dict[str | None, set[str]] = {}
        for h in hits:
            by_year.setdefault(h.get("vault"), set()).add(h["session_id"])
        infos: dict[str, dict[str, Any]] = {}
        for year, ids in by_year.items():
            if year is None:
                infos.update(_with_previews(self.store, ids))
                continue
            with self._vault_store(year) as store:
                for sid, info in _with_previews(store, ids).items():
                    infos[sid] = {**info, "vault": year}
        return infos

    def _hits(self, request: Request) -> Results:
        found = self._search(request, HITS_PAGE, request.offset)
        infos = self._infos(found)
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
        found = self._search(request, GROUPED_HITS, 0)
        infos = self._infos(found)
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
        from hermes_state.records import session_list

        options = request.filters.list_options()
        if self.vault_home is None:
            listed = session_list.list_sessions(
                self.store, limit=SESSIONS_PAGE, offset=request.offset, order="active", **options
            )
            total = session_list.count_sessions(self.store, **options)
        else:
            from hermes_state.vault import vault_search

            spanned = vault_search.list_spanning(
                self.store,
                self.vault_home,
                limit=SESSIONS_PAGE,
                offset=request.offset,
                order="active",
                **options,
            )
            listed, total = spanned.rows, spanned.total
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
        from hermes_state.search import search
        from hermes_state.store.connection import open_store
        from hermes_state.vault import vault_search

        try:
            with _reading(self.path), self._count_lock:
                if self._closed:
                    return None
                if self._count_store is None:
                    self._count_store = open_store(self.path, read_only=True)

                def stop() -> bool:
                    return self._closed or should_stop()

                options = request.filters.search_options()
                if self.vault_home is not None:
                    return vault_search.count_spanning(
                        self._count_store,
                        self.vault_home,
                        request.query,
                        budget_s=COUNT_BUDGET_S,
                        should_stop=stop,
                        **options,
                    )
                return search.count_matches(
                    self._count_store,
                    request.query,
                    budget_s=COUNT_BUDGET_S,
                    should_stop=stop,
                    **options,
                )
        except BrowseError:
            return None

    def window(self, row: Row) -> list[dict[str, Any]]:
        """Return the messages to preview for a row: around its hit, or the session's first."""
        from hermes_state.records import message_windows

        around = row.hit["id"] if row.hit else None
        with _reading(self.path), self._store_of(row.vault) as store:
            return message_windows.message_window(
                store,
                row.session_id,
                around,
                before=WINDOW_BEFORE if around else 0,
                after=WINDOW_AFTER if around else WINDOW_BEFORE + WINDOW_AFTER,
            )

    def session(self, session_id: str) -> dict[str, Any] | None:
        """Return one session's row (None once it is gone)."""
        from hermes_state.records import sessions as lib

        with _reading(self.path), self._shared():
            return lib.get_session(self.store, session_id)

    def transcript(self, session_id: str, vault: str | None = None) -> Iterator[dict[str, Any]]:
        """Yield the session's transcript (live and compression-archive rows; from its vault
        store when vaulted), at most TRANSCRIPT_MAX messages, a bounded chunk at a time."""
        from hermes_state.records import messages

        shown = 0
        opened = self._vault_store(vault) if vault else self._own_store()
        with _reading(self.path), opened as store:
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
        from hermes_state.reports import stats
        from hermes_state.vault import vault_search

        if self._sources is None:
            with _reading(self.path), self._shared():
                found = [r["source"] for r in stats.counts_by_source(self.store)]
                if self.vault_home is not None:
                    vaulted = vault_search.vault_sources(self.store, self.vault_home)
                    found += sorted(vaulted - set(found))
                self._sources = found
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
        from hermes_state.records import sessions as lib

        with _writing(self.path) as store:
            return lib.set_session_title(store, session_id, title)

    def set_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin or unpin the session; return False when it is gone."""
        from hermes_state.records import sessions as lib

        with _writing(self.path) as store:
            return lib.set_session_pinned(store, session_id, pinned)

    def set_archived(self, session_id: str, archived: bool) -> bool:
        """Archive or unarchive the session; return False when it is gone."""
        from hermes_state.records import sessions as lib

        with _writing(self.path) as store:
            return lib.set_session_archived(store, session_id, archived)

    def delete(self, session_id: str) -> int:
        """Delete exactly this session and its messages; return how many messages went."""
        from hermes_state.upkeep import maintenance

        with _writing(self.path) as store:
            return maintenance.delete_session(store, session_id)

    def export(self, session_id: str, target: str, vault: str | None = None) -> tuple[Path, int]:
        """Export one session to a new file (.md: Markdown, else JSON Lines); (path, messages).
        A vaulted session is read from the vault, its records marked with the year, as
        `hermes sessions export` writes them."""
        from hermes_state.transfer import portability
        from hermes_state.vault import vault as vaults

        path = Path(target).expanduser()
        writer = portability.write_markdown if path.suffix == ".md" else portability.write_jsonl
        with _reading(self.path), self._own_store() as store:
            checked = portability.check_export_target(path)
            if vault:
                records = vaults.export_spanning(store, iter(()), session_ids=[session_id])
            else:
                records = portability.export_all(store, session_ids=[session_id])
            counts = portability.export_to_path(records, checked, writer)
        return checked, counts.messages


def vault_refusal(row: Row) -> str | None:
    """Return the one-line notice refusing an edit of a vaulted session (None: it is live)."""
    if row.vault is None:
        return None
    back = f"hermes vault return {shlex.quote(row.session_id)}"
    return (
        f"{flat(row.session_id)} is in the vault ({flat(row.vault)}), read-only here:"
        f" `{flat(back)}` brings it back."
    )


def _with_previews(store: Store, session_ids: set[str]) -> dict[str, dict[str, Any]]:
    """Return the listing columns of the sessions of some hits, keyed by id, with a preview
    for each untitled one (its row then shows what the session list shows for it)."""
    from hermes_state.records import listing, session_list

    infos = session_list.get_sessions_by_id(store, session_ids)
    untitled = [info for info in infos.values() if not info.get("title")]
    listing.with_previews(store, untitled)
    cut = session_list.PREVIEW_CHARS + len(listing.PREVIEW_ELLIPSIS)
    for info in untitled:
        # The agent's previews end "..." when cut (exactly then are they this long); the
        # session list's end "…": the same session reads the same in both.
        preview = info.get("preview") or ""
        if len(preview) == cut and preview.endswith(listing.PREVIEW_ELLIPSIS):
            info["preview"] = preview[: session_list.PREVIEW_CHARS] + "…"
    return infos


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
    from hermes_cli.shared import stores

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
    from hermes_state.store.errors import HermesStateError, translate_sqlite_error

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


@dataclass(frozen=True)
class Part:
    """One field of a one-line bar: its forms, longest first, and how much it matters."""

    forms: tuple[str, ...]
    priority: int = 0  # the least important part gets shorter, then goes, first
    droppable: bool = True
    style: str = ""
    label: str = ""  # drawn before the text in label_style (the key of a keys bar)
    label_style: str = ""


def fitted(parts: Sequence[Part], width: int | None, sep: str = " · ") -> Text:
    """Return the parts on one line within width cells, giving way step by step: a part takes
    its next shorter form at priority + 1, + 2 …, and goes (when droppable) one step after its
    shortest, the lowest step first; what is still too wide ends with an ellipsis. No width:
    every part in full."""
    chosen: list[str | None] = [p.forms[0] if p.forms else "" for p in parts]

    def build() -> Text:
        out = _text()()
        for part, form in zip(parts, chosen, strict=True):
            if form is None:
                continue
            if out:
                out.append(sep, style="dim" if sep.strip() else "")
            if part.label:
                out.append(part.label, style=part.label_style)
                if form:
                    out.append(" ")
            out.append(form, style=part.style)
        return out

    text = build()
    if width is None or text.cell_len <= width:
        return line(text, width or 0)
    steps: list[tuple[int, int, int, str | None]] = []
    for i, part in enumerate(parts):
        for level, shorter in enumerate(part.forms[1:], 1):
            steps.append((part.priority + level, part.priority, i, shorter))
        if part.droppable:
            steps.append((part.priority + max(1, len(part.forms)), part.priority, i, None))
    for _step, _priority, i, step_form in sorted(steps, key=lambda s: (s[0], s[1], s[2])):
        chosen[i] = step_form
        text = build()
        if text.cell_len <= width:
            return text
    return line(text, width)


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


CONTINUATION = re.compile(r"^(.+?)(\s+#\d+)$")  # "Fix the build #2": a later part of a chain
MIN_TITLE_CELLS = 12  # narrower than this, the title is cut at its end like the rest


def title_within(label: str, cells: int) -> str:
    """Return the label within cells, cut before its " #N" ending so that ending stays."""
    from rich.cells import cell_len, set_cell_size

    if cell_len(label) <= cells or cells < MIN_TITLE_CELLS:
        return label
    match = CONTINUATION.match(label)
    head, tail = (match.group(1), match.group(2)) if match else (label, "")
    room = cells - cell_len(tail) - 1
    if room < 1:
        return label
    # set_cell_size pads with a space where a wide character does not fit: no gap before "…".
    return set_cell_size(head, room).rstrip() + "…" + tail


def _tags(session: dict[str, Any]) -> list[tuple[str, str]]:
    tags = []
    if session.get("vault"):
        tags.append((f" [vault {flat(session['vault'])}]", "bold yellow"))
    if session.get("pinned"):
        tags.append((" [pinned]", "bold"))
    if session.get("archived"):
        tags.append((" [archived]", "dim"))
    return tags


def row_lines(row: Row, width: int, *, now: float | None = None) -> tuple[Text, Text]:
    """Return the two lines a row shows: when, title, source, id; then the snippet or summary."""
    from rich.cells import cell_len

    Text = _text()
    now = time.time() if now is None else now
    s = row.session
    when_ts = row.hit["timestamp"] if row.hit else s.get("last_active")
    # Title first and the id last: at narrow widths the id is what gets cut (the preview's
    # header always shows it).
    first = Text()
    first.append(f"{render.relative_time(when_ts, now=now):>10}  ", style="dim")
    tags = _tags(s)
    label = session_label(s)
    # A title too long gives way in its middle: its "#2" (a continuation) and the tags stay
    # in view, and the source and id (in the preview's header) make room for it.
    room = width - first.cell_len - sum(len(tag) for tag, _ in tags)
    cut = width > 0 and cell_len(label) > room
    first.append(title_within(label, room) if cut else label, style="bold")
    for tag, style in tags:
        first.append(tag, style=style)
    if not cut:
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
        second.append(_plural(s.get("message_count") or 0, "message"), style="dim")
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
    from hermes_state.search.search import highlight_pattern

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
        _plural(session.get("message_count") or 0, "message"),
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


def count_forms(count: MatchCount | None, counting: bool) -> tuple[str, ...]:
    """Say how many matches there are ('412,331 matches', 'at least 10,000', still counting),
    in full and shorter."""
    if count is None or count.count is None:
        if counting:
            return ("counting matches…", "counting…")
        return ("too many matches to count quickly", "too many to count")
    n = count.count
    noun = "match" if n == 1 else "matches"
    if count.complete:
        return (f"{n:,} {noun}",)
    return (f"at least {n:,} {noun}", f"≥{n:,} {noun}")


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun if n == 1 else noun + 's'}"


ORDERING_FORMS = {
    "rank": ("ranked by relevance", "by relevance"),
    "newest": ("newest first", "newest"),
    "oldest": ("oldest first", "oldest"),
    "active": ("newest activity first", "newest first"),
}
ROUTE_SHORT = {"word": "word", "cjk": "CJK", "trigram": "substring", "scan": "scan"}


def status_parts(
    results: Results | None,
    *,
    count: MatchCount | None = None,
    counting: bool = False,
    changed: bool = False,
    busy: str = "",
) -> list[Part]:
    """Return the fields of the status line, each with its shorter forms and its importance:
    what is wrong or needs a key first, then counts, then how the search ran."""
    from hermes_state.search.search import RANK_CANDIDATES

    if results is None:
        return [Part(("loading…",), droppable=False)]
    if results.error:
        error = render.visible(results.error, newlines=False)
        return [Part((error,), droppable=False, label="Error:", label_style="bold")]
    shown = len(results.rows)
    req = results.request
    parts: list[Part] = []
    if req.searching:
        if results.ordering == "rank_recent":
            order: tuple[str, ...] = (
                f"ranked among the newest {RANK_CANDIDATES:,}",
                f"ranked: newest {RANK_CANDIDATES:,}",
            )
        else:
            order = ORDERING_FORMS.get(results.ordering, (results.ordering,))
        if req.view == "sessions":
            sessions = _plural(shown, "session")
            parts.append(
                Part((f"{sessions} in the first {GROUPED_HITS:,} hits", sessions), priority=5)
            )
        else:
            parts.append(Part(count_forms(count, counting), priority=5, droppable=False))
            hits = _plural(shown, "hit")
            parts.append(Part((f"{hits} shown", f"{shown:,} shown"), priority=4))
        parts.append(Part(order, priority=2))
        route = ROUTE_TEXT.get(results.route, results.route)
        parts.append(Part((route, ROUTE_SHORT.get(results.route, route)), priority=1))
        if results.partial:
            back = results.searched_back_to
            since = f", back to {render.local_time(back)}" if back else ""
            examined, candidates = f"{results.examined:,}", f"{results.candidates:,}"
            parts.append(
                Part(
                    (
                        f"partial: {examined} of {candidates} candidates examined{since}",
                        f"partial: {examined} of {candidates}",
                        f"partial: {examined}/{candidates}",
                        "partial",
                    ),
                    priority=5,
                    droppable=False,
                    style="bold",
                )
            )
    else:
        total = results.total or 0
        parts.append(Part((_plural(total, "session"),), priority=6, droppable=False))
        parts.append(Part(ORDERING_FORMS["active"], priority=2))
        parts.append(Part((f"{shown:,} shown",), priority=4))
    parts.append(Part((f"{results.elapsed_ms:.0f} ms",), priority=0, style="dim"))
    if busy:
        parts.append(Part((busy, "waiting…"), priority=3, droppable=False, style="bold"))
    elif changed:
        parts.append(
            Part(
                ("the store changed: F5 refreshes", "changed: F5 refreshes", "changed: F5"),
                priority=3,
                droppable=False,
                style="bold",
            )
        )
    return parts


def transcript_parts(
    shown: tuple[int, int] | None, total: int, *, loaded: bool, error: str | None = None
) -> list[Part]:
    """Return the fields of the transcript's status line: which messages are on screen."""
    parts = []
    if error:
        text = render.visible(error, newlines=False)
        parts.append(Part((text,), priority=9, label="Error:", label_style="bold"))
    if shown is not None and total:
        first, last = shown[0] + 1, shown[1] + 1
        span = f"{first:,}" if first == last else f"{first:,}–{last:,}"
        of = f"{total:,}" if loaded else f"{total:,} read so far"
        parts.append(Part((f"messages {span} of {of}", f"{span} of {total:,}"), priority=6))
        parts.append(Part((f"{last * 100 // total}%",), priority=2))
    elif loaded:
        parts.append(Part(("no messages",), priority=6))
    if not loaded:
        parts.append(Part(("loading…",), priority=5))
    elif total >= TRANSCRIPT_MAX:
        parts.append(
            Part(
                (
                    f"the first {TRANSCRIPT_MAX:,}; export the session to read them all",
                    f"the first {TRANSCRIPT_MAX:,}",
                ),
                priority=4,
                droppable=False,
            )
        )
    return parts


def status_text(
    results: Results | None,
    *,
    count: MatchCount | None = None,
    counting: bool = False,
    changed: bool = False,
    busy: str = "",
    width: int | None = None,
) -> Text:
    """Return the status line (within width cells): match count, rows shown, how the search
    ran; what does not fit gets shorter or goes, least important first."""
    parts = status_parts(results, count=count, counting=counting, changed=changed, busy=busy)
    return fitted(parts, width)


# --- the command ----------------------------------------------------------------------------


PRINT_CHOICES = ("id", "resume")


def resume_line(session_id: str) -> str:
    """Return the line that resumes the session in Hermes Agent: the agent's own command line,
    `/path/to/agent/hermes --resume ID` (with -p for a named profile), not this tool's."""
    from hermes_cli.shared.agent_command import resume_command
    from hermes_state.store.home import DEFAULT_PROFILE, current_profile_name

    name = current_profile_name()
    return resume_command(session_id, None if name == DEFAULT_PROFILE else name).line


def chosen_line(session_id: str, what: str) -> str:
    """Return what the command prints for the chosen session."""
    text = resume_line(session_id) if what == "resume" else session_id
    # Exact for a pipe or $(...); a person's terminal gets control characters escaped.
    return render.visible(text, newlines=False) if output.isatty(sys.stdout) else text


def initial_filters(
    *, sources: Sequence[str], roles: Sequence[str], since: str | None, archived: bool
) -> Filters:
    """Return the filters the screen starts with: archived sessions too with --archived."""
    scope = "all" if archived else "unarchived"
    return Filters(sources=tuple(sources), roles=tuple(roles), since=since, scope=scope)


def run(
    *,
    query: str,
    sources: Sequence[str],
    roles: Sequence[str],
    since: str | None,
    archived: bool = False,
    prints: str = "id",
    vaulted: bool = False,
) -> str | None:
    """Open the store, read the first results (so a broken store fails before the screen
    starts), run the browser (the vault's sessions too when vaulted) and return the chosen
    session id (None when quit)."""
    from hermes_cli.shared import stores
    from hermes_state.store.errors import HermesStateError

    filters = initial_filters(sources=sources, roles=roles, since=since, archived=archived)
    with stores.read_store() as store:
        browser = Browser(store, vault_home=store.path.parent if vaulted else None)
        try:
            initial = browser.load(Request(0, "hits", query, filters))
            if not (output.isatty(sys.stdin) and output.isatty(sys.stderr)):
                raise HermesStateError(
                    "sessions browse needs a terminal (stdin and stderr)",
                    hint="In scripts, use hermes sessions search QUERY or hermes sessions list.",
                )
            from hermes_cli.apps.browse_app import BrowseApp

            with _terminal_size_from_the_terminal():
                # Built in here: rich reads COLUMNS/LINES when the app makes its consoles.
                chosen = BrowseApp(browser, initial=initial, prints=prints).run()
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
