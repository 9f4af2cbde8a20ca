"""End-to-end runs of `python -m hermes_cli` in real subprocesses."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import ANSI_ESCAPE, child, load_sample
from support.children import child_env

from hermes_state.store import home

NEVER_AT_START = (
    "rich",
    "sqlite3",
    "_sqlite3",
    "hermes_state.agent.db",
    "hermes_state.store.connection",
    "textual",
    "hermes_cli.apps.browse",
    "hermes_cli.apps.browse_app",
    "hermes_cli.apps.browse_model",
    "hermes_cli.apps.browse_store",
    "hermes_cli.apps.browse_text",
    "hermes_cli.apps.browse_transcript",
    "hermes_cli.apps.browse_widgets",
    "hermes_cli.apps.watch_views",
    "mcp",
    "hermes_cli.mcp.mcp_server",
    "hermes_cli.mcp.mcp_tools",
    "hermes_cli.mcp.mcp_schemas",
    "hermes_cli.completion.generators",
)

MODULE_DUMP = """
import sys
sys.argv = ["hermes", *sys.argv[1:]]
from hermes_cli.main import main
try:
    main()
except SystemExit:
    pass
sys.stderr.write("\\nMODULES " + " ".join(sorted(sys.modules)) + "\\n")
"""


@pytest.fixture
def demo(hermes_home: Path) -> Path:
    """A named profile `demo` holding the sample sessions."""
    path = home.create_profile("demo")
    return load_sample(path / "state.db")


def _modules_loaded_by(*args: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", MODULE_DUMP, *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("MODULES "), proc.stderr
    return set(line.split()[1:])


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_start_up_does_not_import_rich_or_the_storage_layer(flag: str) -> None:
    loaded = _modules_loaded_by(flag)
    assert "hermes_cli.main" in loaded
    heavy = sorted(m for m in loaded if m.split(".")[0] in NEVER_AT_START or m in NEVER_AT_START)
    assert heavy == []


@pytest.mark.parametrize(
    "args",
    [("sessions", "list", "--json"), ("sessions", "search", "x"), ("sessions", "browse", "--help")],
)
def test_only_sessions_browse_itself_imports_textual(hermes_home: Path, args: tuple[str]) -> None:
    loaded = _modules_loaded_by(*args)
    assert "hermes_cli.commands.sessions" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] == "textual") == []


def test_version_prints_the_package_version() -> None:
    proc = child("--version")
    assert (proc.returncode, proc.stdout) == (0, "hermes 0.1.0\n")


@pytest.mark.parametrize(
    "args",
    [
        ["-p", "demo", "sessions", "list", "--json"],
        ["sessions", "list", "--json", "-p", "demo"],
        ["sessions", "--profile=demo", "list", "--json"],
        ["sessions", "list", "--profile", "demo", "--json"],
    ],
)
def test_profile_flag_works_anywhere_on_the_line(demo: Path, args: list[str]) -> None:
    proc = child(*args)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["total"] == 12


def test_unknown_profile_fails_with_the_create_hint(hermes_home: Path) -> None:
    proc = child("sessions", "list", "-p", "ghost")
    assert proc.returncode == 1
    assert proc.stderr == (
        "Error: Profile 'ghost' does not exist. Create it with: hermes profile create ghost\n"
    )


def test_malformed_profile_name_is_a_usage_error(hermes_home: Path) -> None:
    proc = child("-p", "../etc", "sessions", "list")
    assert proc.returncode == 2 and proc.stderr.startswith("Error: Invalid profile name")


def test_sticky_profile_is_used_without_a_flag(demo: Path) -> None:
    home.set_active_profile("demo")
    proc = child("db", "path")
    assert proc.stdout.strip() == str(demo)


def test_piped_output_is_plain_text(demo: Path) -> None:
    proc = child("-p", "demo", "sessions", "list")
    assert proc.returncode == 0
    assert ANSI_ESCAPE not in proc.stdout and "Fix Docker build" in proc.stdout


def _run_on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run hermes with stdout on a pseudo-terminal; return what it printed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hermes_cli", *args],
        stdout=slave,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=child_env(extra={"COLUMNS": "160", **env}),
    )
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def test_a_terminal_gets_colours_and_no_color_turns_them_off(demo: Path) -> None:
    env = {"TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    coloured = _run_on_a_terminal(["-p", "demo", "sessions", "search", "chat-send"], env)
    assert ANSI_ESCAPE in coloured and "chat-send" in coloured
    plain = _run_on_a_terminal(
        ["-p", "demo", "sessions", "search", "chat-send"], {**env, "NO_COLOR": "1"}
    )
    assert ANSI_ESCAPE not in plain and ">>>chat-send<<<" in plain


def test_json_output_is_only_json(demo: Path) -> None:
    proc = child("-p", "demo", "sessions", "search", "会議", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["hits"]


def test_exit_codes_for_unknown_ids_and_bad_flags(demo: Path) -> None:
    missing = child("-p", "demo", "sessions", "show", "no-such-session")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    bad = child("-p", "demo", "sessions", "list", "--limit", "many")
    assert bad.returncode == 2 and bad.stderr.startswith("Error: ")


def test_a_fresh_profile_stays_empty_on_disk(hermes_home: Path) -> None:
    fresh = home.create_profile("fresh")
    for args in (["sessions", "list"], ["sessions", "search", "x"], ["sessions", "stats"]):
        proc = child("-p", "fresh", *args)
        assert proc.returncode == 0, proc.stderr
    assert child("-p", "fresh", "sessions", "list").stdout == "No sessions yet.\n"
    assert list(fresh.iterdir()) == []


def test_warnings_go_to_a_private_errors_log_created_on_demand(hermes_home: Path) -> None:
    from hermes_state.store import journal

    if not journal.wal_reset_vulnerable():
        pytest.skip("this SQLite has the WAL-reset fix: configured WAL draws no warning")
    # WAL asked for on a SQLite with the WAL-reset bug: the store is created, with a warning.
    (hermes_home / "config.yaml").write_text("database:\n  journal_mode: wal\n")
    proc = child("db", "migrate")
    assert proc.returncode == 0, proc.stderr
    assert "WAL-reset" in proc.stderr
    log = hermes_home / "logs" / "errors.log"
    assert "WAL-reset" in log.read_text(encoding="utf-8")
    assert log.stat().st_mode & 0o777 == 0o600


def test_no_errors_log_when_nothing_is_logged(demo: Path, hermes_home: Path) -> None:
    assert child("-p", "demo", "sessions", "list").returncode == 0
    assert not (hermes_home / "logs").exists()
    assert not (demo.parent / "logs").exists()


def test_installed_console_script_runs_with_the_profile_flag_anywhere(demo: Path) -> None:
    script = Path(sys.executable).parent / "hermes"
    if not script.exists():
        pytest.skip("the hermes console script is not installed next to this interpreter")
    version = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("hermes ")
    listed = subprocess.run(
        [str(script), "sessions", "list", "--json", "-p", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["sessions"]) == 12
