"""Child processes of the tests: one environment for a python that imports this checkout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# What a terminal of the test runner's may carry that would change a child's layout or colour.
TERMINAL_VARS = ("COLUMNS", "LINES", "FORCE_COLOR")


def child_env(
    home: Path | None = None, extra: dict[str, str] | None = None, *, plain: bool = False
) -> dict[str, str]:
    """Environment for a child python importing this checkout, guarded as a test process.

    ``home`` sets HERMES_HOME (else the test's own is inherited); ``plain`` drops the terminal's
    size and colour variables so the child's layout does not depend on who runs the tests.
    """
    # HERMES_TEST_ISOLATION keeps the live-store guard on in children of module-scoped fixtures.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HERMES_TEST_ISOLATION": "1"}
    if home is not None:
        env["HERMES_HOME"] = str(home)
    if plain:
        for name in TERMINAL_VARS:
            env.pop(name, None)
    return {**env, **(extra or {})}


def hermes_argv(*args: str) -> list[str]:
    """The argv that runs `hermes ARGS` from this checkout (python -m hermes_cli)."""
    return [sys.executable, "-m", "hermes_cli", *args]
