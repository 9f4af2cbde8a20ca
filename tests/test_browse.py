"""`hermes sessions browse`: the Textual app driven headlessly (its pilot) on real stores, the
command's errors before the screen starts, and the real command on a tmux pseudo-terminal."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from clitools import REPO_ROOT, load_sample, run
from textual import events

from hermes_cli.apps import browse, browse_model, browse_text
from hermes_cli.apps.browse_app import BrowseApp
from hermes_cli.apps.browse_model import Filters, Request
from hermes_cli.apps.browse_store import Browser
from hermes_cli.apps.browse_transcript import TranscriptScreen, TranscriptView
from hermes_cli.apps.browse_widgets import AskScreen, ConfirmScreen, HelpScreen
from hermes_state.records import messages, session_list, sessions
from hermes_state.search import search
from hermes_state.store.connection import open_store

NOW = time.time()
HOUR = 3600.0
DAY = 86400.0
HOSTILE_TITLE = "\x1b[31mred[/] [bold]loud[/bold] \u202eevil"
LONG_ARGS = '{"cmd": "docker ps --all --format ' + "x" * 200 + '"}'
HOSTILE_BODY = "kettle \x1b]0;owned\x07 [link=http://x]click[/link] \x9b31m"


@pytest.fixture
def store_path(db_path: Path) -> Path:
    """Three sessions that mention 'kettle': cli (days old, in the middle of a long
    conversation), telegram (half an hour old) and discord (40 days old)."""
    with open_store(db_path) as store:
        sessions.create_session(store, "s-cli", "cli", started_at=NOW - 3 * DAY)
        sessions.set_session_title(store, "s-cli", "Docker build notes")
        rows: list[dict[str, Any]] = [
            {"role": "user", "content": "how do I fix the docker build"},
            {
                "role": "assistant",
                "content": "check the layer cache",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "terminal", "arguments": LONG_ARGS},
                    }
                ],
            },
            {"role": "tool", "content": "cache hit ratio 0.2", "tool_name": "terminal"},
            {"role": "user", "content": "meanwhile the kettle is whistling"},
            {"role": "assistant", "content": "enjoy the kettle tea", "reasoning": "tea facts"},
            *({"role": "user", "content": f"later {i}"} for i in range(4)),
        ]
        for i, row in enumerate(rows):
            row["timestamp"] = NOW - 3 * DAY + i
        messages.append_messages(store, "s-cli", rows)
        sessions.create_session(store, "s-tg", "telegram", started_at=NOW - 0.5 * HOUR)
        sessions.set_session_title(store, "s-tg", "Kettle shopping")
        messages.append_message(store, "s-tg", "user", "buy a kettle", timestamp=NOW - 0.5 * HOUR)
        messages.append_message(
            store, "s-tg", "assistant", "which kettle?", timestamp=NOW - 0.4 * HOUR
        )
        sessions.create_session(store, "s-old", "discord", started_at=NOW - 40 * DAY)
        messages.append_message(
            store, "s-old", "user", "old kettle story", timestamp=NOW - 40 * DAY
        )
    return db_path


def hit_id(db_path: Path, content: str) -> int:
    """Return the id of the message with exactly this content."""
    with open_store(db_path, read_only=True) as store:
        row = store.conn.execute("SELECT id FROM messages WHERE content = ?", (content,)).fetchone()
    return int(row[0])


def session_row(db_path: Path, session_id: str) -> dict[str, Any] | None:
    """Read one session through a fresh read-only connection."""
    with open_store(db_path, read_only=True) as store:
        return sessions.get_session(store, session_id)


async def until(pilot: Any, condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Let the app run until condition() holds (fail after timeout seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the app did not get there in time"
        await pilot.pause(0.01)


@contextlib.asynccontextmanager
async def browsing(
    db_path: Path, query: str = "", size: tuple[int, int] = (120, 36)
) -> AsyncIterator[tuple[BrowseApp, Any, Any]]:
    """Run the app headlessly on a read-only store: (app, pilot, the browse screen)."""
    store = open_store(db_path, read_only=True)
    browser = Browser(store)
    try:
        app = BrowseApp(browser, initial=browser.load(Request(0, "hits", query, Filters())))
        async with app.run_test(size=size) as pilot:
            screen = app.screen
            await until(pilot, lambda: screen.results is not None and bool(screen.rows))
            yield app, pilot, screen
    finally:
        browser.close()
        store.close()


async def type_query(pilot: Any, screen: Any, text: str) -> None:
    """Type text into the search box and wait for its results (and their match count)."""
    await pilot.press(*text)
    await until(pilot, lambda: screen.results.request.query == text and not screen.counting)


async def highlight(pilot: Any, screen: Any, pick: Callable[[Any], bool]) -> Any:
    """Move the cursor with the arrow keys to the first row pick() accepts; return the row."""
    target = next(i for i, row in enumerate(screen.rows) if pick(row))
    listing = screen.query_one("#list")
    while listing.cursor != target:
        await pilot.press("down" if listing.cursor < target else "up")
    row = screen.rows[target]
    await until(pilot, lambda: screen.preview_row is row and screen.preview_messages)
    return row


def drive(fn: Callable[..., Any]) -> None:
    """Run an async test body."""
    asyncio.run(fn())


# --- searching and filtering ------------------------------------------------------------------


def test_typing_a_query_shows_the_hits_the_library_finds(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path) as (_app, pilot, screen):
            assert {r.session_id for r in screen.rows} == {"s-cli", "s-tg", "s-old"}
            assert screen.rows[0].hit is None  # empty query: the session list
            await type_query(pilot, screen, "kettle")
            with open_store(store_path, read_only=True) as store:
                expected = search.search_messages(store, "kettle", archived=False, limit=100)
            assert [r.hit["id"] for r in screen.rows] == [h["id"] for h in expected]
            assert len(screen.rows) == 5
            status = screen.query_one("#status").text.plain
            assert "word index" in status and "5 matches" in status and "5 hits shown" in status
            assert screen.latencies_ms  # keystroke-to-results was timed

    drive(body)


def test_filters_narrow_the_hits(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path, "kettle") as (_app, pilot, screen):
            assert len(screen.rows) == 5
            await pilot.press("ctrl+r")  # role: user
            await until(pilot, lambda: screen.filters.roles == ("user",) and not screen.counting)
            assert sorted(r.session_id for r in screen.rows) == ["s-cli", "s-old", "s-tg"]
            assert {r.hit["role"] for r in screen.rows} == {"user"}
            await pilot.press("ctrl+t")  # since: 1h
            await until(pilot, lambda: screen.filters.since == "1h" and not screen.counting)
            assert [r.session_id for r in screen.rows] == ["s-tg"]
            await pilot.press("ctrl+r", "ctrl+r", "ctrl+r", "ctrl+t", "ctrl+t", "ctrl+t")
            await pilot.press("ctrl+t", "ctrl+t", "ctrl+t", "ctrl+s")  # role any, any time, cli
            await until(pilot, lambda: screen.filters.sources == ("cli",))
            await until(pilot, lambda: screen.results.request.filters.sources == ("cli",))
            assert screen.filters == Filters(sources=("cli",))
            assert {r.session_id for r in screen.rows} == {"s-cli"} and len(screen.rows) == 2
            filters_bar = screen.query_one("#filters").content.plain
            assert "source cli" in filters_bar

    drive(body)


def test_archived_sessions_are_hidden_until_the_scope_filter_includes_them(
    store_path: Path,
) -> None:
    with open_store(store_path) as store:
        sessions.set_session_archived(store, "s-old", True)
        sessions.set_session_pinned(store, "s-tg", True)

    async def body() -> None:
        async with browsing(store_path, "kettle") as (_app, pilot, screen):
            assert "s-old" not in {r.session_id for r in screen.rows}
            for scope, expected in [
                ("all", {"s-cli", "s-tg", "s-old"}),
                ("archived", {"s-old"}),
                ("pinned", {"s-tg"}),
            ]:
                await pilot.press("ctrl+g")
                await until(pilot, lambda s=scope: screen.results.request.filters.scope == s)
                assert {r.session_id for r in screen.rows} == expected

    drive(body)


def test_refresh_shows_messages_a_running_gateway_wrote_meanwhile(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path, "kettle") as (_app, pilot, screen):
            assert len(screen.rows) == 5
            with open_store(store_path) as writer:  # the gateway, in another connection
                messages.append_message(writer, "s-tg", "user", "a new kettle arrived")
            await pilot.press("f5")
            await until(pilot, lambda: len(screen.rows) == 6)
            assert any("arrived" in r.hit["snippet"] for r in screen.rows)

    drive(body)


@pytest.mark.parametrize(("width", "narrow"), [(60, True), (200, False)])
def test_layout_fits_narrow_and_wide_terminals(store_path: Path, width: int, narrow: bool) -> None:
    async def body() -> None:
        async with browsing(store_path, "kettle", size=(width, 24)) as (_app, pilot, screen):
            await until(pilot, lambda: bool(screen.preview_texts))
            assert screen.has_class("narrow") is narrow
            listing = screen.query_one("#list")
            assert listing.size.width == (width if narrow else width // 2)
            for line in listing.drawn(0).splitlines():
                assert len(line) <= listing.size.width

    drive(body)


def test_a_result_with_no_screen_left_to_draw_on_is_dropped(store_path: Path) -> None:
    # A worker can finish while the app closes and its widgets are being removed: drawing the
    # result then would raise (NoMatches on a query of the screen) out of the app's loop.
    from textual.widgets import Static

    from hermes_cli.apps.browse_widgets import Lane

    async def body() -> None:
        async with browsing(store_path, "kettle") as (_app, _pilot, screen):
            drawn: list[int] = []
            await Lane(screen, "test")._finish(drawn.append, 1)
            await Lane(Static(), "test")._finish(drawn.append, 2)  # never attached
            assert drawn == [1]

    drive(body)


def test_moving_down_the_list_fetches_the_next_page(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(browse_model, "HITS_PAGE", 2)

    async def body() -> None:
        async with browsing(store_path, "kettle") as (_app, pilot, screen):
            assert len(screen.rows) == 2
            for _ in range(4):
                await pilot.press("down")
            await until(pilot, lambda: len(screen.rows) == 5 and not screen.results.more)
            assert len({r.hit["id"] for r in screen.rows}) == 5
            assert screen.query_one("#list").rows == screen.rows

    drive(body)


def test_tab_shows_one_row_per_session(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path, "kettle") as (_app, pilot, screen):
            await pilot.press("tab")
            await until(pilot, lambda: screen.results.request.view == "sessions")
            assert [r.session_id for r in screen.rows].count("s-cli") == 1
            assert {r.session_id: r.hits_in_session for r in screen.rows}["s-cli"] == 2

    drive(body)


# --- the preview and the transcript -------------------------------------------------------------


def test_preview_shows_the_hit_with_its_neighbours_and_collapsed_tool_calls(
    store_path: Path,
) -> None:
    target = hit_id(store_path, "meanwhile the kettle is whistling")

    async def body() -> None:
        async with browsing(store_path, "kettle") as (_app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.hit["id"] == target)
            shown = [m["content"] for m in screen.preview_messages]
            assert shown == [
                "how do I fix the docker build",
                "check the layer cache",
                "cache hit ratio 0.2",
                "meanwhile the kettle is whistling",
                "enjoy the kettle tea",
                "later 0",
                "later 1",
            ]
            texts = [t.plain for t in screen.preview_texts]
            assert "▸ tool call: terminal(" in texts[1] and LONG_ARGS not in texts[1]
            assert "▸ reasoning (9 chars)" in texts[4]
            assert screen.preview_hit == 3 and "← hit" in texts[3]
            await pilot.press("f6")
            await until(pilot, lambda: LONG_ARGS in _message_text(screen, 1))

    drive(body)


def _message_text(screen: Any, index: int) -> str:
    texts = screen.preview_texts
    return texts[index].plain if len(texts) > index else ""


def test_transcript_screen_shows_every_message_scrolled_to_the_hit(store_path: Path) -> None:
    target = hit_id(store_path, "later 3")

    async def body() -> None:
        async with browsing(store_path, "later", size=(80, 12)) as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.hit["id"] == target)
            await pilot.press("f3")
            await until(pilot, lambda: isinstance(app.screen, TranscriptScreen))
            transcript = app.screen
            await until(pilot, lambda: transcript.loaded)
            assert len(transcript.messages) == 9
            view = transcript.query_one(TranscriptView)
            assert view.messages[view.hit_index]["id"] == target
            first, last = view.visible_range()
            assert 0 < first <= view.hit_index <= last  # the early ones are above the screen
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is screen)

    drive(body)


# --- actions: confirmed, then through the library ------------------------------------------------


async def _answer(pilot: Any, app: Any, key: str, dialog: type) -> None:
    await until(pilot, lambda: isinstance(app.screen, dialog))
    await pilot.press(key)
    await until(pilot, lambda: not isinstance(app.screen, dialog))


@pytest.mark.parametrize(
    ("key", "column", "value"),
    [("f7", "pinned", 1), ("f9", "archived", 1)],
)
def test_pin_and_archive_change_the_store_only_after_confirmation(
    store_path: Path, key: str, column: str, value: int
) -> None:
    async def body() -> None:
        async with browsing(store_path, "kettle") as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-tg")
            await pilot.press(key)
            await _answer(pilot, app, "n", ConfirmScreen)
            assert session_row(store_path, "s-tg")[column] == 0
            await pilot.press(key)
            await _answer(pilot, app, "y", ConfirmScreen)
            await until(pilot, lambda: len(screen.notices) == 1)
            assert session_row(store_path, "s-tg")[column] == value

    drive(body)


def test_delete_needs_a_confirmation_naming_the_session_and_deletes_exactly_it(
    store_path: Path,
) -> None:
    async def body() -> None:
        async with browsing(store_path) as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-tg")
            await pilot.press("f8")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            question = app.screen.question.plain
            assert "s-tg" in question and "Kettle shopping" in question and "2 messages" in question
            await _answer(pilot, app, "escape", ConfirmScreen)
            assert session_row(store_path, "s-tg") is not None
            await pilot.press("f8")
            await _answer(pilot, app, "y", ConfirmScreen)
            await until(pilot, lambda: "s-tg" not in {r.session_id for r in screen.rows})
            assert session_row(store_path, "s-tg") is None
            assert session_row(store_path, "s-cli") is not None

    drive(body)


def test_rename_goes_through_the_title_rules(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path) as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-old")
            await pilot.press("f2")
            await until(pilot, lambda: isinstance(app.screen, AskScreen))
            app.screen.query_one("#answer").value = "Docker build notes"  # s-cli holds it
            await pilot.press("enter")
            await until(pilot, lambda: len(screen.notices) == 1)
            assert screen.notices[0].startswith("Error: Title 'Docker build notes' is already")
            assert session_row(store_path, "s-old")["title"] is None
            await pilot.press("f2")
            await until(pilot, lambda: isinstance(app.screen, AskScreen))
            app.screen.query_one("#answer").value = "  Kettle   history "
            await pilot.press("escape")  # cancelled: nothing written
            await until(pilot, lambda: app.screen is screen)
            assert session_row(store_path, "s-old")["title"] is None
            await pilot.press("f2")
            await until(pilot, lambda: isinstance(app.screen, AskScreen))
            app.screen.query_one("#answer").value = "  Kettle   history "
            await pilot.press("enter")
            await until(pilot, lambda: session_row(store_path, "s-old")["title"] is not None)
            assert session_row(store_path, "s-old")["title"] == "Kettle history"

    drive(body)


def test_export_writes_the_session_to_a_new_file(store_path: Path, tmp_path: Path) -> None:
    target = tmp_path / "kettle.md"

    async def body() -> None:
        async with browsing(store_path) as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-tg")
            await pilot.press("f4")
            await until(pilot, lambda: isinstance(app.screen, AskScreen))
            app.screen.query_one("#answer").value = str(target)
            await pilot.press("escape")  # cancelled: nothing written
            await until(pilot, lambda: app.screen is screen)
            assert not target.exists()
            await pilot.press("f4")
            await until(pilot, lambda: isinstance(app.screen, AskScreen))
            app.screen.query_one("#answer").value = str(target)
            await pilot.press("enter")
            await until(pilot, lambda: len(screen.notices) == 1)
            assert screen.notices[0].startswith("Exported 2 messages to ")

    drive(body)
    text = target.read_text(encoding="utf-8")
    assert "## Kettle shopping" in text and "buy a kettle" in text


# --- leaving ----------------------------------------------------------------------------------


def test_enter_leaves_with_the_highlighted_session_id(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path, "kettle") as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-old")
            await pilot.press("enter")
        assert app.return_value == "s-old"

    drive(body)


def test_escape_clears_the_query_then_leaves_without_a_choice(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path, "kettle") as (app, pilot, screen):
            await pilot.press("escape")
            await until(pilot, lambda: screen.results.request.query == "")
            assert screen.rows[0].hit is None
            await pilot.press("escape")
        assert app.return_value is None

    drive(body)


def test_resume_line_names_a_non_default_profile_and_quotes_the_id(
    hermes_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert browse.resume_line("s-1") == "hermes --resume s-1"
    monkeypatch.setenv("HERMES_HOME", str(hermes_home / "profiles" / "coder"))
    assert browse.resume_line("a b") == "hermes -p coder --resume 'a b'"


# --- hostile stored text --------------------------------------------------------------------------


def test_hostile_title_and_content_are_shown_escaped_never_as_codes_or_markup(
    store_path: Path,
) -> None:
    with open_store(store_path) as store:
        # A foreign writer (not our sanitiser) stored the title.
        store.conn.execute("UPDATE sessions SET title = ? WHERE id = 's-tg'", (HOSTILE_TITLE,))
        messages.append_message(store, "s-tg", "user", HOSTILE_BODY, timestamp=NOW)

    async def body() -> None:
        async with browsing(store_path, "kettle", size=(200, 40)) as (app, pilot, screen):
            row = await highlight(pilot, screen, lambda r: "owned" in r.hit["snippet"])
            assert row.session_id == "s-tg"
            drawn = screen.query_one("#list").drawn(screen.rows.index(row))
            assert "\\x1b[31mred[/] [bold]loud[/bold] \\u202eevil" in drawn
            assert "\\x1b]0;owned\\x07 [link=http://x]click[/link] \\u009b31m" in drawn
            preview = "\n".join(strip.text for strip in screen.query_one("#preview").lines)
            assert "\\x1b]0;owned\\x07 [link=http://x]click[/link]" in preview
            head = screen.query_one("#preview-head").content.plain
            assert "\\x1b[31mred[/] [bold]loud[/bold]" in head
            svg = app.export_screenshot()
            assert "\x1b" not in svg and "\x9b" not in svg and "\u202e" not in svg
            # A title with markup in it is shown as text (list, notice), never as markup.
            await pilot.press("f2")
            await until(pilot, lambda: isinstance(app.screen, AskScreen))
            app.screen.query_one("#answer").value = "[bold]loud[/bold] kettle"
            await pilot.press("enter")
            await until(pilot, lambda: bool(screen.notices))
            assert screen.notices == ["Renamed to: [bold]loud[/bold] kettle"]
            renamed = "[bold]loud[/bold] kettle"
            await until(pilot, lambda: renamed in {r.session.get("title") for r in screen.rows})
            index = next(i for i, r in enumerate(screen.rows) if r.session_id == "s-tg")
            assert renamed in screen.query_one("#list").drawn(index)

    drive(body)


# --- the command: errors before the screen, and a real run on a pseudo-terminal ------------------


def test_browse_of_a_missing_store_fails_with_the_usual_error_and_creates_nothing(
    hermes_home: Path,
) -> None:
    result = run("sessions", "browse")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: No store yet at ")
    assert list(hermes_home.iterdir()) == []


def test_browse_of_a_damaged_store_fails_before_the_screen_starts(hermes_home: Path) -> None:
    (hermes_home / "state.db").write_bytes(b"not a database at all" * 100)
    result = run("sessions", "browse", "kettle")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 2  # the error and its hint


def test_browse_without_a_terminal_says_so(hermes_home: Path) -> None:
    load_sample()
    result = run("sessions", "browse")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        "Error: sessions browse needs a terminal (stdin and stderr)"
    )


def test_browse_rejects_a_bad_since_as_a_usage_error(hermes_home: Path) -> None:
    result = run("sessions", "browse", "--since", "soon")
    assert result.exit_code == 2 and "--since" in result.stderr


TMUX = shutil.which("tmux")


@contextlib.contextmanager
def tmux_session(
    command: str, socket: Path, width: int = 120, height: int = 32
) -> Iterator[Callable[..., str]]:
    """Run command in a detached tmux session on a private server; yield a screen reader."""
    base = ["tmux", "-S", str(socket), "-f", "/dev/null"]
    subprocess.run(
        [*base, "new-session", "-d", "-x", str(width), "-y", str(height), command], check=True
    )

    def screen() -> str:
        done = subprocess.run(
            [*base, "capture-pane", "-p"], capture_output=True, text=True, check=False
        )
        return done.stdout

    def keys(*names: str) -> None:
        subprocess.run([*base, "send-keys", *names], check=True)

    screen.keys = keys  # type: ignore[attr-defined]
    try:
        yield screen
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True, check=False)


def wait_for(probe: Callable[[], str], needle: str, timeout: float = 60.0) -> str:
    """Poll probe() until its text contains needle; return that text.

    The bound only keeps a broken run from hanging: a loaded 2-core machine has taken over 15 s
    to start the full-screen app.
    """
    deadline = time.monotonic() + timeout
    text = probe()
    while needle not in text:
        assert time.monotonic() < deadline, f"{needle!r} never appeared in:\n{text}"
        time.sleep(0.05)
        text = probe()
    return text


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")
def test_real_command_in_tmux_searches_as_you_type_and_prints_the_chosen_id(
    hermes_home: Path, tmp_path: Path
) -> None:
    load_sample()
    out = tmp_path / "out.txt"
    env = {
        "HERMES_HOME": str(hermes_home),
        "PYTHONPATH": str(REPO_ROOT),
        "HERMES_TEST_ISOLATION": "1",
    }
    exports = " ".join(f"{k}={_sh(v)}" for k, v in env.items())
    command = (
        f"env {exports} {_sh(sys.executable)} -m hermes_cli sessions browse --print-id --archived"
        f" > {_sh(str(out))}; echo EXIT=$? >> {_sh(str(out))}"
    )
    with tmux_session(command, tmp_path / "tmux.sock") as screen:
        first = wait_for(screen, "12 sessions")
        assert "^G all, archived too" in first  # --archived: the scope starts at all
        screen.keys("-l", "chat-send")
        text = wait_for(screen, "6 matches")
        time.sleep(0.3)
        assert screen() == text  # a stable screen (the terminal size was read right)
        assert "word index" in text and "6 hits shown" in text
        # The hits and the hit's preview, side by side at 120 columns. Four hits rank equal;
        # the newest of them (the nightly digest) comes first.
        assert any(
            "chat-send" in left and "cron · 5 messages" in right
            for left, _, right in (ln.partition("│") for ln in text.splitlines())
        ), text
        screen.keys("Enter")
        wait_for(lambda: out.read_text() if out.exists() else "", "EXIT=")
    chosen, code = out.read_text().splitlines()
    assert code == "EXIT=0"
    assert chosen == "20261121_060000_d90a11"


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")
def test_real_command_in_tmux_f1_help_fits_80x24_and_says_more_keys_are_below(
    hermes_home: Path, tmp_path: Path
) -> None:
    load_sample()
    env = {"HERMES_HOME": str(hermes_home), "PYTHONPATH": str(REPO_ROOT)}
    exports = " ".join(f"{k}={_sh(v)}" for k, v in env.items())
    command = f"env {exports} {_sh(sys.executable)} -m hermes_cli sessions browse"
    with tmux_session(command, tmp_path / "tmux.sock", width=80, height=24) as screen:
        wait_for(screen, "12 sessions")
        screen.keys("F1")
        text = wait_for(screen, "more keys below: Down, PgDn or End")
        lines = text.splitlines()
        assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
        top = next(i for i, line in enumerate(lines) if "Esc, F1, q or Enter: close" in line)
        more = next(i for i, line in enumerate(lines) if "more keys below" in line)
        # The box is whole: its title on top, the hint just above its bottom border.
        assert 0 < top < more < len(lines) - 1
        assert "▄" * 60 in lines[more + 1]
        screen.keys("End")
        deadline = time.monotonic() + 30
        while "more keys below" in screen():  # at the end of the list the hint goes
            assert time.monotonic() < deadline, screen()
            time.sleep(0.05)
        screen.keys("Escape")
        screen.keys("C-q")


def _sh(text: str) -> str:
    import shlex

    return shlex.quote(text)


def test_status_line_of_a_partial_search_says_how_much_was_examined() -> None:
    request = Request(seq=1, view="hits", query="checkpoint", filters=Filters())
    results = browse_model.Results(
        request,
        ordering="newest",
        route="fts",
        partial=True,
        examined=107_367,
        candidates=472_173,
        searched_back_to=None,
    )
    line = browse_text.status_text(results).plain
    assert "partial: 107,367 of 472,173 candidates examined" in line
    whole = browse_model.Results(request, ordering="newest", route="fts")
    assert "partial" not in browse_text.status_text(whole).plain


# --- a long session's transcript: drawn a screenful at a time ------------------------------------

LONG_MESSAGES = 4540  # the operator's session
LONG_HIT_AT = 4400  # the one message with the word "zeppelin", near the end
LONG_WORDS = ("docker", "build", "cache", "gateway", "retry", "deploy", "schema", "会議")


@pytest.fixture
def long_store(db_path: Path) -> Path:
    """One cli session of LONG_MESSAGES messages of realistic length (tool calls among them)
    with its single 'zeppelin' at LONG_HIT_AT, and the three kettle sessions' neighbour."""
    import random

    rng = random.Random(7)
    start = NOW - DAY
    rows: list[dict[str, Any]] = []
    for i in range(LONG_MESSAGES):
        role = ("user", "assistant", "tool")[i % 3]
        words = [rng.choice(LONG_WORDS) for _ in range(rng.randint(15, 140))]
        if i == LONG_HIT_AT:
            words.insert(len(words) // 2, "zeppelin")
        row: dict[str, Any] = {"role": role, "content": " ".join(words), "timestamp": start + i}
        if role == "assistant" and i % 2:
            call = {"name": "terminal", "arguments": LONG_ARGS}
            row["tool_calls"] = [{"id": f"c{i}", "type": "function", "function": call}]
        if role == "tool":
            row["tool_name"] = "terminal"
        rows.append(row)
    with open_store(db_path) as store:
        sessions.create_session(store, "s-long", "cli", started_at=start)
        sessions.set_session_title(store, "s-long", "Deploy telegram gateway")
        messages.append_messages(store, "s-long", rows)
    return db_path


async def open_transcript(pilot: Any, app: Any, screen: Any) -> tuple[Any, TranscriptView]:
    """Press F3 on the highlighted row; return the transcript screen and its view, all read."""
    await pilot.press("f3")
    await until(pilot, lambda: isinstance(app.screen, TranscriptScreen))
    transcript = app.screen
    await until(pilot, lambda: transcript.loaded)
    await pilot.pause()
    return transcript, transcript.query_one(TranscriptView)


def on_screen(view: TranscriptView, index: int | None) -> bool:
    """Tell whether message index has lines on the screen."""
    shown = view.visible_range()
    return index is not None and shown is not None and shown[0] <= index <= shown[1]


def test_opening_a_long_session_draws_only_the_screenful_around_the_hit(
    long_store: Path,
) -> None:
    async def body() -> None:
        async with browsing(long_store, "zeppelin", size=(80, 24)) as (app, pilot, screen):
            transcript, view = await open_transcript(pilot, app, screen)
            assert len(view.messages) == LONG_MESSAGES
            assert view.hit_index == LONG_HIT_AT and on_screen(view, LONG_HIT_AT)
            first, _last = view.visible_range()
            assert first < LONG_HIT_AT  # the messages before the hit are above it
            # A screenful wrapped, not 4,540 messages: opening costs the same for any size.
            assert view.rendered < 30
            status = transcript.query_one("#transcript-status").text.plain
            assert f"of {LONG_MESSAGES:,}" in status and "loading" not in status
            hit_lines = [s.text for i, s in view._lines() if i == LONG_HIT_AT]
            assert any("← hit" in text for text in hit_lines)
            assert any("zeppelin" in text for text in hit_lines)

    drive(body)


def test_transcript_keys_reach_both_ends_and_the_hit_without_wrapping_it_all(
    long_store: Path,
) -> None:
    async def body() -> None:
        async with browsing(long_store, "zeppelin", size=(80, 24)) as (app, pilot, screen):
            _transcript, view = await open_transcript(pilot, app, screen)
            await pilot.press("end")
            assert view.visible_range()[1] == LONG_MESSAGES - 1
            bottom = view.top
            await pilot.press("down", "pagedown")  # already at the end: nowhere to go
            assert view.top == bottom
            await pilot.press("home")
            assert view.top == (0, 0) and view.visible_range()[0] == 0
            await pilot.press("up")
            assert view.top == (0, 0)
            await pilot.press("pagedown")
            assert view.visible_range()[0] > 0
            await pilot.press("pageup")
            assert view.top == (0, 0)
            await pilot._post_mouse_events([events.MouseScrollDown], "#transcript")
            assert view.top > (0, 0)  # the wheel scrolls it too
            await pilot.press("h")
            assert on_screen(view, LONG_HIT_AT)
            top_message = view.top[0]
            await pilot.press("f6")  # expanded: wrapped again, from the same message
            assert view.expanded and view.top[0] == top_message
            assert view.rendered < 120

    drive(body)


def test_transcript_follows_a_resize_and_keeps_the_hit_in_view(long_store: Path) -> None:
    async def body() -> None:
        async with browsing(long_store, "zeppelin", size=(120, 30)) as (app, pilot, screen):
            _transcript, view = await open_transcript(pilot, app, screen)
            await pilot.resize_terminal(60, 24)
            await until(pilot, lambda: view.region.width == 60)
            await pilot.pause()
            assert on_screen(view, LONG_HIT_AT)
            for _index, strip in view._lines():
                assert strip.cell_length < view.content_size.width  # and the position bar

    drive(body)


def test_leaving_a_long_transcript_before_it_is_read_is_safe(long_store: Path) -> None:
    async def body() -> None:
        async with browsing(long_store, "zeppelin", size=(80, 24)) as (app, pilot, screen):
            for _ in range(3):
                await pilot.press("f3", "escape")
            await pilot.pause(0.3)  # the readers finish with no screen to draw on
            assert app.screen is screen and app.is_running

    drive(body)


def test_transcript_status_says_when_only_the_first_messages_were_read(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(browse_model, "TRANSCRIPT_MAX", 4)

    async def body() -> None:
        async with browsing(store_path, "docker", size=(80, 24)) as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-cli")
            transcript, view = await open_transcript(pilot, app, screen)
            assert len(view.messages) == 4
            status = transcript.query_one("#transcript-status").text.plain
            assert "the first 4" in status

    drive(body)


def test_enter_in_the_transcript_chooses_its_session(store_path: Path) -> None:
    async def body() -> None:
        async with browsing(store_path, "kettle") as (app, pilot, screen):
            await highlight(pilot, screen, lambda r: r.session_id == "s-tg")
            await open_transcript(pilot, app, screen)
            await pilot.press("enter")
        assert app.return_value == "s-tg"

    drive(body)


# --- every key discoverable, every line fitting, at 60, 80 and 120 columns ----------------------

WIDTHS = (60, 80, 120)


def _keys_bar(screen: Any) -> str:
    return screen.query_one(".keys").text.plain


@pytest.mark.parametrize("width", WIDTHS)
def test_f1_lists_every_key_and_the_keys_bar_always_shows_help_and_quit(
    store_path: Path, width: int
) -> None:
    from hermes_cli.apps.browse_app import BrowseScreen

    async def body() -> None:
        async with browsing(store_path, "kettle", size=(width, 24)) as (app, pilot, screen):
            bar = _keys_bar(screen)
            assert bar.startswith("F1 Help") and bar.endswith("^Q Quit")
            assert len(bar) <= width
            await pilot.press("f1")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen))
            listed = dict(app.screen.entries)
            assert listed["^Q or ^C"] == "quit without choosing"
            assert listed["F3 or ^O"] == "open the whole transcript"
            assert len(listed) == len(BrowseScreen.BINDINGS)  # every binding, shown or not
            assert all(what for what in listed.values())
            keys = app.screen.query_one("#help-keys")
            await pilot.press("end")  # a short terminal scrolls the list to its last keys
            assert keys.scroll_y == keys.max_scroll_y
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is screen)
            assert screen.query_one("#query").value == "kettle"  # the keys reached no box

    drive(body)


