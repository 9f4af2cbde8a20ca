"""Helpers shared by the CLI tests: run the app in-process, load the sample store, run a child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from hermes_cli.main import build_app
from hermes_state.connection import open_store
from hermes_state.home import default_db_path
from hermes_state.portability import import_sessions

REPO_ROOT = Path(__file__).resolve().parents[1]
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
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "hermes_cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        input=input if input is not None else "",
        timeout=60,
    )
