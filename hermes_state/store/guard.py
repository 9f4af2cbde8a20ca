"""Live-system guard: inside a test run, refuse to open the user's real production store."""

from __future__ import annotations

import os
from pathlib import Path

BYPASS_ENV = "HERMES_STATE_DB_GUARD_BYPASS"
BYPASS_MARKER = "live_system_guard_bypass"
# PYTEST_* mark the pytest process itself; HERMES_TEST_ISOLATION is exported for its children.
_TEST_CONTEXT_ENV = ("PYTEST_CURRENT_TEST", "PYTEST_VERSION", "HERMES_TEST_ISOLATION")

# Set by the pytest marker, for one test in this process only.
_bypass = False


def set_guard_bypass(value: bool) -> None:
    """Turn the in-process bypass on or off (the pytest marker uses this)."""
    global _bypass
    _bypass = value


def in_test_context() -> bool:
    """Tell whether this process runs under pytest or was spawned by a test."""
    return any(os.environ.get(name) for name in _TEST_CONTEXT_ENV)


def _real_user_home() -> Path:
    """Return the user's home from the account database, which tests do not patch."""
    if os.name == "nt":
        return Path(os.path.expanduser("~"))
    import pwd

    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        # A uid without a passwd entry (some containers): HOME is all there is.
        return Path(os.path.expanduser("~"))


def real_hermes_root() -> Path:
    """Return the platform default Hermes root of the real user, ignoring HOME and HERMES_HOME."""
    if os.name == "nt":
        local = os.environ.get("LOCALAPPDATA", "").strip()
        base = Path(local) if local else _real_user_home() / "AppData" / "Local"
        return base / "hermes"
    return _real_user_home() / ".hermes"


def is_production_store(path: str | os.PathLike[str]) -> bool:
    """Tell whether path is <real root>/state.db or <real root>/profiles/<name>/state.db."""
    # resolve() follows symlinks (so a link into production is caught) and creates nothing.
    target = Path(path).expanduser().resolve()
    root = real_hermes_root().resolve()
    if target.name != "state.db":
        return False
    parent = target.parent
    return parent == root or (parent.parent.name == "profiles" and parent.parent.parent == root)


def check_store_path(path: str | os.PathLike[str]) -> None:
    """Raise RuntimeError if a test is about to open a production store; call before any I/O."""
    if not in_test_context() or _bypass or os.environ.get(BYPASS_ENV):
        return
    if is_production_store(path):
        target = Path(path).expanduser().resolve()
        raise RuntimeError(
            f"live-system guard: test attempted to open production state.db at {target} "
            f"(under real Hermes root {real_hermes_root()}). Use a temporary HERMES_HOME, or mark "
            f"the test @pytest.mark.{BYPASS_MARKER} / set {BYPASS_ENV}=1 in a child that must "
            "touch production."
        )