@pytest.mark.parametrize("width", WIDTHS)
def test_f1_in_the_transcript_lists_its_keys(store_path: Path, width: int) -> None:
    async def body() -> None:
        async with browsing(store_path, "kettle", size=(width, 24)) as (app, pilot, screen):
            transcript, _view = await open_transcript(pilot, app, screen)
            bar = _keys_bar(transcript)
            assert "F1 Help" in bar and "^Q Quit" in bar and len(bar) <= width
            await pilot.press("f1")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen))
            listed = dict(app.screen.entries)
            assert listed["Esc or q"] == "back to the list"
            assert listed["PgDn or Space"] == "a page down"
            await pilot.press("f1")  # F1 closes it again
            await until(pilot, lambda: app.screen is transcript)

    drive(body)


def test_help_says_enter_prints_hermes_agents_resume_line_with_print_resume(
    store_path: Path,
) -> None:
    store = open_store(store_path, read_only=True)
    browser = Browser(store)

    async def body() -> None:
        initial = browser.load(Request(0, "hits", "", Filters()))
        app = BrowseApp(browser, initial=initial, prints="resume")
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("f1")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen))
            enter = dict(app.screen.entries)["Enter"]
            assert "resumes the session in Hermes Agent" in enter
            assert "the agent's own `hermes --resume ID`" in enter

    try:
        drive(body)
    finally:
        browser.close()
        store.close()


