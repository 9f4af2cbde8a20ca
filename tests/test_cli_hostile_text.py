"""Stored text never drives the operator's terminal: escapes are shown, markup is never read.

A store is written the way a foreign writer could (the agent, the sqlite3 shell, an import):
titles, content, sources, models and tool names carrying OSC 52 (clipboard), OSC 0 (window
title), OSC 8 (hyperlink), CSI 2J, SGR conceal, BEL, the 8-bit CSI, a bidi override and rich
markup. Every read command is run in every human mode (CliRunner, a pipe, a pty with colour, a
pty with NO_COLOR) and must print those as visible escapes; --json must keep them exact.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
from pathlib import Path

import pytest
from clitools import child, pty_child, run

from hermes_cli.rendering import sanitize
from hermes_state.records import messages, sessions
from hermes_state.reports import usage
from hermes_state.store.connection import open_store

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
OSC0 = "\x1b]0;pwned\x07"
OSC8 = "\x1b]8;;https://evil.example/\x07"
LINK_TITLE = "[link=https://evil.example/]Fix Docker build[/]" + OSC0
BOLD_TITLE = "closing [/bold] tag \x9b31m"
CONTENT = "hello " + OSC52 + " world \x1b[2J\x1b[8mhidden\u202eevil"
MODEL = "gpt\x9b2J"
SOURCE = "tele" + OSC8 + "gram"
TOOL = "to\x1bol"
CALL = "rm\x1b[31m"
MARKUP_CONTENT = "[bold red]markup[/] and [/bold] :smile:"

# Our own colour codes are the only escape sequences allowed in the output.
OUR_SGR = re.compile(r"\x1b\[[0-9;]*m")
# Anything a terminal could act on, once our SGR codes are taken out.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

READ_COMMANDS = [
    ("sessions", "list"),
    ("sessions", "list", "--all-profiles"),
    ("sessions", "search", "hello"),
    ("sessions", "search", "markup"),
    ("sessions", "show", "hostile_1"),
    ("sessions", "show", "hostile_2"),
    ("sessions", "stats"),
]


def write_hostile_store(path: Path) -> None:
    """Fill a store with hostile text; titles are set behind the library's back (foreign writer)."""
    with open_store(path) as store:
        sessions.create_session(store, "hostile_1", "cli", model=MODEL, started_at=1.79e9)
        messages.append_message(store, "hostile_1", "user", CONTENT, timestamp=1.79e9 + 10)
        messages.append_message(
            store,
            "hostile_1",
            "assistant",
            "ok",
            tool_calls=[{"id": "c1", "type": "function", "function": {"name": CALL}}],
            timestamp=1.79e9 + 20,
        )
        messages.append_message(
            store,
            "hostile_1",
            "tool",
            "result \x07 bell",
            tool_name=TOOL,
            tool_call_id="c1",
            timestamp=1.79e9 + 30,
        )
        sessions.create_session(store, "hostile_2", SOURCE, started_at=1.79e9 + 100)
        messages.append_message(store, "hostile_2", "user", MARKUP_CONTENT, timestamp=1.79e9 + 110)
        # Tokens put the hostile titles into `stats`' top sessions and models into its models.
        usage.update_token_counts(store, "hostile_1", 40, 4, model=MODEL)
        usage.update_token_counts(store, "hostile_2", 20, 2, model=MODEL)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE sessions SET title = ? WHERE id = 'hostile_1'", (LINK_TITLE,))
        conn.execute("UPDATE sessions SET title = ? WHERE id = 'hostile_2'", (BOLD_TITLE,))
    conn.close()


@pytest.fixture
def hostile(hermes_home: Path) -> Path:
    """The test profile's store, full of hostile text."""
    path = hermes_home / "state.db"
    write_hostile_store(path)
    return path


def assert_defused(text: str) -> None:
    """Assert text holds no raw control character besides our SGR codes, and no traceback."""
    bare = OUR_SGR.sub("", text)
    found = RAW_CONTROL.search(bare)
    assert found is None, f"raw {found.group()!r} reached the terminal in: {bare!r}"
    assert "Traceback" not in text and "MarkupError" not in text


# --- the rule itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]52;c;eA==\x07", "\\x1b]52;c;eA==\\x07"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\x9b31mb", "a\\u009b31mb"),
        ("\x7f", "\\x7f"),
        ("x\u202ey", "x\\u202ey"),
        ("\u2066\u2069", "\\u2066\\u2069"),
        ("cr\rhere", "cr\\rhere"),
        ("\x00\x0b\x0c", "\\x00\\x0b\\x0c"),
        ("lone \udcff", "lone \\udcff"),
        ("plain café 東京 ✓", "plain café 東京 ✓"),
    ],
)
def test_one_line_shows_every_terminal_control_as_an_escape(raw: str, shown: str) -> None:
    assert sanitize.one_line(raw) == shown


def test_multiline_keeps_newlines_and_tabs_and_escapes_the_rest() -> None:
    assert sanitize.multiline("a\n\tb\x1b[1mc\r\nd") == "a\n\tb\\x1b[1mc\nd"


def test_one_line_folds_newlines_and_tabs_into_spaces() -> None:
    assert sanitize.one_line("a\n\n\tb  c") == "a b c"


