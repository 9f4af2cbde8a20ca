"""The stdio transport of `hermes mcp`: JSON-RPC lines in and out, and an answer to every line.

The SDK's own stdio transport answers a line that is not JSON with a log notification (the
client's request waits out its timeout), a request holding a lone surrogate escape with nothing
at all, and an unknown method with -32602. Here every line is checked before the SDK sees it:
what is not a message it can handle gets the JSON-RPC error its id waits for (-32700 not JSON,
-32600 not a request, -32601 no such method). Standard input is read in a thread that a cancel
may abandon, so the server can stop while a read blocks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import typing
from collections.abc import AsyncIterator, Callable
from typing import IO, Any

import anyio
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.shared.message import SessionMessage

MAX_LINE_BYTES = 16 * 1024 * 1024  # a longer line is refused whole (its id is not read)

# Every request method the SDK's client request type knows; the server answers the ones it
# has no handler for with "Method not found" itself.
KNOWN_METHODS = frozenset(
    typing.get_args(cls.model_fields["method"].annotation)[0]
    for cls in typing.get_args(types.ClientRequestType)
)


def _error(id_: Any, code: int, message: str) -> SessionMessage:
    """Return the JSON-RPC error reply to the request with this id (None: no id was read)."""
    error = types.ErrorData(code=code, message=message)
    if isinstance(id_, bool) or not isinstance(id_, int | str):
        # A parse error, or an id that is not one: JSON-RPC answers with "id": null, which the
        # SDK's type does not allow (built unchecked; _line writes it).
        reply = types.JSONRPCError.model_construct(jsonrpc="2.0", id=None, error=error)
    else:
        reply = types.JSONRPCError(jsonrpc="2.0", id=id_, error=error)
    return SessionMessage(types.JSONRPCMessage(reply))


def _lone_surrogate(value: Any) -> str | None:
    """Return the first lone surrogate in a parsed JSON value, escaped (None: there is none)."""
    if isinstance(value, str):
        for char in value:
            if "\ud800" <= char <= "\udfff":
                return f"\\u{ord(char):04x}"
        return None
    if isinstance(value, list):
        items: Any = value
    elif isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    else:
        return None
    for item in items:
        found = _lone_surrogate(item)
        if found is not None:
            return found
    return None


def classify(line: bytes) -> SessionMessage | None:
    """Return the message a line holds, or the error reply it gets (a SessionMessage with a
    JSONRPCError); None for a blank line or a notification nobody can handle."""
    text = line.strip()
    if not text:
        return None
    if len(text) > MAX_LINE_BYTES:
        return _error(None, types.INVALID_REQUEST, "Invalid Request: the line is too long")
    try:
        value = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return _error(None, types.PARSE_ERROR, "Parse error: the line is not JSON")
    if not isinstance(value, dict):
        return _error(None, types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC object")
    id_ = value.get("id")
    surrogate = _lone_surrogate(value)
    if surrogate is not None:
        if "id" not in value:
            return None  # a notification gets no reply, not even an error
        return _error(
            id_,
            types.INVALID_REQUEST,
            f"Invalid Request: a lone surrogate ({surrogate}) is no text",
        )
    try:
        message = types.JSONRPCMessage.model_validate(value)
    except ValueError:
        if "method" in value and "id" not in value:
            return None
        return _error(id_, types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")
    root = message.root
    if isinstance(root, types.JSONRPCRequest) and root.method not in KNOWN_METHODS:
        return _error(root.id, types.METHOD_NOT_FOUND, f"Method not found: {root.method}")
    return SessionMessage(message)


@contextlib.asynccontextmanager
async def stdio_transport(
    stdin: IO[bytes], stdout: IO[str]
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[Any]]
]:
    """Yield the server's (read, write) streams over these files until stdin ends."""
    read_in: MemoryObjectSendStream[SessionMessage | Exception]
    read_out: MemoryObjectReceiveStream[SessionMessage | Exception]
    read_in, read_out = anyio.create_memory_object_stream(0)
    write_in: MemoryObjectSendStream[SessionMessage]
    write_out: MemoryObjectReceiveStream[SessionMessage]
    write_in, write_out = anyio.create_memory_object_stream(0)
    replies = write_in.clone()  # the reader's own: error replies go out with the answers
    readline: Callable[[], bytes] = stdin.readline

    async def reader() -> None:
        async with read_in, replies:
            while True:
                line = await anyio.to_thread.run_sync(readline, abandon_on_cancel=True)
                if not line:
                    return
                try:
                    message = classify(line)
                except Exception:  # a bug here must not stop the server: answer, go on
                    logging.getLogger("hermes_cli.mcp").exception("reading a request failed")
                    message = _error(None, types.INTERNAL_ERROR, "Internal error")
                if message is None:
                    continue
                if isinstance(message.message.root, types.JSONRPCError):
                    await replies.send(message)
                else:
                    await read_in.send(message)

    async def writer() -> None:
        async with write_out:
            async for message in write_out:
                await anyio.to_thread.run_sync(_write_line, stdout, _line(message))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        yield read_out, write_in


def _line(message: SessionMessage) -> str:
    """Return the JSON line of a message (an error with no id read says "id": null)."""
    root = message.message.root
    if isinstance(root, types.JSONRPCError) and root.id is None:
        error = root.error.model_dump(by_alias=True, exclude_none=True)
        return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}, separators=(",", ":"))
    return message.message.model_dump_json(by_alias=True, exclude_none=True)


def _write_line(stdout: IO[str], line: str) -> None:
    """Write one message line and flush it."""
    stdout.write(line + "\n")
    stdout.flush()