def test_command_help_lists_every_key_of_the_screen_and_names_the_agents_resume_line(
    hermes_home: Path,
) -> None:
    from hermes_cli.apps.browse_app import BrowseScreen
    from hermes_cli.apps.browse_widgets import key_label

    result = run("sessions", "browse", "--help")
    assert result.exit_code == 0
    text = result.stdout
    for binding in BrowseScreen.BINDINGS:
        for key in binding.key.split(","):  # type: ignore[union-attr]
            assert key_label(key) in text, key
    flat_help = " ".join(text.split())
    assert (
        "print the session id, or the line that resumes it in Hermes Agent "
        "(the agent's own `hermes --resume ID`, by its path; see sessions resume-command)"
        in flat_help
    )
    assert "--archived Include archived sessions." in flat_help
    assert "Only sessions active since WHEN" in flat_help
    assert 'hermes --resume "$(' not in text  # no line hands this tool an option it lacks


@pytest.mark.parametrize("width", WIDTHS)
def test_status_line_of_a_search_fits_the_terminal(store_path: Path, width: int) -> None:
    async def body() -> None:
        async with browsing(store_path, "kettle", size=(width, 24)) as (_app, pilot, screen):
            await until(pilot, lambda: not screen.counting)
            status = screen.query_one("#status")
            text = status.text
            assert text.cell_len <= status.content_size.width
            assert "5 matches" in text.plain and "…" not in text.plain
            if width >= 80:
                assert "5 hits shown" in text.plain and "word index" in text.plain

    drive(body)


