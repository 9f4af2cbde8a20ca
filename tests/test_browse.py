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
from pathlib import Path
from typing import Any

import pytest
from clitools import REPO_ROOT, load_sample, run

from hermes_cli import browse
from hermes_cli.browse import Browser, Filters, Request
from hermes_cli.browse_app import AskScreen, BrowseApp, ConfirmScreen, TranscriptScreen
from hermes_state import messages, search, sessions
from hermes_state.connection import open_store

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
            status = screen.query_one("#status").content.plain
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

    from hermes_cli.browse_app import _Lane

    async def body() -> None:
        async with browsing(store_path, "kettle") as (_app, _pilot, screen):
            drawn: list[int] = []
            await _Lane(screen, "test")._finish(drawn.append, 1)
            await _Lane(Static(), "test")._finish(drawn.append, 2)  # never attached
            assert drawn == [1]

    drive(body)


def test_moving_down_the_list_fetches_the_next_page(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(browse, "HITS_PAGE", 2)

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
            assert transcript.hit_line is not None and transcript.hit_line > 0
            log = transcript.query_one("#transcript")
            assert log.scroll_y > 0  # the early messages are above the top of the screen
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
        f"env {exports} {_sh(sys.executable)} -m hermes_cli sessions browse --print-id"
        f" > {_sh(str(out))}; echo EXIT=$? >> {_sh(str(out))}"
    )
    with tmux_session(command, tmp_path / "tmux.sock") as screen:
        wait_for(screen, "12 sessions")
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


def _sh(text: str) -> str:
    import shlex

    return shlex.quote(text)


def test_status_line_of_a_partial_search_says_how_much_was_examined() -> None:
    request = Request(seq=1, view="hits", query="checkpoint", filters=Filters())
    results = browse.Results(
        request,
        ordering="newest",
        route="fts",
        partial=True,
        examined=107_367,
        candidates=472_173,
        searched_back_to=None,
    )
    line = browse.status_text(results).plain
    assert "partial: 107,367 of 472,173 candidates examined" in line
    whole = browse.Results(request, ordering="newest", route="fts")
    assert "partial" not in browse.status_text(whole).plain
