"""Export and import of sessions: streaming JSONL / JSON / Markdown writers and an exact import.

An export record is one session: every column of its row, plus "messages", every message row
(inactive and compacted ones included, with their flags) minus the session_id they share.
Records are produced lazily and messages are read in bounded chunks, so exporting a session of
any size keeps memory flat. Importing an export restores session ids, timestamps, message uids
and flags exactly (message row ids are assigned afresh; message_uid is a message's identity).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import queue
import re
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Generic, TypeVar, cast

from hermes_state.records import messages as msglib, session_list, sessions as seslib
from hermes_state.records.ledger import busy_message, open_work_in
from hermes_state.shapes import values
from hermes_state.shapes.text import bindable, scrub_surrogates
from hermes_state.store import bulkload
from hermes_state.store.connection import Store
from hermes_state.store.errors import HermesStateError, SessionNotFoundError
from hermes_state.store.patience import TRANSCRIPT_WRITE_PATIENCE_S
from hermes_state.store.sql import chunks, escape_like, marks, quote
from hermes_state.transfer.import_ids import (
    NO_OTHER_STORES,
    IdPlan,
    OtherStores,
    file_high_id,
    records_high_id,
    spool,
    store_high_id,
)
from hermes_state.transfer.import_target import USAGE_TABLE, Fitting, Target

SESSION_CHUNK = 500
MESSAGE_CHUNK = 2000
# Longest a read transaction of an export stays open (beside a writer on a rollback-journal
# store, the writer's commit waits for it).
READ_WINDOW_S = 0.05
WRITE_BATCH = 100
# Messages per import transaction (whole sessions, a savepoint each): a gateway waits at most
# about this long for the lock (~0.3 s here), and FTS5 indexes a batch at once (bulkload).
IMPORT_BATCH_MESSAGES = 5000
BULK_MIN_MESSAGES = 200  # smaller batches are indexed row by row, by the triggers
_READ_CHUNK = 1 << 16
ON_CONFLICT = ("skip", "replace")
# A session whose title another session here has: refused (the rest import), imported as
# "Title #2" (the next free number, as compression numbers a continuation), or left out.
ON_TITLE_CLASH = ("fail", "rename", "skip")
ELSEWHERE = "elsewhere:"  # an outcome: the session is in another store of the profile
# Message keys an import passes on to the store; "id" and "session_id" are assigned by it.
MESSAGE_KEYS = frozenset({"role", "content", *msglib.APPEND_FIELDS})
# Row ids are the target's; the display columns are derived by the agent's triggers.
_IGNORED_MESSAGE_KEYS = frozenset({"id", "session_id", "display_identity", "display_order"})
SUMMARY_FLAG = msglib.SUMMARY_COLUMN  # marks a compression summary row; set after the insert
# Counters the store maintains while inserting; an import puts the exported values back after.
_RESTORED_COUNTERS = ("message_count", "tool_call_count", "last_activity_at")
SQLITE_INT_MIN, SQLITE_INT_MAX = -(2**63), 2**63 - 1
USAGE_KEY = "model_usage"  # a session's session_model_usage rows, in an export record
AFTER_ID_KEY = "messages_after_id"  # an export of only the messages above this id
TOO_DEEP = "nested too deeply to read (a JSON value inside hundreds of levels of arrays/objects)"

Progress = Callable[[int], None]


class ExportTargetError(HermesStateError):
    """An export destination that would overwrite something or cannot be written."""

    hint = "Remove the file, choose another path, or write to stdout with -o -"


class ImportFormatError(HermesStateError):
    """An import source that is not a JSONL or JSON export at all."""

    hint = "Import files written by: hermes sessions export --format jsonl (or json)"


@dataclass
class ExportCounts:
    """How many sessions and messages a writer wrote."""

    sessions: int = 0
    messages: int = 0
    highest_id: int | None = None  # the highest message row id written (a feed's next N)

    def saw(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Note the row ids of messages written."""
        for row in rows:
            value = row.get("id")
            if isinstance(value, int) and (self.highest_id is None or value > self.highest_id):
                self.highest_id = value


@dataclass(frozen=True)
class ImportIssue:
    """One session that was not imported: its line in the file, its id if known, and why."""

    line: int
    session_id: str | None
    message: str


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


# --- export ---------------------------------------------------------------------------------


