"""`hermes watch`: snapshots of a live store (active sessions, rates, sizes, locks, ledger,
heartbeats) against the rows themselves, nothing held open between refreshes, nothing written,
the Textual view at 60/80/120 columns through its pilot, and the headless --once."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clitools import child, run

from hermes_cli.apps.watch import make_refresh
from hermes_cli.apps.watch_app import WatchApp
from hermes_cli.rendering import records
from hermes_state.records import ledger, messages, sessions
from hermes_state.reports.watch_snapshot import ACTIVE_WINDOW_S, Snapshot, WatchState, take_snapshot
from hermes_state.store.connection import is_open_in_process, open_store

NOW = time.time()
LIVE = "20261204_090000_a1b2c3"
HOSTILE_TITLE = "\x1b[31mred[/] [bold]loud[/bold] \u202eevil"
HOSTILE_BODY = "kettle \x1b]0;owned\x07 [link=http://x]click[/link] \x9b31m"


@pytest.fixture(autouse=True)
def _fresh_now() -> None:
    """Measure every test's ages from its own start (a loaded run reaches a test minutes late)."""
    global NOW
    NOW = time.time()


@pytest.fixture
def store_path(db_path: Path) -> Path:
    """A store a gateway is using: LIVE has three messages in the last minute and one older,
    s-quiet was written to two hours ago, s-new started 30 s ago (no message yet), s-hostile
    carries escape codes and markup; open ledger work; a live and a dead gateway heartbeat."""
    with open_store(db_path) as store:
        sessions.create_session(store, LIVE, "telegram", model="openai/gpt-4.1")
        sessions.set_session_title(store, LIVE, "Kettle shopping with a rather long title")
        for ago, role in ((200, "user"), (40, "user"), (20, "assistant"), (5, "user")):
            messages.append_message(store, LIVE, role, f"kettle {ago}s ago", timestamp=NOW - ago)
        sessions.create_session(store, "s-quiet", "cli", started_at=NOW - 9000)
        messages.append_message(store, "s-quiet", "user", "old", timestamp=NOW - 7200)
        sessions.create_session(store, "s-new", "discord", started_at=NOW - 30)
        sessions.create_session(store, "s-hostile", "slack", started_at=NOW - 600)
        messages.append_message(store, "s-hostile", "user", HOSTILE_BODY, timestamp=NOW - 50)
        store.write(
            lambda conn: conn.execute(
                "UPDATE sessions SET title = ? WHERE id = 's-hostile'", (HOSTILE_TITLE,)
            )
        )
        first = ledger.begin_owner_epoch(store, "gw-1")
        a1 = ledger.admit(store, LIVE, "r1", {"text": "one"})
        ledger.start(store, a1.admission_id, first)
        second = ledger.begin_owner_epoch(store, "gw-2")  # a1 is now unknown
        a2 = ledger.admit(store, "s-new", "r2", {"text": "two"})
        ledger.start(store, a2.admission_id, second)
        ledger.admit(store, "s-new", "r3", {"text": "three"})
        ledger.register_execution(store, "e1", LIVE, "cron", second)
        ledger.register_execution(store, "e2", LIVE, "child", second)
        ledger.mark_running(store, "e2", second)
        host = socket.gethostname()
        store.write(
            lambda conn: conn.executemany(
                "INSERT INTO gateway_heartbeats (backend_id, pid, started_at, last_heartbeat,"
                " profile, host) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    ("default@here:live", os.getpid(), NOW - 100, NOW - 5, "default", host),
                    ("default@here:dead", 2**22 + 7, NOW - 9000, NOW - 4000, "default", host),
                ],
            )
        )
    return db_path


def snapshot(db: Path, state: WatchState | None = None) -> Snapshot:
    """Take one snapshot the way the command does (its read-only opener)."""
    from functools import partial

    from hermes_cli.shared import stores

    return take_snapshot(db, state or WatchState(), partial(stores.read_store, db))


