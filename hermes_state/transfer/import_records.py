"""Reading an import's source: parsing export files and streams, checking each record's shape.

A JSONL or JSON export (a file, or a text stream such as stdin) is parsed one record at a time,
with the line each starts on; a record is then checked (validate) before anything is written:
stored text is untrusted, and a record the store could not hold is refused here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from hermes_state.records import messages as msglib
from hermes_state.shapes.text import scrub_surrogates
from hermes_state.store.errors import HermesStateError
from hermes_state.transfer.export import AFTER_ID_KEY, USAGE_KEY

_READ_CHUNK = 1 << 16
# Message keys an import passes on to the store; "id" and "session_id" are assigned by it.
MESSAGE_KEYS = frozenset({"role", "content", *msglib.APPEND_FIELDS})
# Row ids are the target's; the display columns are derived by the agent's triggers.
_IGNORED_MESSAGE_KEYS = frozenset({"id", "session_id", "display_identity", "display_order"})
SUMMARY_FLAG = msglib.SUMMARY_COLUMN  # marks a compression summary row; set after the insert
SQLITE_INT_MIN, SQLITE_INT_MAX = -(2**63), 2**63 - 1
TOO_DEEP = "nested too deeply to read (a JSON value inside hundreds of levels of arrays/objects)"


class ImportFormatError(HermesStateError):
    """An import source that is not a JSONL or JSON export at all."""

    hint = "Import files written by: hermes sessions export --format jsonl (or json)"


# --- import: reading ------------------------------------------------------------------------


@dataclass(frozen=True)
class Unparsed:
    """A record that could not even be parsed."""

    message: str


def _jsonl_records(fp: IO[str]) -> Iterator[tuple[int, Any]]:
    for line_no, line in enumerate(fp, 1):
        if not line.strip():
            continue
        try:
            yield line_no, json.loads(line)
        except ValueError as exc:
            yield line_no, Unparsed(f"invalid JSON: {exc}")
        except RecursionError:
            yield line_no, Unparsed(TOO_DEEP)


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
        yield line, Unparsed("expected a JSON array")
        return
    pos += 1
    expect_value, first = True, True
    while True:
        if not skip_space():
            yield line, Unparsed("unexpected end of file inside the JSON array")
            return
        ch = buf[pos]
        if ch == "]":
            if expect_value and not first:
                yield line, Unparsed("trailing ',' before ']'")
            return
        if ch == ",":
            if expect_value:
                yield line, Unparsed("unexpected ',' in the JSON array")
                return
            pos += 1
            expect_value = True
            continue
        if not expect_value:
            yield line, Unparsed("expected ',' between array elements")
            return
        while True:
            try:
                obj, end = decoder.raw_decode(buf, pos)
                break
            except RecursionError:
                yield line, Unparsed(TOO_DEEP)
                return  # where this element ends cannot be known without parsing it
            except ValueError as exc:
                if not more():
                    yield line, Unparsed(f"invalid JSON: {exc}")
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


def read_records(
    source: str | os.PathLike[str] | IO[str] | Iterable[Any],
) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed record or Unparsed) from a JSONL/JSON file, a text stream
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


class InvalidRecord(Exception):
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
            raise InvalidRecord(f"'{key}' cannot be stored: {exc}") from None
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not SQLITE_INT_MIN <= value <= SQLITE_INT_MAX
    ):
        raise InvalidRecord(f"'{key}' is {value}, outside the range of a 64-bit integer")
    return scrub_surrogates(value)


def _identity(record: Mapping[str, Any], key: str) -> None:
    """Refuse an id field holding text sqlite3 cannot store (an id is never silently altered)."""
    value = record.get(key)
    if isinstance(value, str) and scrub_surrogates(value) != value:
        raise InvalidRecord(f"'{key}' contains a lone surrogate (text that is not valid Unicode)")


_KNOWN_MESSAGE_KEYS = MESSAGE_KEYS | _IGNORED_MESSAGE_KEYS | {SUMMARY_FLAG}
_NOT_PASSED_ON = tuple(_KNOWN_MESSAGE_KEYS - MESSAGE_KEYS)  # known keys the store is not given
_MESSAGE_FLAGS = ("active", "compacted", "observed")


def validate(
    record: Any, ignored: set[str]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[int], list[int] | None]:
    """Check one record's shape; return the session fields, the message dicts to insert, the
    positions of the compression summary rows among them and the messages' exported row ids
    (None unless every message has one, ascending)."""
    if not isinstance(record, Mapping):
        raise InvalidRecord(f"expected a JSON object (one session), got {type(record).__name__}")
    sid = record.get("id")
    if not isinstance(sid, str) or not sid:
        raise InvalidRecord("'id' must be a non-empty string")
    if not isinstance(record.get("source"), str) or not record["source"]:
        raise InvalidRecord("'source' must be a non-empty string")
    if not _is_number(record.get("started_at")):
        raise InvalidRecord("'started_at' must be a number (seconds since the epoch)")
    parent = record.get("parent_session_id")
    if parent is not None and not isinstance(parent, str):
        raise InvalidRecord("'parent_session_id' must be a string or null")
    title = record.get("title")
    if title is not None and not isinstance(title, str):
        raise InvalidRecord("'title' must be a string or null")
    _identity(record, "id")
    _identity(record, "parent_session_id")
    raw_messages = record.get("messages", [])
    if not isinstance(raw_messages, list):
        raise InvalidRecord("'messages' must be a list")
    usage = record.get(USAGE_KEY)
    if usage is not None and (
        not isinstance(usage, list) or not all(isinstance(u, Mapping) for u in usage)
    ):
        raise InvalidRecord(f"'{USAGE_KEY}' must be a list of objects")
    after = record.get(AFTER_ID_KEY)
    if after is not None and (not isinstance(after, int) or isinstance(after, bool)):
        raise InvalidRecord(f"'{AFTER_ID_KEY}' must be an integer")
    session = {
        k: _column_value(k, v) for k, v in record.items() if k not in ("messages", USAGE_KEY)
    }
    if usage:
        session[USAGE_KEY] = [
            {str(k): _column_value(f"{USAGE_KEY}.{k}", v) for k, v in u.items()} for u in usage
        ]
    if not session["source"]:
        raise InvalidRecord("'source' must be a non-empty string")
    out: list[dict[str, Any]] = []
    summaries: list[int] = []
    ids: list[int] | None = []
    # Runs once per message of every import: plain lookups, one pass over the values.
    for i, msg in enumerate(raw_messages):
        if not isinstance(msg, Mapping):
            raise InvalidRecord(f"messages[{i}] must be an object")
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
            raise InvalidRecord(f"messages[{i}]: 'role' must be a non-empty string")
        ts = get("timestamp")
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int | float)):
            raise InvalidRecord(f"messages[{i}]: 'timestamp' must be a number")
        uid = get("message_uid")
        if uid is not None and not isinstance(uid, str):
            raise InvalidRecord(f"messages[{i}]: 'message_uid' must be a string")
        for flag in _MESSAGE_FLAGS:
            value = get(flag)
            if value is not None and not isinstance(value, int):
                raise InvalidRecord(f"messages[{i}]: '{flag}' must be 0 or 1")
        keys = msg.keys()
        if not keys <= _KNOWN_MESSAGE_KEYS:
            ignored.update(
                f"messages.{k}" for k in keys - _KNOWN_MESSAGE_KEYS if msg[k] is not None
            )
        for k, v in msg.items():
            # bool is an int, always in range: the name of the field is made only for a refusal.
            if isinstance(v, int) and not SQLITE_INT_MIN <= v <= SQLITE_INT_MAX:
                _column_value(f"messages[{i}].{k}", v)  # refuses what SQLite cannot hold
        if get(SUMMARY_FLAG):
            summaries.append(i)
        # A copy without the known keys the store is not given (a C-level copy and a few pops
        # cost less than a comprehension); unknown keys, when there are any, are left out too.
        kept = dict(msg)
        for k in _NOT_PASSED_ON:
            kept.pop(k, None)
        if not kept.keys() <= MESSAGE_KEYS:
            kept = {k: v for k, v in kept.items() if k in MESSAGE_KEYS}
        out.append(kept)
    return session, out, summaries, (ids or None)