@pytest.mark.parametrize("width", [58, 78, 118])  # the status line inside its padding
def test_a_crowded_status_line_keeps_the_count_the_partial_search_and_the_refresh_hint(
    width: int,
) -> None:
    from hermes_state.search.search import MatchCount

    request = Request(seq=1, view="hits", query="checkpoint", filters=Filters())
    results = browse_model.Results(
        request,
        rows=[browse_model.Row("s", {}) for _ in range(50)],
        ordering="rank_recent",
        route="word",
        partial=True,
        examined=107_367,
        candidates=472_173,
        searched_back_to=NOW - 30 * DAY,
        elapsed_ms=912,
    )
    count = MatchCount(count=94_378, complete=False, route="word")
    line = browse_text.status_text(results, count=count, changed=True, width=width)
    plain = line.plain
    assert line.cell_len <= width
    assert "94,378 matches" in plain and "partial: 107,367" in plain and "472,173" in plain
    assert "F5" in plain
    full = browse_text.status_text(results, count=count, changed=True).plain
    assert "ranked among the newest" in full and "912 ms" in full
    assert "candidates examined, back to" in full


def test_status_line_counts_one_hit_and_one_session_in_the_singular() -> None:
    request = Request(seq=1, view="hits", query="kettle", filters=Filters())
    one = browse_model.Results(
        request, rows=[browse_model.Row("s", {})], ordering="rank", route="word"
    )
    assert "1 hit shown" in browse_text.status_text(one).plain
    grouped = replace(one, request=replace(request, view="sessions"))
    assert "1 session in the first" in browse_text.status_text(grouped).plain


