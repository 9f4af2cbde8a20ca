"""Time one operation through a real Hermes Agent release's own SessionDB (the bench's peer).

Usage: ``python peer_upstream.py OP DB_PATH [ARG...]`` under the release's interpreter, with
HERMES_HOME at the store's home. Prints one JSON line: the seconds the operation took (measured
inside this process, around the API calls only: interpreter start and the open are reported
apart) and what it returned, so the caller can compare answers. Operations:

- ``open``: open and close the store writable (what any start of the agent does to it).
- ``search QUERY REPEAT``: ``search_messages(QUERY, limit=20)``, one warm-up then REPEAT timed.
- ``list REPEAT``: ``list_sessions_rich(limit=20)``, one warm-up then REPEAT timed.
- ``append-single PAYLOAD`` / ``append-batched PAYLOAD``: PAYLOAD is a JSON list of chunks of
  messages; the first chunk is an untimed warm-up, then every message is appended with
  ``append_message`` (a transaction each), or every chunk with ``append_messages_batch``.
- ``export OUT``: ``export_all(include_inactive=True)`` written as JSON Lines.
- ``import JSONL``: every session of an export through ``import_sessions``, in the payload
  chunks the release accepts (its per-call limits); sessions over its per-session limits are
  left out and counted.
- ``prune CUTOFF``: ``prune_sessions(last_active_before=CUTOFF)`` then ``vacuum()``.
- ``serve``: open the store read-only once, then answer one JSON line per request line on
  stdin (``["search", QUERY, N]`` or ``["list", N]``: N timed calls, after one warm-up on the
  first request) until stdin closes. The caller can then alternate a few calls of its own with
  a few of the release's, so that the machine's slow spells fall on both alike.

This file runs under the release's interpreter: it must never import from this repository.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def _open(path: str, read_only: bool = False) -> Any:
    from hermes_state import SessionDB

    t0 = time.perf_counter()
    db = SessionDB(db_path=Path(path), read_only=read_only)
    return db, time.perf_counter() - t0


def _timed(fn: Any, repeat: int, warmup: bool = True) -> list[float]:
    """Return the seconds of repeat calls of fn (after one untimed call, unless warmup=False)."""
    if warmup:
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def op_open(path: str) -> dict[str, Any]:
    """Open the store writable and close it."""
    db, opened = _open(path)
    db.close()
    return {"open_s": opened}


def op_search(path: str, query: str, repeat: str) -> dict[str, Any]:
    """Time search_messages(query, limit=20) on a read-only handle."""
    db, opened = _open(path, read_only=True)
    try:
        samples = _timed(lambda: db.search_messages(query, limit=20), int(repeat))
        hits = db.search_messages(query, limit=20)
    finally:
        db.close()
    return {
        "open_s": opened,
        "samples_s": samples,
        "ids": [h.get("id") for h in hits],
        "sessions": [h.get("session_id") for h in hits],
    }


def op_list(path: str, repeat: str) -> dict[str, Any]:
    """Time list_sessions_rich(limit=20) on a read-only handle."""
    db, opened = _open(path, read_only=True)
    try:
        samples = _timed(lambda: db.list_sessions_rich(limit=20), int(repeat))
        rows = db.list_sessions_rich(limit=20)
    finally:
        db.close()
    return {"open_s": opened, "samples_s": samples, "ids": [r.get("id") for r in rows]}


_APPEND_KEYS = (
    "tool_name",
    "tool_calls",
    "tool_call_id",
    "token_count",
    "finish_reason",
    "reasoning",
    "timestamp",
    "message_uid",
)


def _append_setup(path: str, payload: str) -> tuple[Any, float, list[list[dict[str, Any]]]]:
    db, opened = _open(path)
    chunks = json.loads(Path(payload).read_text(encoding="utf-8"))
    db.create_session("bench_upstream", "cli")
    return db, opened, chunks


def op_append_single(path: str, payload: str) -> dict[str, Any]:
    """Append every message of the payload with append_message (first chunk untimed)."""
    db, opened, chunks = _append_setup(path, payload)

    def append(chunk: list[dict[str, Any]]) -> None:
        for m in chunk:
            fields = {k: m[k] for k in _APPEND_KEYS if m.get(k) is not None}
            db.append_message("bench_upstream", m["role"], m.get("content"), **fields)

    try:
        append(chunks[0])
        t0 = time.perf_counter()
        for chunk in chunks[1:]:
            append(chunk)
        seconds = time.perf_counter() - t0
    finally:
        db.close()
    return {"open_s": opened, "seconds": seconds, "messages": sum(map(len, chunks[1:]))}


def op_append_batched(path: str, payload: str) -> dict[str, Any]:
    """Append every chunk of the payload with append_messages_batch (first chunk untimed)."""
    db, opened, chunks = _append_setup(path, payload)
    try:
        db.append_messages_batch("bench_upstream", chunks[0])
        t0 = time.perf_counter()
        for chunk in chunks[1:]:
            db.append_messages_batch("bench_upstream", chunk)
        seconds = time.perf_counter() - t0
    finally:
        db.close()
    return {"open_s": opened, "seconds": seconds, "messages": sum(map(len, chunks[1:]))}


def op_export(path: str, out: str) -> dict[str, Any]:
    """Export every session (inactive rows included) as JSON Lines."""
    db, opened = _open(path, read_only=True)
    n = sessions = 0
    try:
        t0 = time.perf_counter()
        with open(out, "w", encoding="utf-8") as fh:
            for record in db.export_all(include_inactive=True):
                fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
                n += len(record.get("messages") or ())
                sessions += 1
        seconds = time.perf_counter() - t0
    finally:
        db.close()
    return {"open_s": opened, "seconds": seconds, "messages": n, "sessions": sessions}


def _payloads(db: Any, path: str) -> tuple[list[list[dict[str, Any]]], int, int]:
    """Split an export into the chunks import_sessions accepts; return them and what is left out."""
    max_sessions = db._IMPORT_MAX_SESSIONS
    max_msgs, max_total = db._IMPORT_MAX_MESSAGES_PER_SESSION, db._IMPORT_MAX_TOTAL_MESSAGES
    max_bytes, max_total_bytes = db._IMPORT_MAX_SESSION_BYTES, db._IMPORT_MAX_TOTAL_BYTES
    chunks: list[list[dict[str, Any]]] = [[]]
    msgs = size = left_sessions = left_messages = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            n = len(record.get("messages") or ())
            nbytes = len(line.encode("utf-8"))
            if n > max_msgs or nbytes > max_bytes:
                left_sessions += 1
                left_messages += n
                continue
            if (
                len(chunks[-1]) >= max_sessions
                or msgs + n > max_total
                or size + nbytes > max_total_bytes
            ):
                chunks.append([])
                msgs = size = 0
            chunks[-1].append(record)
            msgs += n
            size += nbytes
    return [c for c in chunks if c], left_sessions, left_messages


def op_import(path: str, source: str) -> dict[str, Any]:
    """Import an export file through import_sessions, chunked at the release's limits."""
    db, opened = _open(path)
    try:
        t0 = time.perf_counter()
        chunks, left_sessions, left_messages = _payloads(db, source)
        parsed = time.perf_counter() - t0
        imported = messages = 0
        errors: list[Any] = []
        for chunk in chunks:
            got = db.import_sessions(chunk)
            if not got.get("ok"):
                errors.extend(got.get("errors", [])[:3])
                continue
            imported += got.get("imported", 0)
            messages += sum(len(r.get("messages") or ()) for r in chunk)
        seconds = time.perf_counter() - t0
    finally:
        db.close()
    return {
        "open_s": opened,
        "seconds": seconds,
        "parse_s": parsed,
        "sessions": imported,
        "messages": messages,
        "calls": len(chunks),
        "left_out_sessions": left_sessions,
        "left_out_messages": left_messages,
        "errors": errors[:5],
    }


