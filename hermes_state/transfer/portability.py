"""Import of export files: an exact import, streamed in batches, of what export wrote.

Importing an export restores session ids, timestamps, message uids and flags exactly (message
row ids are kept where nothing else holds them; message_uid is a message's identity). The
source is read (import_records) on a helper thread while a batch is written (import_write).
"""

from __future__ import annotations

import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Generic, TypeVar, cast

from hermes_state.store.connection import Store
from hermes_state.store.patience import TRANSCRIPT_WRITE_PATIENCE_S
from hermes_state.transfer.export import AFTER_ID_KEY, Progress
from hermes_state.transfer.import_ids import (
    NO_OTHER_STORES,
    IdPlan,
    OtherStores,
    file_high_id,
    records_high_id,
    spool,
)
from hermes_state.transfer.import_records import (
    ImportFormatError,
    InvalidRecord,
    Unparsed,
    read_records,
    validate,
)
from hermes_state.transfer.import_target import Fitting, Target
from hermes_state.transfer.import_write import (
    ELSEWHERE,
    ON_CONFLICT,
    ON_TITLE_CLASH,
    ImportIssue,
    Pending,
    write_batch,
)

# Messages per import transaction (whole sessions, a savepoint each): a gateway waits at most
# about this long for the lock (~0.3 s here), and FTS5 indexes a batch at once (bulkload).
IMPORT_BATCH_MESSAGES = 5000


