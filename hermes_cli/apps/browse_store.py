"""`hermes sessions browse`: the reads (hits, sessions, the preview window, transcripts, match
counts) and the edits (rename, pin, archive, delete, export) of the screen, each a library call.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_cli.apps import browse_model
from hermes_cli.apps.browse_model import BrowseError, Request, Results, Row

if TYPE_CHECKING:
    from hermes_state.search.search import MatchCount
    from hermes_state.store.connection import Store


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
        found = self._search(request, browse_model.HITS_PAGE, request.offset)
        infos = self._infos(found)
        rows = [Row(h["session_id"], infos.get(h["session_id"], {}), hit=h) for h in found]
        return Results(
            request,
            rows,
            ordering=found.ordering,
            route=found.route,
            more=len(found) == browse_model.HITS_PAGE,
            **_partial_fields(found),
        )

    def _grouped(self, request: Request) -> Results:
        """The sessions view of a query: one row per session, in the order of its best hit."""
        found = self._search(request, browse_model.GROUPED_HITS, 0)
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
                self.store,
                limit=browse_model.SESSIONS_PAGE,
                offset=request.offset,
                order="active",
                **options,
            )
            total = session_list.count_sessions(self.store, **options)
        else:
            from hermes_state.vault import vault_search

            spanned = vault_search.list_spanning(
                self.store,
                self.vault_home,
                limit=browse_model.SESSIONS_PAGE,
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
                        budget_s=browse_model.COUNT_BUDGET_S,
                        should_stop=stop,
                        **options,
                    )
                return search.count_matches(
                    self._count_store,
                    request.query,
                    budget_s=browse_model.COUNT_BUDGET_S,
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
                before=browse_model.WINDOW_BEFORE if around else 0,
                after=browse_model.WINDOW_AFTER
                if around
                else browse_model.WINDOW_BEFORE + browse_model.WINDOW_AFTER,
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
                store, session_id, include_inactive=True, chunk=browse_model.TRANSCRIPT_CHUNK
            ):
                if not (msg.get("active", 1) or msg.get("compacted")):
                    continue
                yield msg
                shown += 1
                if shown >= browse_model.TRANSCRIPT_MAX:
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
        from hermes_state.upkeep import deletion

        with _writing(self.path) as store:
            return deletion.delete_session(store, session_id)

    def export(self, session_id: str, target: str, vault: str | None = None) -> tuple[Path, int]:
        """Export one session to a new file (.md: Markdown, else JSON Lines); (path, messages).
        A vaulted session is read from the vault, its records marked with the year, as
        `hermes sessions export` writes them."""
        from hermes_state.transfer import export as export_lib
        from hermes_state.vault import vault_export

        path = Path(target).expanduser()
        writer = export_lib.write_markdown if path.suffix == ".md" else export_lib.write_jsonl
        with _reading(self.path), self._own_store() as store:
            checked = export_lib.check_export_target(path)
            if vault:
                records = vault_export.export_spanning(store, iter(()), session_ids=[session_id])
            else:
                records = export_lib.export_all(store, session_ids=[session_id])
            counts = export_lib.export_to_path(records, checked, writer)
        return checked, counts.messages


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


def request_after(results: Results) -> Request:
    """Return the request for the next page of results."""
    return replace(results.request, offset=results.request.offset + len(results.rows))
