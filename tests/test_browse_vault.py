"""`hermes sessions browse --vault`: vaulted sessions listed, found, previewed and opened from
their vault store (read-only), edits of them refused; the app driven by its pilot at 80
columns on real stores moved by the library, and the real command's help and screen."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clitools import child
from support.children import REPO_ROOT
from test_browse import TMUX, _sh, drive, highlight, tmux_session, type_query, until, wait_for
from textual.widgets import Input, Static
from textual.widgets._toast import Toast

from hermes_cli.apps.browse_app import BrowseApp
from hermes_cli.apps.browse_model import Filters, Request
from hermes_cli.apps.browse_store import Browser
from hermes_cli.apps.browse_transcript import TranscriptScreen
from hermes_cli.apps.browse_widgets import AskScreen, ConfirmScreen
from hermes_state.records import messages, sessions
from hermes_state.store.connection import is_open_in_process, open_store
from hermes_state.vault import vault, vault_move

NOW = time.time()
DAY = 86400.0
OLD = NOW - 400 * DAY
YEAR = vault.year_of(OLD)
MARK = f"[vault {YEAR}]"
SIZE = (80, 24)
OLD_TEXTS = ["ancient kettle recipe", "boil it twice", "then wait"]


def _old_session(store: Any, sid: str, texts: list[str], title: str | None) -> None:
    """Create an ended session last active 400 days ago (a vault move takes it)."""
    sessions.create_session(store, sid, "discord", started_at=OLD)
    rows = [{"role": "user", "content": t, "timestamp": OLD + i} for i, t in enumerate(texts)]
    messages.append_messages(store, sid, rows)
    store.write(
        lambda c: c.execute(
            "UPDATE sessions SET last_activity_at = ?, title = ? WHERE id = ?",
            (OLD + len(texts), title, sid),
        )
    )
    sessions.end_session(store, sid, "user_exit", ended_at=OLD + len(texts))


@pytest.fixture
def store_path(db_path: Path) -> Path:
    """A live session about a kettle, and two old ones moved into the vault: a titled one and
    an untitled one (its preview is its first message)."""
    with open_store(db_path) as store:
        sessions.create_session(store, "s-live", "cli", started_at=NOW - 3600)
        sessions.set_session_title(store, "s-live", "Kettle today")
        messages.append_message(store, "s-live", "user", "a new kettle", timestamp=NOW - 3600)
        _old_session(store, "s-old", OLD_TEXTS, "Old kettle notes")
        _old_session(store, "s-untitled", ["vaulted teapot question"], None)
        moved = vault_move.move_sessions(store, db_path.parent, 90)
    assert sorted(moved.session_ids) == ["s-old", "s-untitled"]
    return db_path


def vault_path(db_path: Path) -> Path:
    """Return the vault store the fixture's old sessions went to."""
    return vault.vault_dir(db_path.parent) / f"{YEAR}.db"


def digest(path: Path) -> str:
    """Hash a store file that nothing in this process has open."""
    assert not is_open_in_process(path), f"{path} is open in this process"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def counts(path: Path) -> tuple[int, int]:
    """Return a store's (sessions, messages), read through a plain read-only connection."""
    conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        n = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        m = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()
    return int(n), int(m)


@contextlib.asynccontextmanager
async def browsing(
    db_path: Path, query: str = "", *, vaulted: bool = True
) -> AsyncIterator[tuple[BrowseApp, Any, Any]]:
    """Run the app headlessly at 80 columns on a read-only store, the vault too when vaulted."""
    store = open_store(db_path, read_only=True)
    browser = Browser(store, vault_home=db_path.parent if vaulted else None)
    try:
        app = BrowseApp(browser, initial=browser.load(Request(0, "hits", query, Filters())))
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            screen: Any = app.screen
            await until(pilot, lambda: screen.results is not None and bool(screen.rows))
            yield app, pilot, screen
    finally:
        browser.close()
        store.close()


def drawn(screen: Any, session_id: str) -> str:
    """Return the list row of a session as drawn at the screen's width."""
    index = next(i for i, r in enumerate(screen.rows) if r.session_id == session_id)
    return str(screen.query_one("#list").drawn(index))