@dataclass
class ImportResult:
    """What an import did: sessions imported, replaced and skipped, messages written, problems."""

    imported: int = 0
    replaced: int = 0
    appended: int = 0  # change-feed records of sessions already here: their new messages added
    skipped: int = 0
    messages: int = 0
    already_there: int = 0  # messages of change-feed records this store had already
    kept_ids: int = 0  # messages that kept their exported row id
    renumbered: int = 0  # messages given a new id (see import_ids for the rule)
    elsewhere: dict[str, int] = field(default_factory=dict)  # skipped: in "vault 2025", ...
    retitled: int = 0  # sessions imported as "Title #2" (on_title_clash="rename")
    title_skipped: int = 0  # sessions left out for their title (on_title_clash="skip")
    usage_rows: int = 0
    errors: list[ImportIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every session in the source was imported or deliberately skipped."""
        return not self.errors


def _prepared(
    source: str | os.PathLike[str] | IO[str] | Iterable[Any], ignored: set[str]
) -> Iterator[list[Pending | ImportIssue]]:
    """Parse and check the source's records; yield them in batches of about
    IMPORT_BATCH_MESSAGES messages (a record that cannot be imported as an ImportIssue)."""
    first_line: dict[str, int] = {}
    batch: list[Pending | ImportIssue] = []
    rows = 0
    for line, record in read_records(source):
        if isinstance(record, Unparsed):
            batch.append(ImportIssue(line, None, record.message))
            continue
        try:
            session, msgs, summary_at, ids = validate(record, ignored)
        except InvalidRecord as exc:
            sid = record.get("id") if isinstance(record, Mapping) else None
            batch.append(ImportIssue(line, sid if isinstance(sid, str) else None, str(exc)))
            continue
        sid = session["id"]
        if sid in first_line:
            # The same id twice in one file is a malformed export, not a conflict with the store.
            batch.append(
                ImportIssue(
                    line,
                    sid,
                    f"session {sid} appears twice in this file "
                    f"(first on line {first_line[sid]}); this line was not imported",
                )
            )
            continue
        first_line[sid] = line
        batch.append(Pending(line, session, msgs, summary_at, ids))
        rows += len(msgs) + 1
        if rows >= IMPORT_BATCH_MESSAGES:
            yield batch
            batch, rows = [], 0
    if batch:
        yield batch


_T = TypeVar("_T")


class _ReadAhead(Generic[_T]):
    """Iterate items produced on a helper thread, one at a time and only when asked.

    The import asks for the next batch just before it runs a batch's long index statements:
    parsing (Python, which holds the GIL) then overlaps SQLite work that releases it. The
    helper never runs while the writer makes its many short calls: a thread holding the GIL
    would make each of them wait for it (CPython's switch interval), which costs more than
    the overlap gains. An exception of the items is raised in the caller's thread.
    """

    def __init__(self, items: Iterator[_T]) -> None:
        self._items = items
        self._wanted = threading.Semaphore(0)
        self._box: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self._asked = self._stopped = False
        self._thread: threading.Thread | None = None

    def ask(self) -> None:
        """Start producing the next item (nothing when it is already being produced)."""
        if self._asked or self._stopped:
            return
        self._asked = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hermes-import-reader")
            self._thread.daemon = True
            self._thread.start()
        self._wanted.release()

    def _run(self) -> None:
        try:
            while True:
                self._wanted.acquire()
                if self._stopped:
                    return
                try:
                    item = next(self._items)
                except StopIteration:
                    self._box.put((False, None))
                    return
                except BaseException as exc:  # raised again in the caller's thread
                    self._box.put((False, exc))
                    return
                self._box.put((True, item))
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[_T]:
        """Yield the items in order, each produced on the helper thread."""
        try:
            while True:
                self.ask()
                more, item = self._box.get()
                self._asked = False
                if more:
                    yield item
                elif item is None:
                    return
                else:
                    raise item
        finally:
            self._stopped = True
            self._wanted.release()


def import_sessions(
    store: Store,
    source: str | os.PathLike[str] | IO[str] | Iterable[Mapping[str, Any]],
    *,
    on_conflict: str = "skip",
    progress: Progress | None = None,
    on_title_clash: str = "fail",
    others: OtherStores = NO_OTHER_STORES,
) -> ImportResult:
    """Import export records (a JSONL/JSON file, a text stream such as stdin, or a list).

    Each session is all or nothing: a record that is malformed, or that the store refuses, is
    reported with its line number and nothing of it is written; the others are imported.
    Sessions are written in batches of about IMPORT_BATCH_MESSAGES messages, one transaction
    each (a savepoint per session), so an interrupted import leaves whole sessions only, and
    running it again (on_conflict="skip") imports the rest. ``others`` are the profile's other
    stores (its vault): a session one of them holds is present, and their message ids are
    never reused. A stream is first copied to an anonymous temporary file beside the store:
    which ids it holds must be known before the first is written (see import_ids).
    """
    if on_conflict not in ON_CONFLICT:
        raise ValueError(f"on_conflict must be one of {ON_CONFLICT}, not {on_conflict!r}")
    if on_title_clash not in ON_TITLE_CLASH:
        raise ValueError(f"on_title_clash must be one of {ON_TITLE_CLASH}, not {on_title_clash!r}")
    with contextlib.ExitStack() as stack:
        if isinstance(source, str | os.PathLike):
            file_high = file_high_id(source)
        elif hasattr(source, "read"):
            stream = cast("IO[str]", source)
            try:
                copied, file_high = spool(stream, store.path.parent)
            except UnicodeDecodeError:
                raise ImportFormatError("the input is not UTF-8 text") from None
            except OSError as exc:
                raise ImportFormatError(
                    f"Cannot copy the input beside the store in {store.path.parent}: "
                    f"{exc.strerror or exc}",
                    hint="Free space there, or save the export to a file and import that file",
                ) from None
            source = stack.enter_context(copied)
        else:
            source = list(source)
            file_high = records_high_id(source)
        return _import(
            store,
            source,
            on_conflict=on_conflict,
            progress=progress,
            on_title_clash=on_title_clash,
            others=others,
            plan=IdPlan(others, file_high),
        )


def _import(
    store: Store,
    source: str | os.PathLike[str] | IO[str] | list[Any],
    *,
    on_conflict: str,
    progress: Progress | None,
    on_title_clash: str,
    others: OtherStores,
    plan: IdPlan,
) -> ImportResult:
    """Import the records of source (see import_sessions) with the ids plan gives."""
    result = ImportResult()
    ignored: set[str] = set()
    fitting = Fitting()
    targets: list[Target] = []
    not_replaced: list[str] = []
    feeds_away: list[str] = []
    title_skips: list[str] = []

    def in_transaction(
        conn: sqlite3.Connection,
        batch: list[Pending],
        unlink: bool,
        before_index: Callable[[], None] | None,
        away: Mapping[str, str],
    ) -> tuple[list[str | ImportIssue], Fitting]:
        if not targets:  # the layout is read inside the write, where its waits are retried
            targets.append(Target(store))
        counted = Fitting()  # this attempt's: a transaction replayed after a lock counts once
        outcomes = write_batch(
            conn,
            targets[0],
            batch,
            on_conflict=on_conflict,
            unlink_parent=unlink,
            fitting=counted,
            before_index=before_index,
            plan=plan,
            away=away,
            on_title_clash=on_title_clash,
        )
        return outcomes, counted

    def write(
        batch: list[Pending], unlink: bool, before_index: Callable[[], None] | None = None
    ) -> list[Pending]:
        """Write a batch in one transaction; record the outcomes; return the deferred ones."""
        if not batch:
            return []
        # Read before the write: the live store is not locked while the vault is looked up.
        away = (
            others.where([p.session["id"] for p in batch]) if others is not NO_OTHER_STORES else {}
        )
        outcomes, counted = store.write(
            lambda conn: in_transaction(conn, batch, unlink, before_index, away),
            patience=TRANSCRIPT_WRITE_PATIENCE_S,
        )
        fitting.add(counted)
        waiting = []
        for p, outcome in zip(batch, outcomes, strict=True):
            if outcome == "deferred":
                waiting.append(p)
                continue
            if isinstance(outcome, ImportIssue):
                result.errors.append(outcome)
            elif outcome == "skipped":
                result.skipped += 1
            elif outcome.startswith(ELSEWHERE):
                where = outcome.removeprefix(ELSEWHERE)
                result.skipped += 1
                result.elsewhere[where] = result.elsewhere.get(where, 0) + 1
                if p.session.get(AFTER_ID_KEY) is not None and p.msgs:
                    feeds_away.append(f"{p.session['id']} ({where})")
                elif on_conflict == "replace":
                    not_replaced.append(f"{p.session['id']} ({where})")
            elif outcome == "title-skipped":
                result.title_skipped += 1
                title_skips.append(f"line {p.line}: {p.session['id']} ({p.session['title']!r})")
            else:
                result.imported += outcome == "imported"
                result.replaced += outcome == "replaced"
                result.appended += outcome == "appended"
                result.messages += len(p.msgs)
                if unlink:
                    result.warnings.append(
                        f"line {p.line}: parent session {p.session['parent_session_id']} of "
                        f"{p.session['id']} is not in this store; imported without the link"
                    )
            if progress is not None:
                progress(1)
        return waiting

    batches: Iterable[list[Pending | ImportIssue]] = _prepared(source, ignored)
    ask: Callable[[], None] | None = None
    if isinstance(source, str | os.PathLike) or hasattr(source, "read"):
        # Only text this module parses is read ahead on a thread: an iterable of records may
        # hold a connection or other state tied to the caller's thread.
        ahead = _ReadAhead(iter(batches))
        batches, ask = ahead, ahead.ask
    deferred: list[Pending] = []
    for items in batches:
        result.errors.extend(x for x in items if isinstance(x, ImportIssue))
        pending = [x for x in items if isinstance(x, Pending)]
        deferred += write(pending, unlink=False, before_index=ask)
    # Children whose parent came later in the file: retry while that makes progress.
    while deferred:
        waiting = write(deferred, unlink=False)
        if len(waiting) == len(deferred):
            write(waiting, unlink=True)
            break
        deferred = waiting
    result.errors.sort(key=lambda issue: issue.line)
    if ignored:
        result.warnings.append(
            "fields this hermes does not know were ignored: " + ", ".join(sorted(ignored))
        )
    result.warnings.extend(fitting.notes())
    result.warnings.extend(_elsewhere_notes(not_replaced, feeds_away, title_skips))
    result.retitled = len(fitting.retitled)
    result.kept_ids, result.renumbered = fitting.kept_ids, fitting.renumbered
    result.messages -= fitting.already_there
    result.already_there = fitting.already_there
    result.usage_rows = fitting.usage_rows
    return result


def _listed(items: Sequence[str], most: int = 5) -> str:
    """Return up to most items joined, then how many more there are."""
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more


def _elsewhere_notes(
    not_replaced: Sequence[str], feeds_away: Sequence[str], title_skips: Sequence[str]
) -> list[str]:
    """Say what an import left as it was: vaulted sessions, and titles used here."""
    out = []
    if not_replaced:
        out.append(
            f"{len(not_replaced)} session(s) are in this profile's vault and were not replaced "
            f"(`hermes vault return ID` first to replace one): {_listed(not_replaced)}"
        )
    if feeds_away:
        out.append(
            f"{len(feeds_away)} change-feed record(s) are for sessions in this profile's vault; "
            "their messages were not added (`hermes vault return ID`, then import again, adds "
            f"any the vault copy lacks): {_listed(feeds_away)}"
        )
    if title_skips:
        out.append(
            f"{len(title_skips)} session(s) were not imported because another session here has "
            f"their title (--on-title-clash rename imports them numbered): {_listed(title_skips)}"
        )
    return out
