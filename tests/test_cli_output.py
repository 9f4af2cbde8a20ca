"""Output that fits a person's terminal and a script's pipe: widths, formats, colour, vocabulary."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from clitools import REPO_ROOT, child, load_sample, pty_child, run

from hermes_cli.completion import man_page
from hermes_cli.rendering import output, records
from hermes_cli.rendering.layout import display_width

SGR = re.compile(r"\x1b\[[0-9;]*m")
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
SAMPLE_IDS = [
    "20261201_171845_4e5f60",
    "20261130_091233_3d4e5f",
    "20261129_030000_2c3d4e",
    "20261128_220940_1b2c3d",
    "20261126_140501_0a7c55",
    "20261124_183322_f00d01",
    "20261122_113000_e11b21",
    "20261122_101500_e11b20",
    "20261121_060000_d90a11",
    "20261120_160245_c3f871",
    "20261119_073011_b7d401",
    "20261118_091502_a1c9e2",
]
CHAT_SEND = "20261120_160245_c3f871"
WIDTHS = (60, 80, 120, 200)


@pytest.fixture
def sample(hermes_home: Path) -> Path:
    """The test profile's store, filled with examples/sample-sessions.jsonl."""
    return load_sample()


def bare(text: str) -> str:
    """Return terminal output without our colour codes."""
    return SGR.sub("", text)


def assert_no_number_cut(text: str) -> None:
    """Assert no figure ends in an ellipsis (`$83.…`, `12…`)."""
    assert re.search(r"[0-9$][.,]?…", text) is None, text


def assert_fits(text: str, width: int) -> None:
    """Assert every line fits in width terminal cells."""
    for line in bare(text).splitlines():
        assert display_width(line) <= width, (width, line)


# --- widths ---------------------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_list_on_a_terminal_keeps_every_id_whole_and_fits_the_width(
    sample: Path, width: int
) -> None:
    result = pty_child("sessions", "list", "--no-pager", columns=width)
    assert result.returncode == 0, result.output
    text = bare(result.output)
    for sid in SAMPLE_IDS:
        assert re.search(rf"^{sid}  ", text, re.MULTILINE), (width, sid)
    assert_no_number_cut(text)
    assert_fits(text, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_list_all_profiles_on_a_terminal_keeps_every_id_whole(sample: Path, width: int) -> None:
    text = bare(pty_child("sessions", "list", "--all-profiles", "--no-pager", columns=width).output)
    assert all(sid in text for sid in SAMPLE_IDS)
    assert_no_number_cut(text)
    assert_fits(text, width)


def test_list_names_the_columns_a_narrow_terminal_left_out_in_the_documented_order(
    sample: Path,
) -> None:
    narrow = bare(pty_child("sessions", "list", "--no-pager", columns=60).output)
    assert "Not shown at 60 columns: Source, Model, Tokens" in narrow
    medium = bare(pty_child("sessions", "list", "--no-pager", columns=80).output)
    assert "Not shown at 80 columns: Model " in medium
    wide = bare(pty_child("sessions", "list", "--no-pager", columns=200).output)
    assert "Not shown" not in wide and "anthropic/claude-sonnet-4" in wide


@pytest.mark.parametrize("width", WIDTHS)
def test_search_on_a_terminal_prints_blocks_with_whole_ids(sample: Path, width: int) -> None:
    text = bare(pty_child("sessions", "search", "chat-send", "--no-pager", columns=width).output)
    # The session titled "chat-send rate limits" comes first, as a title match.
    titled, _, text = text.partition("1 session with a matching title.")
    assert titled.startswith("Title matches:\n" + CHAT_SEND + " · chat-send")
    headers = [line for line in text.splitlines() if " · " in line and not line.startswith(" ")]
    assert len(headers) == 6
    assert all(line.split(" · ")[0] in (CHAT_SEND, "20261121_060000_d90a11") for line in headers)
    snippets = [line for line in text.splitlines() if line.startswith("    ")]
    assert snippets and all(display_width(line) <= width for line in snippets)
    assert_fits(text, width)


def test_search_snippets_wrap_by_words_not_one_word_per_line(sample: Path) -> None:
    text = bare(pty_child("sessions", "search", "digest", "--no-pager", columns=80).output)
    snippet_lines = [line.strip() for line in text.splitlines() if line.startswith("    ")]
    assert sum(len(line.split()) for line in snippet_lines) / len(snippet_lines) > 4


@pytest.mark.parametrize("width", WIDTHS)
def test_show_on_a_terminal_keeps_the_id_whole(sample: Path, width: int) -> None:
    text = bare(pty_child("sessions", "show", CHAT_SEND, "--no-pager", columns=width).output)
    assert f"Session:  {CHAT_SEND}" in text
    rules = [line for line in text.splitlines() if line.startswith("── ")]
    assert len(rules) == 4 and all(display_width(line) == width for line in rules)


@pytest.mark.parametrize("width", WIDTHS)
def test_stats_on_a_terminal_never_cuts_a_number(sample: Path, width: int) -> None:
    text = bare(pty_child("sessions", "stats", "--no-pager", columns=width).output)
    assert "20261122_101500_e11b20" in text and "Sessions:       12" in text
    assert_no_number_cut(text)
    # Every line fits but the store's path, which is printed whole like an id.
    assert_fits("\n".join(x for x in text.splitlines() if not x.startswith("Store:")), width)
    data = run("sessions", "stats", "--json")
    top_cost = json.loads(data.stdout)["by_model"][0]["cost_usd"]
    assert f"${top_cost:,.2f}" in text


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("db", "check"), ["ok    schema: v31", "Store is healthy."]),
        (("db", "path"), ["STORE"]),
        (("db", "lockowners"), ["No process holds or has open"]),
        (("profile", "list"), ["default  *", "Profile  Active"]),
        (("profile", "show"), ["Profile:      default", "Sticky:       yes", "Total size:   "]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else "",
)
def test_other_read_commands_render_at_every_width(
    sample: Path, width: int, args: tuple[str, ...], expected: list[str]
) -> None:
    result = pty_child(*args, columns=width)
    assert result.returncode == 0, result.output
    text = bare(result.output)
    for piece in expected:
        assert (str(sample) if piece == "STORE" else piece) in text, (width, piece)
    assert_no_number_cut(text)
    assert "Traceback" not in result.output