def head(screen: Any) -> str:
    """Return the preview's header line as drawn."""
    return str(screen.query_one("#preview-head", Static).render())


def toasts(app: Any) -> list[str]:
    """Return the text of the notices on screen."""
    return [str(t.render()) for t in app.screen.query(Toast)]


# --- the list and the hits ------------------------------------------------------------------


def test_without_vault_the_list_has_live_sessions_only(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path, vaulted=False) as (_app, _pilot, screen):
            assert [r.session_id for r in screen.rows] == ["s-live"]
            assert screen.results.total == 1
            assert MARK not in drawn(screen, "s-live")

    drive(body)


def test_with_vault_the_list_spans_the_vault_and_marks_vaulted_rows(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path) as (_app, pilot, screen):
            assert [r.session_id for r in screen.rows] == ["s-live", "s-old", "s-untitled"]
            assert screen.results.total == 3
            assert MARK not in drawn(screen, "s-live")
            old = drawn(screen, "s-old")
            assert "Old kettle notes" in old and MARK in old and "3 messages" in old
            # The untitled one reads as its first message, taken from the vault store.
            assert "vaulted teapot question" in drawn(screen, "s-untitled")
            await highlight(pilot, screen, lambda r: r.session_id == "s-old")
            assert MARK in head(screen) and "Old kettle notes" in head(screen)
            assert [m["content"] for m in screen.preview_messages] == OLD_TEXTS

    drive(body)


def test_with_vault_and_no_vault_yet_the_live_sessions_are_browsed(db_path: Path) -> None:
    with open_store(db_path) as store:
        sessions.create_session(store, "s-live", "cli", started_at=NOW - 3600)
        messages.append_message(store, "s-live", "user", "a kettle", timestamp=NOW - 3600)
    with open_store(db_path, read_only=True) as store:
        browser = Browser(store, vault_home=db_path.parent)
        try:
            listed = browser.load(Request(0, "hits", "", Filters()))
            found = browser.load(Request(1, "hits", "kettle", Filters()))
        finally:
            browser.close()
    assert [(r.session_id, r.vault) for r in listed.rows] == [("s-live", None)]
    assert listed.total == 1
    assert [(r.session_id, r.vault) for r in found.rows] == [("s-live", None)]
    assert not vault.vault_dir(db_path.parent).exists()


def test_a_search_finds_a_vaulted_hit_with_its_title_from_the_vault(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path, vaulted=False) as (_app, pilot, screen):
            await type_query(pilot, screen, "ancient")
            assert screen.rows == []
        async with browsing(store_path) as (_app, pilot, screen):
            await type_query(pilot, screen, "ancient")
            assert [(r.session_id, r.vault) for r in screen.rows] == [("s-old", YEAR)]
            row = drawn(screen, "s-old")
            assert "Old kettle notes" in row and MARK in row and "ancient" in row
            assert screen.count is not None and screen.count.count == 1  # counted across
            await until(pilot, lambda: screen.preview_row is screen.rows[0])
            await until(pilot, lambda: bool(screen.preview_messages))
            assert MARK in head(screen)
            assert screen.preview_messages[screen.preview_hit]["content"] == OLD_TEXTS[0]
            await pilot.press("escape")
            await until(pilot, lambda: not screen.results.request.searching)
            await type_query(pilot, screen, "kettle")
            found = {r.session_id: r.vault for r in screen.rows}
            assert found == {"s-live": None, "s-old": YEAR}

    drive(body)


def test_f3_opens_a_vaulted_transcript_read_from_its_vault_store(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path) as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-old")
            await pilot.press("f3")
            await until(pilot, lambda: isinstance(app.screen, TranscriptScreen))
            transcript: Any = app.screen
            await until(pilot, lambda: transcript.loaded)
            assert [m["content"] for m in transcript.messages] == OLD_TEXTS
            header = str(transcript.query_one("#transcript-head", Static).render())
            assert MARK in header
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is screen)

    drive(body)


# --- edits are refused, reads work ----------------------------------------------------------