# --- every read command, every human mode ---------------------------------------------------


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_cli_runner_output_shows_hostile_text_escaped(hostile: Path, args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert_defused(result.stdout + result.stderr)


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_piped_output_shows_hostile_text_escaped(hostile: Path, args: tuple[str, ...]) -> None:
    proc = child(*args)
    assert proc.returncode == 0, proc.stderr
    assert_defused(proc.stdout + proc.stderr)


@pytest.mark.parametrize("no_color", [False, True], ids=["colour", "NO_COLOR"])
@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_terminal_output_shows_hostile_text_escaped(
    hostile: Path, args: tuple[str, ...], no_color: bool
) -> None:
    env = {"NO_COLOR": "1"} if no_color else {}
    result = pty_child(*args, "--no-pager", columns=100, env=env)
    assert result.returncode == 0, result.output
    assert_defused(result.output)
    if no_color:
        assert "\x1b" not in result.output


def test_transcript_prints_each_hostile_field_as_visible_escapes(hostile: Path) -> None:
    out = pty_child("sessions", "show", "hostile_1", "--no-pager", columns=200).output
    bare = OUR_SGR.sub("", out)
    assert sanitize.one_line(LINK_TITLE) in bare  # the title, with \x1b]0;pwned\x07 shown
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in bare  # the clipboard write, as text
    assert "\\x1b[2J\\x1b[8mhidden\\u202eevil" in bare
    assert "gpt\\u009b2J" in bare and "to\\x1bol" in bare and "rm\\x1b[31m" in bare
    assert "result \\x07 bell" in bare


def test_rich_markup_in_stored_text_is_printed_literally(hostile: Path) -> None:
    shown = pty_child("sessions", "list", "--no-pager", columns=200).output
    bare = OUR_SGR.sub("", shown)
    assert "[link=https://evil.example/]Fix Docker build[/]" in bare
    assert "closing [/bold] tag \\u009b31m" in bare
    assert "\x1b]8;" not in shown  # no hyperlink escape of any kind
    markup = pty_child("sessions", "show", "hostile_2", "--no-pager", columns=200).output
    assert MARKUP_CONTENT in OUR_SGR.sub("", markup)


@pytest.mark.parametrize("args", [("sessions", "list"), ("sessions", "stats")], ids=" ".join)
def test_a_closing_markup_tag_in_a_title_does_not_crash(
    hostile: Path, args: tuple[str, ...]
) -> None:
    result = pty_child(*args, "--no-pager", "--color", "always", columns=120)
    assert result.returncode == 0 and "[/bold]" in result.output


def test_an_error_message_naming_hostile_input_is_escaped(hostile: Path) -> None:
    result = pty_child("sessions", "show", "no" + OSC0 + "pe", columns=100)
    assert result.returncode == 1
    assert "\\x1b]0;pwned\\x07" in result.output
    assert_defused(result.output)


def test_a_hostile_session_id_and_title_in_prompts_and_messages_are_escaped(
    hostile: Path,
) -> None:
    result = pty_child("sessions", "delete", "hostile_1", columns=100, input="n\n")
    assert result.returncode == 1 and "Delete session" in result.output
    assert_defused(result.output)


# --- data formats stay exact ----------------------------------------------------------------


def test_json_keeps_hostile_text_exact_and_escaped(hostile: Path) -> None:
    proc = child("sessions", "list", "--json")
    by_id = {s["id"]: s for s in json.loads(proc.stdout)["sessions"]}
    assert by_id["hostile_1"]["title"] == LINK_TITLE
    assert by_id["hostile_1"]["model"] == MODEL
    assert by_id["hostile_2"]["source"] == SOURCE
    assert_defused(proc.stdout)  # C0 by JSON itself, C1 and bidi as \\u escapes


def test_show_json_on_a_terminal_is_exact_and_cannot_drive_it(hostile: Path) -> None:
    result = pty_child("sessions", "show", "hostile_1", "--json", columns=100)
    assert_defused(result.output)
    data = json.loads(result.output)
    assert data["messages"][0]["content"] == CONTENT
    assert data["messages"][2]["tool_name"] == TOOL


def test_csv_in_a_pipe_is_exact_and_on_a_terminal_is_escaped(hostile: Path) -> None:
    piped = child("sessions", "list", "--format", "csv").stdout
    rows = {r["id"]: r for r in csv.DictReader(io.StringIO(piped))}
    assert rows["hostile_1"]["title"] == LINK_TITLE
    shown = pty_child("sessions", "list", "--format", "csv", columns=100).output
    assert_defused(shown)
    assert sanitize.one_line(LINK_TITLE) in shown


def test_markdown_export_on_a_terminal_is_escaped_and_exact_in_a_file(
    hostile: Path, tmp_path: Path
) -> None:
    shown = pty_child("sessions", "export", "--format", "md", columns=100).output
    assert_defused(shown)
    assert "\\x1b]52;" in shown
    target = tmp_path / "out.md"
    assert child("sessions", "export", "--format", "md", "-o", str(target)).returncode == 0
    assert OSC52 in target.read_text(encoding="utf-8")