def test_piped_list_is_whole_stable_and_absolute(sample: Path) -> None:
    out = child("sessions", "list").stdout
    assert "…" not in out.replace("mode in…", "")  # only the library's own preview ellipsis
    assert "anthropic/claude-sonnet-4" in out and " ago" not in out and "yesterday" not in out
    header = out.splitlines()[0]
    assert header.split() == [
        "ID",
        "Title",
        "/",
        "preview",
        "Source",
        "Model",
        "Msgs",
        "Tokens",
        "Last",
        "active",
    ]
    assert child("sessions", "list").stdout == out  # the same twice: stable


def test_piped_search_prints_whole_snippets_on_one_line(sample: Path) -> None:
    out = child("sessions", "search", "digest").stdout
    snippet = next(line for line in out.splitlines() if line.startswith("    The channel"))
    assert snippet.endswith("add a 1 s delay between sends.")


# --- colour ---------------------------------------------------------------------------------


def test_no_color_removes_only_the_colour(sample: Path) -> None:
    coloured = pty_child("sessions", "list", "--no-pager", columns=100).output
    plain = pty_child("sessions", "list", "--no-pager", columns=100, env={"NO_COLOR": "1"}).output
    assert "\x1b[" in coloured and "\x1b[" not in plain
    assert bare(coloured) == plain


@pytest.mark.parametrize(
    ("args", "env", "coloured"),
    [
        (("--color", "always"), {}, True),
        ((), {"FORCE_COLOR": "1"}, True),
        ((), {"FORCE_COLOR": "1", "NO_COLOR": "1"}, True),
        (("--color", "never"), {"FORCE_COLOR": "1"}, False),
        ((), {}, False),
    ],
)
def test_colour_in_a_pipe_follows_color_and_force_color(
    sample: Path, args: tuple[str, ...], env: dict[str, str], coloured: bool
) -> None:
    out = child("sessions", "list", *args, env={"NO_COLOR": "", "FORCE_COLOR": "", **env}).stdout
    assert ("\x1b[" in out) is coloured