def op_prune(path: str, cutoff: str) -> dict[str, Any]:
    """Prune ended sessions idle since before cutoff, then vacuum; report sizes."""
    before = os.path.getsize(path)
    db, opened = _open(path)
    try:
        t0 = time.perf_counter()
        pruned = db.prune_sessions(older_than_days=None, last_active_before=float(cutoff))
        t1 = time.perf_counter()
        db.vacuum()
        seconds = time.perf_counter() - t0
    finally:
        db.close()
    return {
        "open_s": opened,
        "seconds": seconds,
        "prune_s": t1 - t0,
        "sessions": pruned,
        "bytes_before": before,
        "bytes_after": os.path.getsize(path),
    }


def op_serve(path: str) -> dict[str, Any]:
    """Answer timing requests on one read-only handle until stdin closes."""
    db, opened = _open(path, read_only=True)
    calls = {
        "search": lambda query: db.search_messages(query, limit=20),
        "list": lambda: db.list_sessions_rich(limit=20),
    }
    warm: set[str] = set()
    try:
        for line in sys.stdin:
            op, *args = json.loads(line)
            n = int(args.pop())
            answer: dict[str, Any] = {}
            key = json.dumps([op, *args])
            if key not in warm:  # the warm-up call also gives the answer to compare
                answer["ids"] = [r.get("id") for r in calls[op](*args)]
                warm.add(key)
            answer["samples_s"] = _timed(functools.partial(calls[op], *args), n, warmup=False)
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        db.close()
    return {"open_s": opened}


OPS = {
    "open": op_open,
    "search": op_search,
    "list": op_list,
    "append-single": op_append_single,
    "append-batched": op_append_batched,
    "export": op_export,
    "import": op_import,
    "prune": op_prune,
    "serve": op_serve,
}


def main(argv: list[str]) -> int:
    """Run one operation and print its JSON line."""
    op, args = argv[0], argv[1:]
    out = OPS[op](*args)
    out["median_s"] = statistics.median(out["samples_s"]) if out.get("samples_s") else None
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
