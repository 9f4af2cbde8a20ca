"""The live-system guard refuses production stores inside tests; the plugin isolates every test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_state.store import guard, home

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_ENV = ("PYTEST_CURRENT_TEST", "PYTEST_VERSION", "HERMES_TEST_ISOLATION")
CHILD_CODE = (
    "from hermes_state.store.guard import check_store_path, real_hermes_root\n"
    "check_store_path(real_hermes_root() / 'state.db')\n"
    "print('opened')\n"
)


def existence(*paths: Path) -> list[bool]:
    """Which of paths exist, to prove the guard created nothing."""
    return [p.exists() for p in paths]


@pytest.fixture
def real_root() -> Path:
    """The real user's Hermes root (never created or written by these tests)."""
    return guard.real_hermes_root()


def child_env(**extra: str) -> dict[str, str]:
    """An environment for a child python that looks like an ordinary, non-test process."""
    env = {k: v for k, v in os.environ.items() if k not in TEST_ENV and k != guard.BYPASS_ENV}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def run_child(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run CHILD_CODE in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-c", CHILD_CODE], env=env, capture_output=True, text=True, timeout=60
    )


def test_pytest_process_is_a_test_context() -> None:
    assert guard.in_test_context()


@pytest.mark.skipif(os.name == "nt", reason="the POSIX account database decides the real home")
def test_real_root_ignores_patched_home(
    real_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert guard.real_hermes_root() == real_root
    assert not real_root.is_relative_to(tmp_path)


def test_guard_refuses_root_store(real_root: Path) -> None:
    target = real_root / "state.db"
    before = existence(real_root, target)
    with pytest.raises(RuntimeError, match="live-system guard"):
        guard.check_store_path(target)
    assert existence(real_root, target) == before


def test_guard_refuses_named_profile_store(real_root: Path) -> None:
    target = real_root / "profiles" / "x" / "state.db"
    before = existence(real_root, target.parent.parent, target.parent, target)
    with pytest.raises(RuntimeError, match="live-system guard"):
        guard.check_store_path(target)
    assert existence(real_root, target.parent.parent, target.parent, target) == before


def test_guard_message_names_path_root_and_escape_hatches(real_root: Path) -> None:
    with pytest.raises(RuntimeError) as caught:
        guard.check_store_path(real_root / "state.db")
    message = str(caught.value)
    assert str(real_root.resolve() / "state.db") in message
    assert f"under real Hermes root {real_root}" in message
    assert "@pytest.mark.live_system_guard_bypass" in message
    assert "HERMES_STATE_DB_GUARD_BYPASS=1" in message


def test_guard_allows_paths_deeper_than_a_profile(real_root: Path) -> None:
    guard.check_store_path(real_root / "profiles" / "x" / "sub" / "state.db")


def test_guard_allows_other_files_in_real_root(real_root: Path) -> None:
    guard.check_store_path(real_root / "other.db")


def test_guard_allows_temporary_stores(hermes_home: Path) -> None:
    guard.check_store_path(hermes_home / "state.db")
    guard.check_store_path(hermes_home / "profiles" / "x" / "state.db")


@pytest.mark.live_system_guard_bypass
def test_marker_lets_the_test_open_production(real_root: Path) -> None:
    guard.check_store_path(real_root / "state.db")


def test_env_bypass_lets_the_test_open_production(
    real_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(guard.BYPASS_ENV, "1")
    guard.check_store_path(real_root / "state.db")


def test_child_outside_a_test_context_is_not_guarded() -> None:
    result = run_child(child_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "opened"


def test_child_inheriting_test_isolation_is_guarded() -> None:
    result = run_child(child_env(HERMES_TEST_ISOLATION="1"))
    assert result.returncode != 0
    assert "live-system guard" in result.stderr
    assert "opened" not in result.stdout


def test_child_with_env_bypass_is_not_guarded() -> None:
    result = run_child(child_env(HERMES_TEST_ISOLATION="1", **{guard.BYPASS_ENV: "1"}))
    assert result.returncode == 0, result.stderr


# --- the pytest plugin -----------------------------------------------------------------------


def test_plugin_home_is_a_fresh_temporary_directory(
    hermes_home: Path, tmp_path: Path, real_root: Path
) -> None:
    assert os.environ["HERMES_HOME"] == str(hermes_home)
    assert home.get_hermes_home() == hermes_home
    assert hermes_home.is_relative_to(tmp_path)
    assert not hermes_home.resolve().is_relative_to(real_root.resolve())
    assert list(hermes_home.iterdir()) == []


def test_plugin_exports_isolation_and_clears_env_bypass() -> None:
    assert os.environ["HERMES_TEST_ISOLATION"] == "1"
    assert guard.BYPASS_ENV not in os.environ


def test_plugin_marker_name_is_the_guards() -> None:
    from hermes_state import pytest_plugin

    assert pytest_plugin.BYPASS_MARKER == guard.BYPASS_MARKER


def _run_pytest_project(tmp_path: Path, ini: str) -> subprocess.CompletedProcess[str]:
    """Run a one-test project in a child pytest (the plugin is loaded by its entry point)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text(f"[pytest]\n{ini}\n", encoding="utf-8")
    (project / "test_home.py").write_text(
        "import os\n"
        "def test_home():\n"
        "    print('HOME_SEEN=' + os.environ.get('HERMES_HOME', '<unset>'))\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HERMES_HOME", "PYTEST_ADDOPTS")}
    env["HERMES_HOME"] = str(tmp_path / "outer-home")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(project)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_plugin_gives_another_project_a_temporary_home(tmp_path: Path) -> None:
    proc = _run_pytest_project(tmp_path, "")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = proc.stdout.split("HOME_SEEN=")[1].split()[0]
    assert seen.endswith("hermes_home") and "outer-home" not in seen


def test_plugin_ini_opt_out_leaves_the_environment_alone(tmp_path: Path) -> None:
    proc = _run_pytest_project(tmp_path, "hermes_isolation = false")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"HOME_SEEN={tmp_path / 'outer-home'}" in proc.stdout