def _message_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return a decoded message row as it appears in an export (without its session_id)."""
    return {k: v for k, v in row.items() if k != "session_id"}


def _session_messages(
    store: Store, session_id: str, after_id: int = 0, upto_id: int | None = None
) -> Iterator[dict[str, Any]]:
    """Yield a session's message rows as stored, every generation, above after_id (and at
    most upto_id)."""
    return msglib.iter_stored(
        store, session_id, after_id=after_id, chunk=MESSAGE_CHUNK, upto_id=upto_id
    )


def feed_mark(store: Store) -> int:
    """Return the change feed's high-water mark: the highest message id the store has used,
    read in one snapshot.

    Every message with an id at or below it is committed (its writer finished before the
    snapshot: the store has one writer at a time), and every message committed later gets a
    higher id (``messages.id`` is AUTOINCREMENT, and an import keeps or gives ids only above
    every id used: see import_ids). So a feed that exports exactly the ids in (N, mark] and
    next starts at the mark sees every message once, however long its reads take.
    """
    with store.snapshot() as conn:
        return store_high_id(conn)


def session_record(store: Store, session_id: str) -> dict[str, Any] | None:
    """Return a session as an export carries it, or None.

    Every column the store has (and only those: another release's layout has other columns),
    the prompt texts in place of their content addresses, and the session's per-model usage
    rows under "model_usage" (when it has any).
    """
    with store.snapshot() as conn:
        row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        out = values.clean_row(dict(row))
        seslib.resolve_prompts(store, out)
        if store.columns(USAGE_TABLE):
            usage = [
                values.clean_row({k: u[k] for k in u.keys() if k != "session_id"})  # noqa: SIM118
                for u in conn.execute(
                    f"SELECT * FROM {USAGE_TABLE} WHERE session_id = ? ORDER BY rowid",
                    (session_id,),
                )
            ]
            if usage:
                out[USAGE_KEY] = usage
    return out


def export_session(store: Store, session_id: str) -> dict[str, Any]:
    """Return one session's columns plus "messages": every message row, flags included."""
    row = session_record(store, bindable(session_id))
    if row is None:
        raise SessionNotFoundError(f"No session with id {session_id}")
    return {**row, "messages": list(_session_messages(store, session_id))}


def live_messages(
    messages: Iterable[dict[str, Any]], *, include_compacted: bool, include_inactive: bool
) -> list[dict[str, Any]]:
    """Keep the live rows of exported messages (and the archive or every generation if asked)."""
    if include_inactive:
        return list(messages)
    return [m for m in messages if m.get("active", 1) or (include_compacted and m.get("compacted"))]


def _session_ids(
    store: Store,
    *,
    sources: Sequence[str],
    exclude_sources: Sequence[str],
    started_after: float | None,
    started_before: float | None,
    after_id: int | None = None,
    active_after: float | None = None,
    active_before: float | None = None,
    upto_id: int | None = None,
) -> Iterator[str]:
    """Yield matching session ids oldest first, a bounded page at a time (keyset paging)."""
    where, params = session_list.activity_filters(
        store.columns("sessions"), "sessions", active_after, active_before
    )
    if after_id is not None:
        where.append("id IN (SELECT DISTINCT session_id FROM messages WHERE id > ? AND id <= ?)")
        params += [int(after_id), msglib.SQLITE_MAX_ID if upto_id is None else int(upto_id)]
    if sources:
        where.append(f"source IN ({', '.join('?' for _ in sources)})")
        params += [bindable(s) for s in sources]
    if exclude_sources:
        where.append(f"source NOT IN ({', '.join('?' for _ in exclude_sources)})")
        params += [bindable(s) for s in exclude_sources]
    if started_after is not None:
        where.append("started_at >= ?")
        params.append(float(started_after))
    if started_before is not None:
        where.append("started_at < ?")
        params.append(float(started_before))
    last: tuple[float, str] | None = None
    while True:
        page_where = list(where)
        page_params = list(params)
        if last is not None:
            page_where.append("(started_at > ? OR (started_at = ? AND id > ?))")
            page_params += [last[0], last[0], last[1]]
        sql = "SELECT id, started_at FROM sessions"
        if page_where:
            sql += " WHERE " + " AND ".join(page_where)
        sql += " ORDER BY started_at, id LIMIT ?"
        rows = store.conn.execute(sql, [*page_params, SESSION_CHUNK]).fetchall()
        if not rows:
            return
        for r in rows:
            yield r[0]
        last = (rows[-1][1], rows[-1][0])


def _active_among(
    store: Store, ids: Iterable[str], after: float | None, before: float | None
) -> list[str]:
    """Return the named ids (in order, once each) whose last activity is in [after, before)."""
    named = list(dict.fromkeys(ids))
    if after is None and before is None:
        return named
    where, params = session_list.activity_filters(
        store.columns("sessions"), "sessions", after, before
    )
    keep: set[str] = set()
    for batch in chunks(named):
        sql = f"SELECT id FROM sessions WHERE id IN ({marks(len(batch))}) AND " + " AND ".join(
            where
        )
        keep.update(r[0] for r in store.conn.execute(sql, [*batch, *params]))
    return [sid for sid in named if sid in keep]


def export_all(
    store: Store,
    *,
    source: str | None = None,
    session_ids: Iterable[str] | None = None,
    started_after: float | None = None,
    started_before: float | None = None,
    sources: Iterable[str] | None = None,
    exclude_sources: Iterable[str] | None = None,
    after_id: int | None = None,
    active_after: float | None = None,
    active_before: float | None = None,
    upto_id: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield export records oldest first; each record's "messages" is a lazy iterator.

    source and sources keep sessions from those sources; exclude_sources leaves some out;
    started_* bound when a session started, active_* when it was last active.
    ``after_id`` makes a change feed: only the messages with a higher row id, in records of
    the sessions that have any (each marked with ``messages_after_id``), so a follower that
    keeps the highest id it has seen never reads a message twice. ``upto_id`` leaves out
    messages above it: a feed passes its mark (feed_mark, read before) so that it never
    misses one, whichever order the store's writers commit in while it reads.
    """
    wanted = [*([source] if source is not None else []), *(sources or ())]
    excluded = list(exclude_sources or ())
    if session_ids is not None:
        # Keep order, drop repeats; a named session outside the activity bounds is left out.
        ids: Iterable[str] = _active_among(store, session_ids, active_after, active_before)
    else:
        ids = _session_ids(
            store,
            sources=wanted,
            exclude_sources=excluded,
            started_after=started_after,
            started_before=started_before,
            after_id=after_id,
            active_after=active_after,
            active_before=active_before,
            upto_id=upto_id,
        )
    feed = {AFTER_ID_KEY: int(after_id)} if after_id is not None else {}
    for row, head, complete in _read_windows(
        store,
        iter(ids),
        after_id=int(after_id or 0),
        upto_id=upto_id,
        keep=None
        if session_ids is None
        else (lambda r: _matches(r, wanted, excluded, started_after, started_before)),
        strict=session_ids is not None,
    ):
        if after_id is not None and not head:
            continue  # a session named by id without new messages
        rest: Iterable[dict[str, Any]] = ()
        if not complete:
            rest = _session_messages(store, row["id"], head[-1]["id"], upto_id)
        yield {**row, **feed, "messages": itertools.chain(head, rest)}


def _read_windows(
    store: Store,
    ids: Iterator[str],
    *,
    after_id: int,
    keep: Callable[[Mapping[str, Any]], bool] | None,
    strict: bool,
    upto_id: int | None = None,
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]], bool]]:
    """Read sessions and their first messages in short read transactions; yield each session's
    record, the messages read and whether they are all of them.

    One transaction covers as many sessions as fit in MESSAGE_CHUNK messages or
    READ_WINDOW_S seconds, and ends before anything is yielded: the store is locked once per
    window instead of once per statement (beside a writer on a rollback-journal store, each
    lock can wait for the writer), and never while the consumer is busy or blocked. A session
    with more messages than fit gets the rest read lazily, a chunk per statement.
    """
    done = False
    while not done:
        window: list[tuple[dict[str, Any], list[dict[str, Any]], bool]] = []
        done = True
        with store.snapshot():
            start = time.monotonic()
            budget = MESSAGE_CHUNK
            for sid in ids:
                row = session_record(store, sid)
                if row is None:
                    if strict:
                        raise SessionNotFoundError(f"No session with id {sid}")
                    continue  # deleted while we were paging
                if keep is not None and not keep(row):
                    continue
                want = max(1, budget)
                head = msglib.stored_chunk(
                    store, sid, after_id=after_id, limit=want, upto_id=upto_id
                )
                window.append((row, head, len(head) < want))
                budget -= len(head)
                if budget <= 0 or time.monotonic() - start >= READ_WINDOW_S:
                    done = False
                    break
        yield from window


def _matches(
    row: Mapping[str, Any],
    sources: Sequence[str],
    excluded: Sequence[str],
    after: float | None,
    before: float | None,
) -> bool:
    started = row.get("started_at") or 0.0
    if sources and row.get("source") not in sources:
        return False
    if excluded and row.get("source") in excluded:
        return False
    if after is not None and started < after:
        return False
    return not (before is not None and started >= before)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"cannot export a value of type {type(value).__name__}")


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Yield lists of up to size items (itertools.batched arrives only in Python 3.12)."""
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_json_default)


def write_record(record: Mapping[str, Any], fp: IO[str], counts: ExportCounts | None = None) -> int:
    """Write one record as a single JSON object, streaming its messages; return how many.

    ``counts`` notes the highest message id written.
    """
    head = {k: v for k, v in record.items() if k != "messages"}
    text = _dumps(head)
    fp.write(text[:-1] + ("," if head else "") + '"messages":[')
    n = 0
    # Encode messages a bounded batch at a time: one dumps call per batch, memory stays flat.
    for batch in _batches(record.get("messages") or (), WRITE_BATCH):
        rows = [m if "session_id" not in m else _message_record(m) for m in batch]
        if counts is not None:
            counts.saw(rows)
        fp.write(("," if n else "") + _dumps(rows)[1:-1])
        n += len(rows)
    fp.write("]}")
    return n


def write_jsonl(
    records: Iterable[Mapping[str, Any]], fp: IO[str], *, progress: Progress | None = None
) -> ExportCounts:
    """Write records as JSON Lines, one session per line."""
    counts = ExportCounts()
    for record in records:
        counts.messages += write_record(record, fp, counts)
        fp.write("\n")
        counts.sessions += 1
        if progress is not None:
            progress(1)
    return counts


def write_json(
    records: Iterable[Mapping[str, Any]], fp: IO[str], *, progress: Progress | None = None
) -> ExportCounts:
    """Write records as one JSON array, written incrementally (one session per line)."""
    counts = ExportCounts()
    fp.write("[")
    for record in records:
        fp.write(",\n" if counts.sessions else "\n")
        counts.messages += write_record(record, fp, counts)
        counts.sessions += 1
        if progress is not None:
            progress(1)
    fp.write("\n]\n" if counts.sessions else "]\n")
    return counts


def _iso(ts: Any) -> str:
    if not isinstance(ts, int | float) or not math.isfinite(ts):
        return "—"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fence(text: str, lang: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _md_content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return _fence(json.dumps(content, ensure_ascii=False, indent=2), "json")


def _write_md_session(record: Mapping[str, Any], fp: IO[str]) -> int:
    title = record.get("title") or record.get("id")
    fp.write(f"## {title}\n\n")
    for label, key in (
        ("Session ID", "id"),
        ("Source", "source"),
        ("Model", "model"),
        ("Parent", "parent_session_id"),
    ):
        if record.get(key):
            fp.write(f"- **{label}:** `{record[key]}`\n")
    fp.write(f"- **Started:** {_iso(record.get('started_at'))}\n")
    if record.get("ended_at"):
        fp.write(f"- **Ended:** {_iso(record['ended_at'])}\n")
    fp.write("\n")
    n = 0
    for msg in record.get("messages") or ():
        n += 1
        role = str(msg.get("role") or "?").capitalize()
        if msg.get("tool_name"):
            role += f" ({msg['tool_name']})"
        state = ""
        if msg.get("compacted"):
            state = " (compacted)"
        elif not msg.get("active", 1):
            state = " (inactive)"
        fp.write(f"### {role} — {_iso(msg.get('timestamp'))}{state}\n\n")
        body = _md_content(msg.get("content"))
        if body:
            fp.write(body.rstrip("\n") + "\n\n")
        if msg.get("tool_calls"):
            calls = json.dumps(msg["tool_calls"], ensure_ascii=False, indent=2)
            fp.write(_fence(calls, "json") + "\n\n")
    return n


def write_markdown(
    records: Iterable[Mapping[str, Any]], fp: IO[str], *, progress: Progress | None = None
) -> ExportCounts:
    """Write records as a readable Markdown transcript (not importable)."""
    counts = ExportCounts()
    fp.write("# Hermes sessions export\n\n")
    for record in records:
        counts.messages += _write_md_session(record, fp)
        counts.sessions += 1
        if progress is not None:
            progress(1)
    return counts


Writer = Callable[..., ExportCounts]


def check_export_target(path: Path) -> Path:
    """Return path made absolute if an export may be written there, else raise ExportTargetError."""
    target = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    if os.fspath(path).endswith(os.sep) or target.is_dir():
        raise ExportTargetError(
            f"{target} is a directory; give the export a file name",
            hint=f"For example: -o {target / 'hermes-sessions.jsonl'}",
        )
    if target.exists() or target.is_symlink():
        raise ExportTargetError(f"Refusing to overwrite existing file {target}")
    if not target.parent.is_dir():
        raise ExportTargetError(
            f"Directory {target.parent} does not exist",
            hint="Create it first, or pick another path.",
        )
    return target


def export_to_path(
    records: Iterable[Mapping[str, Any]],
    path: Path,
    writer: Writer = write_jsonl,
    *,
    progress: Progress | None = None,
) -> ExportCounts:
    """Write records to a new file atomically (temp file, then a no-clobber link into place)."""
    target = check_export_target(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fp:
            counts = writer(records, fp, progress=progress)
            fp.flush()
            os.fsync(fp.fileno())
        try:
            # link() fails if the target appeared meanwhile: an export never clobbers a file.
            os.link(tmp, target)
        except FileExistsError:
            raise ExportTargetError(f"Refusing to overwrite existing file {target}") from None
        except OSError:
            if target.exists():
                raise ExportTargetError(f"Refusing to overwrite existing file {target}") from None
            os.replace(tmp, target)  # file systems without hard links
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return counts


# --- import: reading ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bad:
    """A record that could not even be parsed."""

    message: str


def _jsonl_records(fp: IO[str]) -> Iterator[tuple[int, Any]]:
    for line_no, line in enumerate(fp, 1):
        if not line.strip():
            continue
        try:
            yield line_no, json.loads(line)
        except ValueError as exc:
            yield line_no, _Bad(f"invalid JSON: {exc}")
        except RecursionError:
            yield line_no, _Bad(TOO_DEEP)


def _json_array_records(fp: IO[str]) -> Iterator[tuple[int, Any]]:
    """Yield the elements of a JSON array file one at a time, with the line each starts on."""
    decoder = json.JSONDecoder()
    buf, pos, line, eof = fp.read(_READ_CHUNK), 0, 1, False

    def more() -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        # Read at least as much again as is pending, so re-parsing a big element stays linear.
        chunk = fp.read(max(_READ_CHUNK, len(buf) - pos))
        if not chunk:
            eof = True
            return False
        buf, pos = buf[pos:] + chunk, 0
        return True

    def skip_space() -> bool:
        nonlocal pos, line
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                line += buf[pos] == "\n"
                pos += 1
            if pos < len(buf):
                return True
            if not more():
                return False

    if not skip_space() or buf[pos] != "[":
        yield line, _Bad("expected a JSON array")
        return
    pos += 1
    expect_value, first = True, True
    while True:
        if not skip_space():
            yield line, _Bad("unexpected end of file inside the JSON array")
            return
        ch = buf[pos]
        if ch == "]":
            if expect_value and not first:
                yield line, _Bad("trailing ',' before ']'")
            return
        if ch == ",":
            if expect_value:
                yield line, _Bad("unexpected ',' in the JSON array")
                return
            pos += 1
            expect_value = True
            continue
        if not expect_value:
            yield line, _Bad("expected ',' between array elements")
            return
        while True:
            try:
                obj, end = decoder.raw_decode(buf, pos)
                break
            except RecursionError:
                yield line, _Bad(TOO_DEEP)
                return  # where this element ends cannot be known without parsing it
            except ValueError as exc:
                if not more():
                    yield line, _Bad(f"invalid JSON: {exc}")
                    return
        yield line, obj
        line += buf.count("\n", pos, end)
        pos, expect_value, first = end, False, False


class _Prefixed:
    """A text stream read through again from its start: what was peeked, then the rest."""

    def __init__(self, head: str, rest: IO[str]) -> None:
        self._head = head
        self._rest = rest

    def read(self, size: int = -1) -> str:
        """Read up to size characters (all with -1), the peeked part first."""
        if size < 0:
            out, self._head = self._head + self._rest.read(), ""
            return out
        if self._head:
            out, self._head = self._head[:size], self._head[size:]
            return out
        return self._rest.read(size)

    def __iter__(self) -> Iterator[str]:
        """Yield lines, the first ones from the peeked part."""
        while self._head:
            line, sep, self._head = self._head.partition("\n")
            if not sep:  # the peek ended mid-line: finish the line from the stream
                yield line + self._rest.readline()
                break
            yield line + sep
        yield from self._rest


def _records(
    source: str | os.PathLike[str] | IO[str] | Iterable[Any],
) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed record or _Bad) from a JSONL/JSON file, a text stream
    (stdin), or an iterable of records."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            fp = open(path, encoding="utf-8")  # noqa: SIM115 - closed below, around a generator
        except OSError as exc:
            raise ImportFormatError(f"Cannot read {path}: {exc.strerror or exc}") from exc
        with fp:
            yield from _stream_records(fp, str(path))
    elif hasattr(source, "read"):
        yield from _stream_records(cast("IO[str]", source), "the input")
    else:
        yield from enumerate(source, 1)


def _stream_records(fp: IO[str], name: str) -> Iterator[tuple[int, Any]]:
    """Yield the records of an export read from fp (its first bytes tell JSONL from JSON)."""
    try:
        head = fp.read(_READ_CHUNK)
    except UnicodeDecodeError:
        raise ImportFormatError(f"{name} is not UTF-8 text") from None
    first = head.lstrip()[:1]
    if first and first not in "[{":
        raise ImportFormatError(
            f"{name} is not a JSONL or JSON export (it starts with {first!r})"
            + ("; Markdown exports cannot be imported" if first == "#" else "")
        )
    stream = cast("IO[str]", _Prefixed(head, fp))
    try:
        yield from (_json_array_records(stream) if first == "[" else _jsonl_records(stream))
    except UnicodeDecodeError:
        raise ImportFormatError(f"{name} is not UTF-8 text") from None


# --- import: validating ---------------------------------------------------------------------


class _Invalid(Exception):
    """A record that parses but is not a valid session."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _column_value(key: str, value: Any) -> Any:
    """Return a session or message field as SQLite can store it: nested JSON becomes JSON text,
    lone surrogates are removed; an integer SQLite cannot hold is refused."""
    if isinstance(value, dict | list):
        try:
            value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except (RecursionError, ValueError) as exc:
            raise _Invalid(f"'{key}' cannot be stored: {exc}") from None
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not SQLITE_INT_MIN <= value <= SQLITE_INT_MAX
    ):
        raise _Invalid(f"'{key}' is {value}, outside the range of a 64-bit integer")
    return scrub_surrogates(value)


def _identity(record: Mapping[str, Any], key: str) -> None:
    """Refuse an id field holding text sqlite3 cannot store (an id is never silently altered)."""
    value = record.get(key)
    if isinstance(value, str) and scrub_surrogates(value) != value:
        raise _Invalid(f"'{key}' contains a lone surrogate (text that is not valid Unicode)")


_KNOWN_MESSAGE_KEYS = MESSAGE_KEYS | _IGNORED_MESSAGE_KEYS | {SUMMARY_FLAG}
_MESSAGE_FLAGS = ("active", "compacted", "observed")


def _validate(
    record: Any, ignored: set[str]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[int], list[int] | None]:
    """Check one record's shape; return the session fields, the message dicts to insert, the
    positions of the compression summary rows among them and the messages' exported row ids
    (None unless every message has one, ascending)."""
    if not isinstance(record, Mapping):
        raise _Invalid(f"expected a JSON object (one session), got {type(record).__name__}")
    sid = record.get("id")
    if not isinstance(sid, str) or not sid:
        raise _Invalid("'id' must be a non-empty string")
    if not isinstance(record.get("source"), str) or not record["source"]:
        raise _Invalid("'source' must be a non-empty string")
    if not _is_number(record.get("started_at")):
        raise _Invalid("'started_at' must be a number (seconds since the epoch)")
    parent = record.get("parent_session_id")
    if parent is not None and not isinstance(parent, str):
        raise _Invalid("'parent_session_id' must be a string or null")
    title = record.get("title")
    if title is not None and not isinstance(title, str):
        raise _Invalid("'title' must be a string or null")
    _identity(record, "id")
    _identity(record, "parent_session_id")
    raw_messages = record.get("messages", [])
    if not isinstance(raw_messages, list):
        raise _Invalid("'messages' must be a list")
    usage = record.get(USAGE_KEY)
    if usage is not None and (
        not isinstance(usage, list) or not all(isinstance(u, Mapping) for u in usage)
    ):
        raise _Invalid(f"'{USAGE_KEY}' must be a list of objects")
    after = record.get(AFTER_ID_KEY)
    if after is not None and (not isinstance(after, int) or isinstance(after, bool)):
        raise _Invalid(f"'{AFTER_ID_KEY}' must be an integer")
    session = {
        k: _column_value(k, v) for k, v in record.items() if k not in ("messages", USAGE_KEY)
    }
    if usage:
        session[USAGE_KEY] = [
            {str(k): _column_value(f"{USAGE_KEY}.{k}", v) for k, v in u.items()} for u in usage
        ]
    if not session["source"]:
        raise _Invalid("'source' must be a non-empty string")
    out: list[dict[str, Any]] = []
    summaries: list[int] = []
    ids: list[int] | None = []
    # Runs once per message of every import: plain lookups, one pass over the values.
    for i, msg in enumerate(raw_messages):
        if not isinstance(msg, Mapping):
            raise _Invalid(f"messages[{i}] must be an object")
        get = msg.get
        if ids is not None:
            row_id = get("id")
            if (
                isinstance(row_id, int)
                and not isinstance(row_id, bool)
                and 0 < row_id <= SQLITE_INT_MAX
                and (not ids or ids[-1] < row_id)
            ):
                ids.append(row_id)
            else:
                ids = None
        role = get("role")
        if not isinstance(role, str) or not role:
            raise _Invalid(f"messages[{i}]: 'role' must be a non-empty string")
        ts = get("timestamp")
        if ts is not None and not _is_number(ts):
            raise _Invalid(f"messages[{i}]: 'timestamp' must be a number")
        uid = get("message_uid")
        if uid is not None and not isinstance(uid, str):
            raise _Invalid(f"messages[{i}]: 'message_uid' must be a string")
        for flag in _MESSAGE_FLAGS:
            value = get(flag)
            if value is not None and not isinstance(value, int):
                raise _Invalid(f"messages[{i}]: '{flag}' must be 0 or 1")
        keys = msg.keys()
        if not keys <= _KNOWN_MESSAGE_KEYS:
            ignored.update(
                f"messages.{k}" for k in keys - _KNOWN_MESSAGE_KEYS if msg[k] is not None
            )
        for k, v in msg.items():
            if isinstance(v, int) and not isinstance(v, bool):
                _column_value(f"messages[{i}].{k}", v)  # refuses what SQLite cannot hold
        if get(SUMMARY_FLAG):
            summaries.append(i)
        out.append({k: v for k, v in msg.items() if k in MESSAGE_KEYS})
    return session, out, summaries, (ids or None)


# --- import: writing ------------------------------------------------------------------------


class _Refused(Exception):
    """A session the store cannot take as it is (raised inside the write, so it rolls back)."""


def write_session(
    conn: sqlite3.Connection,
    store: Store,
    session: dict[str, Any],
    msgs: list[dict[str, Any]],
    summary_at: Sequence[int] = (),
    *,
    on_conflict: str,
    unlink_parent: bool = True,
    ids: Sequence[int] | None = None,
    target: Target | None = None,
    fitting: Fitting | None = None,
    plan: IdPlan | None = None,
    elsewhere: str | None = None,
    on_title_clash: str = "fail",
) -> str:
    """Insert (or replace) one session and its messages inside the caller's transaction.

    Returns "imported", "replaced", "appended" (a change-feed record of a session already here:
    its messages not here yet were added), "skipped" (it exists and on_conflict is "skip"),
    ELSEWHERE + where (``elsewhere`` names another store of the profile that holds it, such as
    "vault 2025", and this store does not: it is present, never made a second time),
    "title-skipped" (its title is another session's and on_title_clash is "skip") or
    "deferred" (its parent is not in the store yet and ``unlink_parent`` is false). Raises one
    of REFUSALS when the store cannot take it as it is (nothing of it is written then, once the
    caller rolls back). The record is fitted to the store's layout (``target``), and what that
    changed is counted in ``fitting``; ``ids`` are the messages' exported row ids, kept or
    renumbered by ``plan`` (see import_ids).
    """
    target = target or Target(store)
    fitting = fitting if fitting is not None else Fitting()
    plan = plan or IdPlan()
    sid = session["id"]
    exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone() is not None
    if not exists and elsewhere is not None:
        return ELSEWHERE + elsewhere
    # A change-feed record (export --after-id) carries only newer messages: it appends.
    appending = exists and session.get(AFTER_ID_KEY) is not None
    if exists and on_conflict == "skip" and not appending:
        return "skipped"
    parent = session.get("parent_session_id")
    if parent and parent != sid:
        found = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (parent,)).fetchone()
        if found is None:
            if not unlink_parent:
                return "deferred"
            session = {**session, "parent_session_id": None}
    title = session.get("title")
    if title is not None:
        holder = conn.execute(
            "SELECT id FROM sessions WHERE title = ? AND id <> ?", (title, sid)
        ).fetchone()
        if holder is not None:
            if on_title_clash == "skip" and not appending:
                return "title-skipped"
            if on_title_clash == "skip":
                # A feed's new messages still arrive; the session keeps the title it has here.
                session = {k: v for k, v in session.items() if k != "title"}
            else:
                free = _free_title(conn, title, sid)
                if on_title_clash != "rename" or free is None:
                    raise _Refused(
                        f"title {title!r} is already used by session {holder[0]} in this store"
                        + (
                            f" (--on-title-clash rename imports it as {free!r}, skip leaves it out)"
                            if free is not None
                            else ""
                        )
                    )
                session = {**session, "title": free}
                fitting.retitled.append((sid, title, free))
    usage = session.get(USAGE_KEY) or []
    row = target.session_row(conn, session, fitting)
    above = 0
    own: frozenset[int] = frozenset()
    if appending:
        given = len(msgs)
        msgs, summary_at, ids, above = _not_yet_in(conn, target, sid, msgs, summary_at, ids)
        fitting.already_there += given - len(msgs)
        if target.usage_columns:
            conn.execute(f"DELETE FROM {USAGE_TABLE} WHERE session_id = ?", (sid,))
        _update_session(conn, sid, row)
    elif exists:
        # Replacing empties the session: refused, like delete, while the gateway has work open.
        busy = open_work_in(conn, [sid])
        if busy:
            raise _Refused(busy_message(sid, busy) + "; it was not replaced")
        # The session's own ids may be given back to its messages (nobody else holds them).
        own = frozenset(
            r[0] for r in conn.execute("SELECT id FROM messages WHERE session_id = ?", (sid,))
        )
        conn.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
        if target.usage_columns:
            conn.execute(f"DELETE FROM {USAGE_TABLE} WHERE session_id = ?", (sid,))
        _update_session(conn, sid, row)
    else:
        cols = list(row)
        conn.execute(
            f"INSERT INTO sessions ({', '.join(quote(c) for c in cols)}) "
            f"VALUES ({marks(len(cols))})",
            [row[c] for c in cols],
        )
    target.count_dropped_fields(msgs, fitting)
    # A file without ids (hand-written, or an older export) has nothing to keep.
    exported = ids if ids is not None and len(ids) == len(msgs) else None
    planned = plan.ids_for(conn, exported, len(msgs), fitting, own=own, above=above)
    try:
        new_ids = msglib.insert_messages(
            conn,
            sid,
            msgs,
            columns=target.message_columns,
            ids=planned,
            activity="last_activity_at" in target.session_columns,
            as_given=True,
        )
    except (TypeError, ValueError) as exc:
        raise _Refused(f"bad message: {exc}") from exc
    target.write_usage(conn, sid, usage, fitting)
    summaries = [new_ids[i] for i in summary_at]
    if summaries:
        if SUMMARY_FLAG not in target.message_columns:
            fitting.dropped[f"messages.{SUMMARY_FLAG}"] += len(summaries)
        else:
            for part in chunks(summaries, 500):
                conn.execute(
                    f"UPDATE messages SET {SUMMARY_FLAG} = 1 WHERE id IN ({marks(len(part))})",
                    part,
                )
    restored = [c for c in _RESTORED_COUNTERS if c in row]
    if restored:
        # insert_messages counted the rows again; the exported counters are the truth.
        conn.execute(
            f"UPDATE sessions SET {', '.join(f'{c} = ?' for c in restored)} WHERE id = ?",
            [row[c] for c in restored] + [sid],
        )
    if appending:
        return "appended"
    return "replaced" if exists else "imported"


_NUMBERED = re.compile(r"^(.*) #(\d+)$")


def _free_title(conn: sqlite3.Connection, title: str, session_id: str) -> str | None:
    """Return the next free numbered title ("T" -> "T #2", "T #2" -> "T #3", as compression
    numbers a continuation), or None when it would be longer than a title may be. A session
    that already has a numbered form of the title here (an earlier import renamed it) keeps it."""
    m = _NUMBERED.match(title)
    base = m.group(1) if m else title
    mine = conn.execute("SELECT title FROM sessions WHERE id = ?", (session_id,)).fetchone()
    held = _NUMBERED.match(mine[0]) if mine is not None and isinstance(mine[0], str) else None
    if held is not None and held.group(1) == base:
        return str(mine[0])
    highest = 1
    for (held,) in conn.execute(
        "SELECT title FROM sessions WHERE title LIKE ? ESCAPE '\\'", (escape_like(base) + " #%",)
    ):
        n = _NUMBERED.match(held)
        if n and n.group(1) == base:
            highest = max(highest, int(n.group(2)))
    free = f"{base} #{highest + 1}"
    return free if len(free) <= seslib.MAX_TITLE_LENGTH else None


def _update_session(conn: sqlite3.Connection, session_id: str, row: Mapping[str, Any]) -> None:
    """Set a session's columns to the record's (its id stays)."""
    cols = [c for c in row if c != "id"]
    if cols:
        conn.execute(
            f"UPDATE sessions SET {', '.join(f'{quote(c)} = ?' for c in cols)} WHERE id = ?",
            [row[c] for c in cols] + [session_id],
        )


def _not_yet_in(
    conn: sqlite3.Connection,
    target: Target,
    session_id: str,
    msgs: list[dict[str, Any]],
    summary_at: Sequence[int],
    ids: Sequence[int] | None,
) -> tuple[list[dict[str, Any]], list[int], list[int] | None, int]:
    """Keep the messages of a change-feed record the session does not have yet.

    A message is there already when the session holds its message_uid, or (a message
    without one) a row of its id with its role, timestamp and content: an id alone may name
    another message (an earlier import renumbered the session). Returns the messages left,
    their summary positions and ids, and the session's highest id (new ids must come after it
    to keep the conversation's order).
    """
    top = conn.execute(
        "SELECT COALESCE(MAX(id), 0) FROM messages WHERE session_id = ?", (session_id,)
    ).fetchone()[0]
    with_uid = "message_uid" in target.message_columns
    uids: set[str] = set()
    if with_uid:
        uids = {
            r[0]
            for r in conn.execute(
                "SELECT message_uid FROM messages WHERE session_id = ? AND message_uid IS NOT NULL",
                (session_id,),
            )
        }
    same: dict[int, tuple[Any, ...]] = {}
    if ids is not None:
        for row in conn.execute(
            "SELECT id, role, timestamp, content FROM messages WHERE session_id = ? AND id >= ?",
            (session_id, min(ids, default=0)),
        ):
            same[row[0]] = tuple(row[1:])
    keep: list[int] = []
    for i, msg in enumerate(msgs):
        uid = msg.get("message_uid")
        if uid is not None and with_uid:
            if uid in uids:
                continue
        elif ids is not None and ids[i] in same:
            mine = (
                msg.get("role"),
                msg.get("timestamp"),
                msglib.encode_content(msg.get("content")),
            )
            if same[ids[i]] == mine:
                continue
        keep.append(i)
    position = {old: new for new, old in enumerate(keep)}
    return (
        [msgs[i] for i in keep],
        [position[i] for i in summary_at if i in position],
        [ids[i] for i in keep] if ids is not None else None,
        int(top),
    )


# What a session the store refuses raises inside its savepoint (the others still import).
REFUSALS = (_Refused, sqlite3.IntegrityError, sqlite3.InterfaceError)
_UNBINDABLE = (OverflowError, UnicodeEncodeError, RecursionError, ValueError)


@dataclass(frozen=True)
class _Pending:
    """A validated session waiting for its batch: its line, fields and messages."""

    line: int
    session: dict[str, Any]
    msgs: list[dict[str, Any]]
    summary_at: list[int]
    ids: list[int] | None


def _write_batch(
    conn: sqlite3.Connection,
    target: Target,
    batch: Sequence[_Pending],
    *,
    on_conflict: str,
    unlink_parent: bool,
    fitting: Fitting,
    before_index: Callable[[], None] | None = None,
    plan: IdPlan | None = None,
    away: Mapping[str, str] | None = None,
    on_title_clash: str = "fail",
) -> list[str | ImportIssue]:
    """Write sessions in the caller's transaction, each in a savepoint; return each outcome.

    A session the store refuses is rolled back to its savepoint (nothing of it is written) and
    reported as an ImportIssue; the others go on. With enough rows the word and substring
    indexes are filled once for the whole batch (bulkload), not row by row; before_index is
    called just before that (the import starts reading the next batch then). ``away`` names
    the sessions another store of the profile holds (see write_session's ``elsewhere``).
    """
    away = away or {}
    rows = sum(len(p.msgs) for p in batch)
    deferred = bulkload.defer_indexing(conn) if rows >= BULK_MIN_MESSAGES else None
    outcomes: list[str | ImportIssue] = []
    for p in batch:
        conn.execute("SAVEPOINT hermes_import_session")
        try:
            outcome: str | ImportIssue = write_session(
                conn,
                target.store,
                p.session,
                p.msgs,
                p.summary_at,
                on_conflict=on_conflict,
                unlink_parent=unlink_parent,
                ids=p.ids,
                target=target,
                fitting=fitting,
                plan=plan,
                elsewhere=away.get(p.session["id"]),
                on_title_clash=on_title_clash,
            )
        except REFUSALS as exc:
            conn.execute("ROLLBACK TO hermes_import_session")
            outcome = ImportIssue(p.line, p.session["id"], str(exc))
        except _UNBINDABLE as exc:
            # A value sqlite3 cannot bind: this session is refused, the others still import.
            conn.execute("ROLLBACK TO hermes_import_session")
            outcome = ImportIssue(p.line, p.session["id"], f"cannot be stored: {exc}")
        conn.execute("RELEASE hermes_import_session")
        outcomes.append(outcome)
    if before_index is not None:
        before_index()
    if deferred is not None:
        bulkload.finish(conn, deferred)
    return outcomes


def _prepared(
    source: str | os.PathLike[str] | IO[str] | Iterable[Any], ignored: set[str]
) -> Iterator[list[_Pending | ImportIssue]]:
    """Parse and check the source's records; yield them in batches of about
    IMPORT_BATCH_MESSAGES messages (a record that cannot be imported as an ImportIssue)."""
    first_line: dict[str, int] = {}
    batch: list[_Pending | ImportIssue] = []
    rows = 0
    for line, record in _records(source):
        if isinstance(record, _Bad):
            batch.append(ImportIssue(line, None, record.message))
            continue
        try:
            session, msgs, summary_at, ids = _validate(record, ignored)
        except _Invalid as exc:
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
        batch.append(_Pending(line, session, msgs, summary_at, ids))
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
        batch: list[_Pending],
        unlink: bool,
        before_index: Callable[[], None] | None,
        away: Mapping[str, str],
    ) -> tuple[list[str | ImportIssue], Fitting]:
        if not targets:  # the layout is read inside the write, where its waits are retried
            targets.append(Target(store))
        counted = Fitting()  # this attempt's: a transaction replayed after a lock counts once
        outcomes = _write_batch(
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
        batch: list[_Pending], unlink: bool, before_index: Callable[[], None] | None = None
    ) -> list[_Pending]:
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

    batches: Iterable[list[_Pending | ImportIssue]] = _prepared(source, ignored)
    ask: Callable[[], None] | None = None
    if isinstance(source, str | os.PathLike) or hasattr(source, "read"):
        # Only text this module parses is read ahead on a thread: an iterable of records may
        # hold a connection or other state tied to the caller's thread.
        ahead = _ReadAhead(iter(batches))
        batches, ask = ahead, ahead.ask
    deferred: list[_Pending] = []
    for items in batches:
        result.errors.extend(x for x in items if isinstance(x, ImportIssue))
        pending = [x for x in items if isinstance(x, _Pending)]
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