@pytest.mark.parametrize(
    ("args", "env"),
    [(("--color", "never"), {}), ((), {"FORCE_COLOR": "0"}), ((), {"TERM": "dumb"})],
)
def test_colour_on_a_terminal_can_be_turned_off(
    sample: Path, args: tuple[str, ...], env: dict[str, str]
) -> None:
    out = pty_child("sessions", "search", "docker", "--no-pager", *args, columns=100, env=env)
    assert "\x1b[" not in out.output and "20261118_091502_a1c9e2" in out.output


def test_colour_highlights_the_matches_in_reverse_video_without_the_marks(sample: Path) -> None:
    out = pty_child("sessions", "search", "docker", "--no-pager", columns=100).output
    assert "\x1b[1;7;33mDocker\x1b[0m" in out and ">>>" not in out and "<<<" not in out


@pytest.mark.parametrize("columns", [60, 100])
def test_no_color_marks_the_matches_and_keeps_every_word(sample: Path, columns: int) -> None:
    # Colour or marks, never both: the words are the same, the marks only where colour is not.
    args = ("sessions", "search", "docker", "--no-pager")
    coloured = pty_child(*args, columns=columns).output
    plain = pty_child(*args, columns=columns, env={"NO_COLOR": "1"}).output
    assert "\x1b[" in coloured and "\x1b[" not in plain
    assert ">>>Docker<<<" in plain
    unmarked = plain.replace(">>>", "").replace("<<<", "")
    assert bare(coloured).split() == unmarked.split()
    assert_fits(coloured, columns)


# --- formats --------------------------------------------------------------------------------


def _records(args: tuple[str, ...], document: Any) -> list[dict[str, Any]]:
    """The records --format jsonl/csv/tsv should print, taken from the --json document."""
    command = args[:2]
    if command == ("sessions", "list"):
        return document["sessions"]
    if command == ("sessions", "search"):
        return document["hits"]
    if command == ("sessions", "show"):
        return document["messages"]
    if command == ("sessions", "stats"):
        return list(records.stats_rows(document))
    if command == ("db", "check"):
        return document["checks"]
    if command == ("profile", "list"):
        return document["profiles"]
    return [document]


FORMAT_COMMANDS = [
    ("sessions", "list"),
    ("sessions", "search", "chat-send"),
    ("sessions", "show", CHAT_SEND),
    ("sessions", "stats"),
    ("db", "check"),
    ("db", "path"),
    ("profile", "list"),
    ("profile", "show"),
]


@pytest.mark.parametrize("args", FORMAT_COMMANDS, ids=" ".join)
def test_jsonl_csv_and_tsv_parse_with_the_standard_library_and_match_json(
    sample: Path, args: tuple[str, ...]
) -> None:
    document = json.loads(run(*args, "--json").stdout)
    expected = _records(args, document)
    assert expected
    jsonl = run(*args, "--format", "jsonl").stdout
    assert [json.loads(line) for line in jsonl.splitlines()] == expected
    want = [{k: output.cell(v) for k, v in r.items()} for r in expected]
    text = run(*args, "--format", "csv").stdout
    assert list(csv.DictReader(io.StringIO(text))) == want
    text = run(*args, "--format", "tsv").stdout
    reader = csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
    header, *lines = list(reader)
    assert len(lines) == len(want)  # one record per line, whatever the text holds
    got = [{k: output.tsv_unescape(v) for k, v in zip(header, line, strict=True)} for line in lines]
    assert got == want


def test_tsv_keeps_multi_line_text_on_one_line_for_cut(sample: Path) -> None:
    out = run("sessions", "search", "会議", "--format", "tsv").stdout
    lines = out.splitlines()
    assert len(lines) == 1 + len(
        json.loads(run("sessions", "search", "会議", "--json").stdout)["hits"]
    )
    assert all(line.count("\t") == len(records.HIT_KEYS) - 1 for line in lines)
    assert "\\n- 水曜" in out  # the snippet's newline, escaped


def test_json_is_an_alias_of_format_json(sample: Path) -> None:
    assert (
        run("sessions", "list", "--json").stdout
        == run("sessions", "list", "--format", "json").stdout
    )


