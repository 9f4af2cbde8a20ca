"""Export of sessions: export records and streaming JSONL / JSON / Markdown writers.

An export record is one session: every column of its row, plus "messages", every message row
(inactive and compacted ones included, with their flags) minus the session_id they share.
Records are produced lazily and messages are read in bounded chunks, so exporting a session of
any size keeps memory flat. (Importing them back: :mod:`hermes_state.transfer.portability`.)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from hermes_state.records import messages as msglib, session_list, sessions as seslib
from hermes_state.shapes import values
from hermes_state.shapes.text import bindable
from hermes_state.store.connection import Store
from hermes_state.store.errors import HermesStateError, SessionNotFoundError
from hermes_state.store.sql import chunks, marks
from hermes_state.transfer.import_ids import store_high_id
from hermes_state.transfer.import_target import USAGE_TABLE

SESSION_CHUNK = 500
MESSAGE_CHUNK = 2000
# Longest a read transaction of an export stays open (beside a writer on a rollback-journal
# store, the writer's commit waits for it).
READ_WINDOW_S = 0.05
WRITE_BATCH = 100
USAGE_KEY = "model_usage"  # a session's session_model_usage rows, in an export record
AFTER_ID_KEY = "messages_after_id"  # an export of only the messages above this id

Progress = Callable[[int], None]


class ExportTargetError(HermesStateError):
    """An export destination that would overwrite something or cannot be written."""

    hint = "Remove the file, choose another path, or write to stdout with -o -"


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


# --- records ---------------------------------------------------------------------------------


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