# --- hit headers keep their title -----------------------------------------------------------------


def test_hits_of_an_untitled_session_show_its_first_message_as_the_list_does(
    store_path: Path,
) -> None:
    wordy = "a kettle story told at length " * 4
    with open_store(store_path) as store:
        sessions.create_session(store, "s-wordy", "cli", started_at=NOW - 2 * DAY)
        messages.append_message(store, "s-wordy", "user", wordy, timestamp=NOW - 2 * DAY)
        listed = {r["id"]: r for r in session_list.list_sessions(store, limit=10)}

    async def body() -> None:
        async with browsing(store_path, "kettle", size=(80, 24)) as (_app, pilot, screen):
            row = await highlight(pilot, screen, lambda r: r.session_id == "s-old")
            first_line = screen.query_one("#list").drawn(screen.rows.index(row)).splitlines()[0]
            assert "old kettle story" in first_line and "(untitled)" not in first_line
            labels = {r.session_id: browse_text.session_label(r.session) for r in screen.rows}
            for sid in ("s-old", "s-wordy"):  # cut or not, as the session list shows it
                assert labels[sid] == browse_text.session_label(listed[sid])
            assert labels["s-wordy"].endswith("…")

    drive(body)


@pytest.mark.parametrize("width", [47, 57, 78])  # the list at 100, 60 and 80 columns
@pytest.mark.parametrize(
    "title",
    [
        "Refactor the search module so that it handles the new tokenizer well #12",
        "大阪への出張、新幹線の時間を調べて東京から大阪まで行きます会議の資料を準備 #3",
    ],
)
def test_a_long_continuation_title_keeps_its_number_and_the_tags(width: int, title: str) -> None:
    session = {"title": title, "source": "cli", "pinned": 1, "archived": 1}
    hit = {"timestamp": NOW - 100, "role": "user", "snippet": "a >>>kettle<<< b"}
    first, second = browse_text.row_lines(browse_model.Row("s-1", session, hit=hit), width, now=NOW)
    number = title.rsplit(" ", 1)[1]
    assert first.cell_len <= width and second.cell_len <= width
    assert f"… {number} [pinned] [archived]" in first.plain
    assert title[:4] in first.plain
    assert first.plain.count("…") == 1  # one cut, in the title: the source and id gave way