def test_json_and_a_different_format_together_are_a_usage_error(sample: Path) -> None:
    result = run("sessions", "list", "--json", "--format", "csv")
    assert result.exit_code == 2 and "--json and --format csv disagree" in result.stderr


def test_show_jsonl_streams_one_message_per_line(sample: Path) -> None:
    lines = run("sessions", "show", CHAT_SEND, "--format", "jsonl", "--tail", "2").stdout
    assert [json.loads(line)["role"] for line in lines.splitlines()] == ["tool", "assistant"]


# --- one vocabulary, documented -------------------------------------------------------------


def _walk(value: Any, key: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _walk(v, k)]
    if isinstance(value, list):
        return [kv for v in value for kv in _walk(v, key)]
    return [(key, value)]


@pytest.mark.parametrize(
    "args",
    [
        ("sessions", "list"),
        ("sessions", "search", "chat-send"),
        ("sessions", "show", CHAT_SEND),
        ("sessions", "stats"),
    ],
    ids=" ".join,
)
def test_times_are_iso_utc_and_flags_are_booleans_everywhere(
    sample: Path, args: tuple[str, ...]
) -> None:
    pairs = _walk(json.loads(run(*args, "--json").stdout))
    times = [v for k, v in pairs if k.endswith("_at")]
    assert all(v is None or ISO_UTC.match(v) for v in times)
    assert times or args[1] == "stats"  # stats carries no times
    flags = [v for k, v in pairs if k in ("archived", "pinned", "active", "compacted")]
    assert all(isinstance(v, bool) for v in flags)
    assert not [k for k, _ in pairs if k in ("timestamp", "last_active", "total_sessions")]


@pytest.mark.parametrize(
    ("args", "pick", "keys"),
    [
        (("sessions", "list"), lambda d: d["sessions"][0], records.SESSION_KEYS),
        (("sessions", "search", "chat-send"), lambda d: d["hits"][0], records.HIT_KEYS),
        # show also says which store it read (`vault`: a year, or null for the live store)
        (
            ("sessions", "show", CHAT_SEND),
            lambda d: {k: v for k, v in d["messages"][0].items() if k != "vault"},
            records.MESSAGE_KEYS,
        ),
        (
            ("sessions", "show", CHAT_SEND),
            lambda d: {k: v for k, v in d.items() if k not in ("messages", "vault")},
            records.SESSION_KEYS,
        ),
        (("sessions", "stats"), lambda d: d, records.STATS_KEYS),
        (("sessions", "stats"), lambda d: d["by_source"][0], records.SOURCE_KEYS),
        (("sessions", "stats"), lambda d: d["by_model"][0], records.MODEL_KEYS),
        (("sessions", "stats"), lambda d: d["top_sessions"][0], records.TOP_SESSION_KEYS),
        (("sessions", "stats"), lambda d: d["store"], records.STORE_KEYS),
        (("db", "check"), lambda d: d["checks"][0], records.CHECK_KEYS),
        (("profile", "list"), lambda d: d["profiles"][0], records.PROFILE_KEYS),
    ],
)
def test_the_keys_emitted_are_the_keys_the_man_page_documents(
    sample: Path, args: tuple[str, ...], pick: Any, keys: tuple[str, ...]
) -> None:
    emitted = pick(json.loads(run(*args, "--json").stdout))
    assert tuple(emitted) == keys
    page = (REPO_ROOT / "man" / "hermes.1").read_text(encoding="utf-8")
    assert man_page.roff_text(", ".join(keys)) in page.replace("\n", " ")


def test_lockowners_records_list_holders_and_openers_like_json(sample: Path, hold_store) -> None:  # type: ignore[no-untyped-def]
    holder = hold_store(sample, "lock")
    document = json.loads(run("db", "lockowners", "--json").stdout)
    assert document["path"] == str(sample) and "db_path" not in document
    rows = [json.loads(x) for x in run("db", "lockowners", "--format", "jsonl").stdout.splitlines()]
    assert rows == records.lock_rows(document)
    assert any(r["pid"] == holder.proc.pid and r["access"] == "WRITE" for r in rows)
    assert all(tuple(r) == records.LOCK_ROW_KEYS for r in rows)
