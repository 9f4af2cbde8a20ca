"""A raw JSON-RPC client of `hermes mcp` (a real `python -m hermes_cli mcp` subprocess), for what
the SDK's client hides: exact replies, their count, bytes on the wire, signals; and a process
that holds a store's write lock."""

from __future__ import annotations

import contextlib
import json
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support.children import child_env, hermes_argv

PROTOCOL = "2025-06-18"


class RawClient:
    """One server process and the lines it writes, read with a deadline."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            hermes_argv(*args, "mcp"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        self.lines: list[bytes] = []  # every line the server wrote, as it came
        self._buffer = b""
        self._next_id = 100
        self._unclaimed: list[dict[str, Any]] = []  # replies read while waiting for another

    def send_bytes(self, data: bytes) -> None:
        """Write raw bytes (a line, or garbage) to the server."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        """Write one JSON-RPC message as a line."""
        self.send_bytes(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        """Send a request; return its id."""
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self._next_id

    def call(self, tool: str, arguments: dict[str, Any]) -> int:
        """Send a tools/call request; return its id."""
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def read_line(self, timeout: float) -> bytes | None:
        """Return the next line the server writes (None: none within timeout, or it ended)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = self.proc.stdout.read1(1 << 20)  # type: ignore[attr-defined]
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        self.lines.append(line)
        return line

    def reply(self, id_: int | None, timeout: float = 15.0) -> dict[str, Any]:
        """Return the reply with this id, read now or earlier (answers to calls made together
        come in any order); fail on a timeout."""
        for at, message in enumerate(self._unclaimed):
            if message["id"] == id_:
                return dict(self._unclaimed.pop(at))
        deadline = time.monotonic() + timeout
        while True:
            line = self.read_line(max(0.0, deadline - time.monotonic()))
            assert line is not None, f"no reply to {id_} within {timeout} s"
            message = json.loads(line)
            if "id" not in message or "method" in message:
                continue  # a notification or a request of the server's
            if message["id"] == id_:
                return dict(message)
            self._unclaimed.append(message)

    def replies_to(self, id_: int) -> list[dict[str, Any]]:
        """Return every reply read so far to the request with this id."""
        found = [json.loads(line) for line in self.lines]
        return [m for m in found if m.get("id") == id_ and "method" not in m]

    def initialize(self) -> None:
        """Do the MCP handshake."""
        hello = {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        }
        assert "result" in self.reply(self.request("initialize", hello))
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> int:
        """Close stdin and return the exit status (killed after 15 s)."""
        with contextlib.suppress(BrokenPipeError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
            raise

    def stderr(self) -> str:
        """Return what the server wrote on stderr (after it ended)."""
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode("utf-8", "replace")


@contextlib.contextmanager
def raw_server(*args: str) -> Iterator[RawClient]:
    """Start `hermes [args] mcp`, initialized; kill it if the block leaves it running."""
    client = RawClient(*args)
    try:
        client.initialize()
        yield client
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
            client.proc.wait(timeout=5)
        for stream in (client.proc.stdin, client.proc.stdout, client.proc.stderr):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()


LOCKER = """
import select, sqlite3, sys
conn = sqlite3.connect(sys.argv[-2], isolation_level=None, timeout=5)
if conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
    conn.execute("PRAGMA locking_mode=EXCLUSIVE")  # in WAL, only this keeps readers out
conn.execute("BEGIN EXCLUSIVE")
conn.execute("UPDATE sessions SET title = title WHERE id = ''")
print("locked", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[-1]))
conn.execute("ROLLBACK")
conn.close()
"""


@contextlib.contextmanager
def write_locked(
    db: Path, seconds: float = 30.0, extra_argv: tuple[str, ...] = ()
) -> Iterator[subprocess.Popen[str]]:
    """Hold the store's write lock in another process (readers kept out) until the block ends.

    The locker runs as `python locker.py EXTRA... DB SECONDS` from a directory of its own, so
    extra_argv comes early in the command line that lock-holder reports quote (80 characters).
    """
    with tempfile.TemporaryDirectory() as where:
        (Path(where) / "locker.py").write_text(LOCKER, encoding="utf-8")
        proc = subprocess.Popen(
            [sys.executable, "locker.py", *extra_argv, str(db), str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
            cwd=where,
        )
        assert proc.stdout is not None and proc.stdin is not None
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 15)
            assert ready and proc.stdout.readline().strip() == "locked"
            yield proc
        finally:
            proc.stdin.close()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