@pytest.mark.parametrize("key", ["f8", "f2", "f7", "f9"])
def test_an_edit_of_a_vaulted_session_is_refused_and_nothing_changes(
    store_path: Path, key: str
) -> None:
    stored = vault_path(store_path)
    before = (digest(stored), digest(store_path), counts(stored), counts(store_path))

    async def body() -> None:
        async with browsing(store_path) as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-old")
            await pilot.press(key)
            await until(pilot, lambda: bool(screen.notices))
            assert len(app.screen_stack) == 1  # no dialog: nothing to confirm
            assert screen.notices == [
                f"s-old is in the vault ({YEAR}), read-only here:"
                " `hermes vault return s-old` brings it back."
            ]
            await until(pilot, lambda: any("hermes vault return s-old" in t for t in toasts(app)))
            assert [r.session_id for r in screen.rows] == ["s-live", "s-old", "s-untitled"]

    drive(body)
    assert (digest(stored), digest(store_path), counts(stored), counts(store_path)) == before


def test_an_edit_of_a_live_session_still_works_with_vault(store_path: Path) -> None:
    stored = vault_path(store_path)
    before = digest(stored)

    async def body() -> None:
        async with browsing(store_path) as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-live")
            await pilot.press("f7")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            await until(pilot, lambda: bool(screen.notices))
            assert screen.notices == ["Pinned s-live"]

    drive(body)
    with open_store(store_path, read_only=True) as store:
        live = sessions.get_session(store, "s-live")
    assert live is not None and live["pinned"] == 1
    assert digest(stored) == before


def test_f4_exports_a_vaulted_session_from_the_vault(store_path: Path, tmp_path: Path) -> None:
    target = tmp_path / "old.jsonl"
    stored = vault_path(store_path)
    before = digest(stored)

    async def body() -> None:
        async with browsing(store_path) as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-old")
            await pilot.press("f4")
            await until(pilot, lambda: isinstance(app.screen, AskScreen))
            app.screen.query_one("#answer", Input).value = str(target)
            await pilot.press("enter")
            await until(pilot, lambda: bool(screen.notices))
            assert screen.notices[0].startswith("Exported 3 messages to ")

    drive(body)
    records = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == ["s-old"] and records[0]["vault"] == YEAR
    assert digest(stored) == before


# --- the real command -----------------------------------------------------------------------


def test_command_help_states_the_vault_rule(hermes_home: Path) -> None:
    result = child("sessions", "browse", "--help")
    assert result.returncode == 0, result.stderr
    # Help is wrapped at 80 columns, where "read-only" may break at its hyphen.
    text = " ".join(result.stdout.split()).replace("read- only", "read-only")
    assert (
        "--vault Include vaulted sessions (marked [vault 2025]; read-only here: "
        "`hermes vault return ID` brings one back)." in text
    )
    assert "browsed only with --vault" in text


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")
def test_real_command_in_tmux_with_vault_marks_vaulted_sessions(
    store_path: Path, hermes_home: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.txt"
    env = {
        "HERMES_HOME": str(hermes_home),
        "PYTHONPATH": str(REPO_ROOT),
        "HERMES_TEST_ISOLATION": "1",
    }
    exports = " ".join(f"{k}={_sh(v)}" for k, v in env.items())
    command = (
        f"env {exports} {_sh(sys.executable)} -m hermes_cli sessions browse --vault --print-id"
        f" > {_sh(str(out))}; echo EXIT=$? >> {_sh(str(out))}"
    )
    with tmux_session(command, tmp_path / "tmux.sock", width=80, height=30) as probe:
        screen: Any = probe  # a reader with .keys(…) to type
        wait_for(screen, "3 sessions")
        # The rows' titles and marks may be drawn a moment after the count (a loaded machine).
        text = wait_for(screen, "Old kettle notes")
        assert MARK in text
        screen.keys("-l", "ancient")
        text = wait_for(screen, "1 match")
        assert MARK in text
        screen.keys("F8")
        wait_for(screen, "hermes vault return")
        screen.keys("Enter")
        wait_for(lambda: out.read_text() if out.exists() else "", "EXIT=")
    chosen, code = out.read_text().splitlines()
    assert (chosen, code) == ("s-old", "EXIT=0")
