"""Helpers shared by the CLI tests: run the app in-process, load the sample store, run a child."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.children import REPO_ROOT, child_env, hermes_argv
from typer.testing import CliRunner, Result

from hermes_cli.main import build_app
from hermes_state.store.connection import open_store
from hermes_state.store.home import default_db_path
from hermes_state.transfer.portability import import_sessions

SAMPLE = REPO_ROOT / "examples" / "sample-sessions.jsonl"
ANSI_ESCAPE = "\x1b["

_APP = build_app()


def run(*args: str, input: str | None = None) -> Result:
    """Run `hermes ARGS` in-process (stdout/stderr captured, stdin from input)."""
    return CliRunner().invoke(_APP, list(args), input=input)


def run_json(*args: str) -> Any:
    """Run a --json command, require exit 0, and return the parsed stdout."""
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def load_sample(db: Path | None = None) -> Path:
    """Import examples/sample-sessions.jsonl into a store (default: the test's profile)."""
    path = db or default_db_path()
    with open_store(path) as store:
        result = import_sessions(store, SAMPLE)
    assert result.ok and result.imported == 12, result
    return path


def sample_records() -> list[dict[str, Any]]:
    """Return the sample sessions as parsed records."""
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def child(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Any:
    """Run `python -m hermes_cli ARGS` in a subprocess with this checkout on PYTHONPATH."""
    return subprocess.run(
        hermes_argv(*args),
        capture_output=True,
        text=True,
        env=child_env(extra=env),
        input=input if input is not None else "",
        timeout=60,
    )


@dataclass
class PtyResult:
    """What a process run on a pseudo-terminal wrote there, and how it exited."""

    returncode: int
    output: str  # everything the terminal received (stdout and stderr), CRLF as LF


def pty_child(
    *args: str,
    columns: int = 80,
    lines: int = 50,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 60,
) -> PtyResult:
    """Run `python -m hermes_cli ARGS` with stdin/stdout/stderr on a pty of the given size."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    full_env = child_env(plain=True)
    for name in ("NO_COLOR", "PAGER", "HERMES_PAGER"):
        full_env.pop(name, None)
    full_env.update({"TERM": "xterm-256color", **(env or {})})
    proc = subprocess.Popen(
        hermes_argv(*args),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=full_env,
        close_fds=True,
    )
    os.close(slave)
    if input is not None:
        os.write(master, input.encode())
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=timeout)
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return PtyResult(proc.returncode, text)