def open_targets() -> list[str]:
    """Return what this process's file descriptors point at."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # the descriptor listdir itself used, closed meanwhile
    return out


def _ro(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)


# --- the snapshot ---------------------------------------------------------------------------


def test_active_sessions_are_those_written_to_or_started_in_the_last_five_minutes(
    store_path: Path,
) -> None:
    view = snapshot(store_path).view
    assert view is not None
    assert [a.session_id for a in view.active] == [LIVE, "s-new", "s-hostile"]
    assert view.active_count == 3
    live = view.active[0]
    assert (live.last_role, live.last_preview, live.source) == ("user", "kettle 5s ago", "telegram")
    assert live.last_message_at == pytest.approx(NOW - 5)
    assert view.active[1].last_role is None and view.active[1].messages_last_minute == 0


def test_rates_are_the_messages_of_the_last_minute_counted_from_the_rows(
    store_path: Path,
) -> None:
    snap = snapshot(store_path)
    conn = _ro(store_path)
    since = snap.taken_at - 60
    raw = dict(
        conn.execute(
            "SELECT session_id, COUNT(*) FROM messages WHERE timestamp >= ? GROUP BY session_id",
            (since,),
        ).fetchall()
    )
    conn.close()
    assert snap.view is not None
    assert snap.view.messages_per_minute == sum(raw.values()) == 4
    assert {
        a.session_id: a.messages_last_minute for a in snap.view.active if a.session_id in raw
    } == raw


def test_a_later_snapshot_reads_only_what_was_written_since(store_path: Path) -> None:
    state = WatchState()
    first = snapshot(store_path, state)
    assert first.view is not None and state.high_id == first.view.newest_message_id
    before = state.high_id
    with open_store(store_path) as writer:  # the gateway, meanwhile
        messages.append_message(writer, "s-quiet", "user", "back again", timestamp=time.time())
    second = snapshot(store_path, state)
    assert second.view is not None and state.high_id == before + 1
    assert second.view.active[0].session_id == "s-quiet"
    assert second.view.messages_per_minute == first.view.messages_per_minute + 1


def test_sessions_fall_out_of_the_view_after_five_minutes(store_path: Path) -> None:
    state = WatchState()
    snapshot(store_path, state)
    later = take_snapshot(
        store_path, state, lambda: open_store(store_path, read_only=True), now=NOW + ACTIVE_WINDOW_S
    )
    assert later.view is not None and later.view.active == []


def test_the_ledger_counts_open_admissions_and_executions(store_path: Path) -> None:
    view = snapshot(store_path).view
    assert view is not None and view.ledger.present and view.ledger.epoch == 2
    assert view.ledger.admissions == {"queued": 1, "started": 1, "unknown": 1}
    assert view.ledger.executions == {"registered": 1, "running": 1, "unknown": 0}


def test_heartbeats_say_how_old_they_are_and_whether_the_process_lives(store_path: Path) -> None:
    view = snapshot(store_path).view
    assert view is not None
    live, dead = view.heartbeats
    assert (live.backend_id, live.stale, live.alive) == ("default@here:live", False, True)
    assert (dead.stale, dead.alive) == (True, False)
    assert live.age_s == pytest.approx(5, abs=5)


def test_files_and_lock_holders_come_from_stat_and_proc(
    store_path: Path, hold_store: Callable[..., Any]
) -> None:
    holder = hold_store(store_path, "lock")
    snap = snapshot(store_path)
    assert snap.files["db"] == os.stat(store_path).st_size > 0
    pids = {h.pid for h in snap.locks.holders}
    assert holder.proc.pid in pids
    assert os.getpid() not in pids | {o.pid for o in snap.locks.open_files}


def test_nothing_is_held_between_snapshots(store_path: Path) -> None:
    state = WatchState()
    for _ in range(3):
        snapshot(store_path, state)
        assert not is_open_in_process(store_path)
        assert not [t for t in open_targets() if t.startswith(str(store_path))]
        # A writer wanting the whole file (what a commit in rollback-journal mode needs) gets
        # it at once: no read lock of ours is left behind.
        conn = sqlite3.connect(store_path, timeout=0, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("ROLLBACK")
        conn.close()


def test_a_snapshot_never_writes(store_path: Path) -> None:
    before = [os.stat(store_path).st_mtime_ns, os.stat(store_path).st_size]
    for _ in range(3):
        snapshot(store_path)
    assert [os.stat(store_path).st_mtime_ns, os.stat(store_path).st_size] == before
    assert not Path(f"{store_path}-journal").exists()


def test_a_missing_store_is_a_snapshot_saying_so(hermes_home: Path) -> None:
    snap = snapshot(hermes_home / "state.db")
    assert snap.problem == "missing" and snap.view is None
    assert not (hermes_home / "state.db").exists()


def test_a_busy_store_is_a_snapshot_saying_so(store_path: Path, hold_store: Any) -> None:
    from functools import partial

    from hermes_cli.shared import stores, waiting

    conn = sqlite3.connect(store_path, timeout=5, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")  # a VACUUM or a commit in rollback-journal mode
    try:
        waiting.set_patience(0.2)
        snap = take_snapshot(store_path, WatchState(), partial(stores.read_store, store_path))
    finally:
        waiting.set_patience(None)
        conn.execute("ROLLBACK")
        conn.close()
    assert snap.problem == "busy" and "locked" in (snap.problem_message or "")


# --- the command, headless ------------------------------------------------------------------


def test_once_json_prints_one_snapshot_in_the_documented_shape(store_path: Path) -> None:
    result = run("watch", "--once", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["taken_at"].endswith("Z") and doc["problem"] is None
    assert doc["messages_per_minute"] == 4 and doc["active_session_count"] == 3
    assert doc["active_sessions"][0]["session_id"] == LIVE
    assert doc["active_sessions"][0]["last_message_at"].endswith("Z")
    assert doc["ledger"]["admissions"] == {"queued": 1, "started": 1, "unknown": 1}
    assert [g["stale"] for g in doc["gateways"]] == [False, True]
    assert doc["files"]["db"] == doc["total_bytes"] - sum(
        v for k, v in doc["files"].items() if k != "db"
    )
    hostile = next(a for a in doc["active_sessions"] if a["session_id"] == "s-hostile")
    assert hostile["title"] == HOSTILE_TITLE and hostile["last_preview"] == HOSTILE_BODY


def test_once_json_keys_are_the_documented_vocabulary(store_path: Path) -> None:
    doc = json.loads(run("watch", "--once", "--json").stdout)
    assert tuple(doc) == records.WATCH_KEYS


def test_once_tsv_prints_the_tidy_rows(store_path: Path) -> None:
    result = run("watch", "--once", "--format", "tsv")
    assert result.exit_code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout), delimiter="\t"))
    assert list(rows[0]) == ["taken_at", "section", "item", "metric", "value"]
    per_minute = next(r for r in rows if r["metric"] == "messages_per_minute")
    assert per_minute["value"] == "4"
    assert {r["item"] for r in rows if r["section"] == "active"} == {LIVE, "s-new", "s-hostile"}


def test_count_streams_one_json_document_per_line(store_path: Path) -> None:
    result = run("watch", "--format", "json", "--count", "3", "--interval", "0.2")
    assert result.exit_code == 0, result.stderr
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(docs) == 3 and all(d["messages_per_minute"] == 4 for d in docs)


def test_once_for_people_is_plain_text_with_escaped_stored_text(store_path: Path) -> None:
    out = run("watch", "--once").stdout
    assert "Messages/min 4" in out and "Active sessions 3" in out and LIVE in out
    assert "\x1b" not in out and "\u202e" not in out and "\x9b" not in out
    assert "\\x1b[31mred[/] [bold]loud[/bold] \\u202eevil" in out
    assert "admissions queued 1 · started 1 · unknown 1" in out
    assert all(line == line.rstrip() for line in out.splitlines())


def test_the_live_view_without_a_terminal_says_what_to_run_instead(store_path: Path) -> None:
    result = run("watch")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: hermes watch needs a terminal")
    assert "Hint: " in result.stderr and "--once" in result.stderr


def test_once_on_a_busy_store_exits_75(store_path: Path) -> None:
    conn = sqlite3.connect(store_path, timeout=5, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        result = run("--wait", "0.2", "watch", "--once", "--json")
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert result.exit_code == 75
    assert json.loads(result.stdout)["problem"]["error"] == "busy"


def test_once_without_a_store_says_so_and_creates_nothing(hermes_home: Path) -> None:
    result = run("watch", "--once", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["problem"]["error"] == "missing"
    assert not (hermes_home / "state.db").exists()


def test_bad_input_is_one_line_and_a_usage_error(store_path: Path) -> None:
    for args in (("--interval", "0"), ("--count", "0"), ("--format", "xml")):
        result = run("watch", "--once", *args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_watch_once_runs_as_a_real_process(store_path: Path) -> None:
    done = child("watch", "--once", "--format", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["active_session_count"] == 3 and doc["store_ms"] < 1000


# --- the live view, through Textual's pilot -------------------------------------------------


def drive(body: Callable[[], Any]) -> None:
    """Run an async test body to completion."""
    asyncio.run(body())


async def until(pilot: Any, condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let the app run until condition() holds (fail after timeout seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the app did not get there in time"
        await pilot.pause(0.02)


def drawn(app: WatchApp, widget_id: str) -> list[str]:
    """Return the lines a part of the view shows, as drawn at its current size."""
    from textual.geometry import Region

    widget = app.query_one(f"#{widget_id}")
    width, height = widget.size
    return [strip.text for strip in widget.render_lines(Region(0, 0, width, height))]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_view_fits_60_80_and_120_columns(store_path: Path, width: int) -> None:
    async def body() -> None:
        app = WatchApp(make_refresh(store_path), interval=0.5, profile="default")
        async with app.run_test(size=(width, 30)) as pilot:
            await until(pilot, lambda: LIVE in "\n".join(drawn(app, "sessions")))
            table = drawn(app, "sessions")
            text = "\n".join(table)
            assert LIVE in text  # an id is never cut
            assert all(
                len(line) <= width
                for part in ("summary", "sessions", "locks")
                for line in drawn(app, part)
            )
            header = "\n".join(table[:2])
            assert ("Last message" in header) is (width >= 80)
            assert ("Source" in header) is (width >= 120)
            assert "Messages/min 4" in drawn(app, "summary")[0]
            ledger_text = " ".join(drawn(app, "ledger"))
            assert "queued 1" in ledger_text and "running 1" in ledger_text
            gateways = "\n".join(drawn(app, "gateways"))
            assert "default@here:dead" in gateways and "process gone" in gateways

    drive(body)


def test_the_view_refreshes_about_every_interval_and_shows_new_messages(
    store_path: Path,
) -> None:
    async def body() -> None:
        app = WatchApp(make_refresh(store_path), interval=0.2, profile="default")
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: app.refreshes >= 1)
            with open_store(store_path) as writer:
                messages.append_message(
                    writer, "s-new", "user", "first words", timestamp=time.time()
                )
            await until(pilot, lambda: "first words" in "\n".join(drawn(app, "sessions")))
            started, count = time.monotonic(), app.refreshes
            await until(pilot, lambda: app.refreshes >= count + 3)
            assert time.monotonic() - started < 3.0
            # Between refreshes the store is not open at all.
            await until(pilot, lambda: not app._in_flight)
            assert not is_open_in_process(store_path)

    drive(body)


def test_pause_stops_refreshing_and_r_refreshes_once(store_path: Path) -> None:
    async def body() -> None:
        app = WatchApp(make_refresh(store_path), interval=0.2, profile="default")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.refreshes >= 1)
            await pilot.press("p")
            await until(pilot, lambda: not app._in_flight)
            paused_at = app.refreshes
            await pilot.pause(0.7)
            assert app.refreshes == paused_at and "PAUSED" in drawn(app, "header")[0]
            await pilot.press("r")
            await until(pilot, lambda: app.refreshes == paused_at + 1)
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running)

    drive(body)


def test_hostile_stored_text_is_shown_escaped_never_as_codes_or_markup(store_path: Path) -> None:
    async def body() -> None:
        app = WatchApp(make_refresh(store_path), interval=0.5, profile="default")
        async with app.run_test(size=(200, 30)) as pilot:
            await until(pilot, lambda: "s-hostile" in "\n".join(drawn(app, "sessions")))
            text = "\n".join(drawn(app, "sessions"))
            assert "\\x1b[31mred[/] [bold]loud[/bold] \\u202eevil" in text
            assert "\\x1b]0;owned\\x07 [link=http://x]click[/link] \\u009b31m" in text
            svg = app.export_screenshot()
            assert "\x1b" not in svg and "\x9b" not in svg and "\u202e" not in svg

    drive(body)


def test_a_missing_store_is_shown_and_the_view_keeps_going(hermes_home: Path) -> None:
    async def body() -> None:
        app = WatchApp(make_refresh(hermes_home / "state.db"), interval=0.2, profile="default")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.refreshes >= 2)
            assert "Store missing" in drawn(app, "summary")[0]

    drive(body)


def test_the_real_command_on_a_terminal_draws_the_view_and_quits_on_q(store_path: Path) -> None:
    import fcntl
    import pty
    import select
    import struct
    import subprocess
    import termios

    from support.children import child_env, hermes_argv

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    env = child_env(plain=True)
    env.pop("NO_COLOR", None)
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        hermes_argv("watch", "--interval", "0.3"),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    screen = b""
    try:
        deadline = time.monotonic() + 30
        while b"Messages/min" not in screen or LIVE.encode() not in screen:
            assert time.monotonic() < deadline and proc.poll() is None, screen[-2000:]
            if select.select([master], [], [], 0.1)[0]:
                screen += os.read(master, 1 << 16)
        os.write(master, b"q")
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        os.close(master)
    assert b"Traceback" not in screen
    assert not is_open_in_process(store_path)
