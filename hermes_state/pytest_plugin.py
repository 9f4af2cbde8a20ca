"""Pytest plugin: a temporary HERMES_HOME for every test, and the guard-bypass marker."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_state import guard, home


def pytest_configure(config: pytest.Config) -> None:
    """Register the live_system_guard_bypass marker."""
    config.addinivalue_line(
        "markers",
        f"{guard.BYPASS_MARKER}: let this test open the real production state.db",
    )


@pytest.fixture(autouse=True)
def hermes_home(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Give the test a fresh, empty HERMES_HOME and the live-system guard; yield that home."""
    path = tmp_path / "hermes_home"
    path.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(path))
    # Exported so subprocesses started by the test are guarded too.
    monkeypatch.setenv("HERMES_TEST_ISOLATION", "1")
    monkeypatch.delenv(guard.BYPASS_ENV, raising=False)
    token = home.set_hermes_home_override(None)
    guard.set_guard_bypass(request.node.get_closest_marker(guard.BYPASS_MARKER) is not None)
    try:
        yield path
    finally:
        guard.set_guard_bypass(False)
        # A test that ran in another context (e.g. async) cannot reset our token; nothing leaked.
        with contextlib.suppress(ValueError):
            home.reset_hermes_home_override(token)
