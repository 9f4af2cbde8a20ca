"""Pytest plugin: a temporary HERMES_HOME for every test, and the guard-bypass marker.

Installed with the package (entry point ``pytest11``), so any project that installs hermes_state
gets it. It imports the library only when a test runs, so coverage of the library's own test run
sees every module load; ``hermes_isolation = false`` in a project's pytest ini turns it off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ISOLATION_INI = "hermes_isolation"
# The marker's name, also in hermes_state.store.guard.BYPASS_MARKER (a test checks they agree).
BYPASS_MARKER = "live_system_guard_bypass"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declare the ini switch that turns the temporary HERMES_HOME off."""
    parser.addini(
        ISOLATION_INI,
        type="bool",
        default=True,
        help="give every test a fresh temporary HERMES_HOME (hermes_state's plugin)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the live_system_guard_bypass marker."""
    config.addinivalue_line(
        "markers", f"{BYPASS_MARKER}: let this test open the real production state.db"
    )


@pytest.fixture(autouse=True)
def hermes_home(request: pytest.FixtureRequest) -> Iterator[Path | None]:
    """Give the test a fresh, empty HERMES_HOME and the live-system guard; yield that home."""
    if not request.config.getini(ISOLATION_INI):
        yield None
        return
    from hermes_state.store import guard, home

    path = request.getfixturevalue("tmp_path") / "hermes_home"
    path.mkdir()
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("HERMES_HOME", str(path))
    # Exported so subprocesses started by the test are guarded too.
    monkeypatch.setenv("HERMES_TEST_ISOLATION", "1")
    monkeypatch.delenv(guard.BYPASS_ENV, raising=False)
    token = home.set_hermes_home_override(None)
    guard.set_guard_bypass(request.node.get_closest_marker(BYPASS_MARKER) is not None)
    try:
        yield path
    finally:
        guard.set_guard_bypass(False)
        # A test that ran in another context (e.g. async) cannot reset our token; nothing leaked.
        with contextlib.suppress(ValueError):
            home.reset_hermes_home_override(token)