def test_a_title_that_fits_is_shown_whole() -> None:
    session = {"title": "Kettle shopping #2", "source": "telegram"}
    first, _ = browse_text.row_lines(browse_model.Row("s-tg", session), 78, now=NOW)
    assert "Kettle shopping #2  telegram  s-tg" in first.plain


# --- --archived ---------------------------------------------------------------------------------


def test_archived_flag_starts_the_scope_at_all_and_the_scope_key_still_cycles(
    store_path: Path,
) -> None:
    with open_store(store_path) as store:
        sessions.set_session_archived(store, "s-old", True)
    filters = browse.initial_filters(sources=(), roles=(), since=None, archived=True)
    assert filters.scope == "all"
    assert browse.initial_filters(sources=(), roles=(), since=None, archived=False).scope == (
        "unarchived"
    )
    store = open_store(store_path, read_only=True)
    browser = Browser(store)

    async def body() -> None:
        app = BrowseApp(browser, initial=browser.load(Request(0, "hits", "kettle", filters)))
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            await until(pilot, lambda: bool(screen.rows))
            assert "s-old" in {r.session_id for r in screen.rows}
            assert "^G all, archived too" in screen.query_one("#filters").content.plain
            await pilot.press("ctrl+g")
            await until(pilot, lambda: screen.results.request.filters.scope == "archived")
            assert {r.session_id for r in screen.rows} == {"s-old"}

    try:
        drive(body)
    finally:
        browser.close()
        store.close()
