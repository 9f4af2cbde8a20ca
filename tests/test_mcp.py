"""`hermes mcp`, driven by the MCP SDK's own client over stdio: a real `python -m hermes_cli mcp`
subprocess on a real store of the test's HERMES_HOME.

Every call is bounded (anyio.fail_after); a server that hangs fails the test instead of the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import string
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from clitools import child, load_sample
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from support.children import child_env, hermes_argv
from support.mcp_raw import write_locked

from hermes_cli.mcp.mcp_calls import MAX_RESULT_BYTES
from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store
from hermes_state.store.home import create_profile, default_db_path

T = TypeVar("T")
CALL_TIMEOUT_S = 20.0  # one test's whole conversation with its server
DOCKER_SESSION = "20261118_091502_a1c9e2"


def fake_key() -> str:
    """A made-up OpenAI-shaped key, assembled at run time (no key-shaped literal in the file)."""
    body = "".join(string.ascii_letters[(i * 7) % 52] for i in range(40)) + "1234"
    return "sk-" + "proj-" + body


@contextlib.asynccontextmanager
async def server(*args: str, errlog: Path) -> AsyncIterator[ClientSession]:
    """Start `hermes [global flags] mcp [args]` and yield an initialized client session."""
    global_flags = [a for a in args if a != "--no-redact"]
    own = [a for a in args if a == "--no-redact"]
    argv = hermes_argv(*global_flags, "mcp", *own)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=child_env())
    with errlog.open("a", encoding="utf-8") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write, read_timeout_seconds=timedelta(seconds=15)) as session,
        ):
            await session.initialize()
            yield session


def drive(tmp_path: Path, fn: Callable[[ClientSession], Awaitable[T]], *args: str) -> T:
    """Run fn against a new server (args: global flags, --no-redact); return what it returns."""
    errlog = tmp_path / "server-stderr.txt"

    async def main() -> T:
        with anyio.fail_after(CALL_TIMEOUT_S):
            async with server(*args, errlog=errlog) as session:
                return await fn(session)

    result = anyio.run(main)
    assert "Traceback" not in errlog.read_text(encoding="utf-8")
    return result


def data(result: types.CallToolResult) -> dict[str, Any]:
    """Return a successful call's structured answer (and check its text copy says the same)."""
    assert not result.isError, result.content
    assert result.structuredContent is not None
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    assert json.loads(text.text) == result.structuredContent
    return result.structuredContent


def error(result: types.CallToolResult) -> str:
    """Return a failed call's error text."""
    assert result.isError
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    return text.text


def add_session(sid: str, texts: list[str], *, title: str | None = None) -> None:
    """Write a session of user messages through the library."""
    with open_store(default_db_path()) as store:
        sessions.create_session(store, sid, "cli", started_at=1_790_000_000.0)
        if title is not None:
            sessions.set_session_title(store, sid, title)
        messages.append_messages(
            store,
            sid,
            [
                {"role": "user", "content": t, "timestamp": 1_790_000_001.0 + i}
                for i, t in enumerate(texts)
            ],
        )


# --- the tools ------------------------------------------------------------------------------


def test_the_server_offers_four_read_only_tools_with_schemas(tmp_path: Path) -> None:
    load_sample()

    async def go(s: ClientSession) -> types.ListToolsResult:
        return await s.list_tools()

    tools = {t.name: t for t in drive(tmp_path, go).tools}
    assert sorted(tools) == ["get_session", "get_usage", "list_sessions", "search_messages"]
    for tool in tools.values():
        assert tool.annotations is not None and tool.annotations.readOnlyHint is True
        assert tool.inputSchema["additionalProperties"] is False
        assert tool.outputSchema is not None and tool.description
    assert tools["search_messages"].inputSchema["required"] == ["query"]
    assert tools["get_session"].inputSchema["required"] == ["session"]


def test_search_answers_with_hits_and_how_they_were_found(tmp_path: Path) -> None:
    load_sample()

    async def go(s: ClientSession) -> dict[str, Any]:
        return data(await s.call_tool("search_messages", {"query": "docker"}))

    found = drive(tmp_path, go)
    assert found["hits"] and found["hits"][0]["session_id"] == DOCKER_SESSION
    assert found["hits"][0]["session_title"] == "Fix Docker build"
    assert ">>>Docker<<<" in found["hits"][0]["snippet"]
    assert found["partial"] is False and found["route"] == "word"
    assert found["ordering"] == "rank" and isinstance(found["ranked"], int)
    assert found["matches"] == len(found["hits"]) and found["sessions"] == 1
    assert found["complete"] is True
    assert found["profile"] == "default" and found["redacted"] is True


@pytest.mark.parametrize(
    ("arguments", "cli_flags"),
    [
        ({"query": "the"}, []),
        ({"query": "the", "roles": ["user"]}, ["--role", "user"]),
        ({"query": "the", "sources": ["telegram"]}, ["--source", "telegram"]),
        (
            {"query": "the", "exclude_sources": ["cli"], "sort": "oldest"},
            ["--exclude-source", "cli", "--sort", "oldest"],
        ),
        ({"query": "the -docker"}, []),
        ({"query": "the", "archived": True}, ["--archived"]),
    ],
    ids=["plain", "role", "source", "exclude-oldest", "exclusion", "archived"],
)
def test_search_finds_what_the_cli_search_finds(
    tmp_path: Path, arguments: dict[str, Any], cli_flags: list[str]
) -> None:
    load_sample()
    with open_store(default_db_path()) as store:
        sessions.set_session_archived(store, DOCKER_SESSION, True)  # left out unless archived
    cli = child("sessions", "search", arguments["query"], *cli_flags, "--limit", "10", "--json")
    assert cli.returncode == 0, cli.stderr
    want = [h["id"] for h in json.loads(cli.stdout)["hits"]]
    assert want  # a comparison of two empty answers would prove nothing

    async def go(s: ClientSession) -> dict[str, Any]:
        return data(await s.call_tool("search_messages", arguments))

    found = drive(tmp_path, go)
    assert [h["id"] for h in found["hits"]] == want
    cli_counts = json.loads(cli.stdout)
    assert [found[k] for k in ("matches", "sessions")] == [
        cli_counts[k] for k in ("matches", "sessions")
    ]


def test_list_sessions_pages_through_every_session_with_its_cursor(tmp_path: Path) -> None:
    load_sample()

    async def go(s: ClientSession) -> list[dict[str, Any]]:
        pages = [data(await s.call_tool("list_sessions", {"limit": 5}))]
        while pages[-1]["next_cursor"] is not None and len(pages) < 10:
            args = {"limit": 5, "cursor": pages[-1]["next_cursor"]}
            pages.append(data(await s.call_tool("list_sessions", args)))
        return pages

    pages = drive(tmp_path, go)
    ids = [row["id"] for page in pages for row in page["sessions"]]
    assert [len(p["sessions"]) for p in pages] == [5, 5, 2]
    assert len(set(ids)) == 12 and pages[0]["total"] == 12
    assert ids == sorted(ids, reverse=True)  # newest start first, as `sessions list`


def test_get_session_gives_metadata_and_pages_of_the_transcript(tmp_path: Path) -> None:
    load_sample()

    async def go(s: ClientSession) -> list[dict[str, Any]]:
        first = data(await s.call_tool("get_session", {"session": "Fix Docker build", "limit": 3}))
        args = {"session": "Fix Docker build", "limit": 3, "cursor": first["next_cursor"]}
        return [first, data(await s.call_tool("get_session", args))]

    first, second = drive(tmp_path, go)
    assert first["session"]["id"] == DOCKER_SESSION
    assert first["session"]["cwd"] == "/home/ana/src/shop-api"
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "tool"]
    assert first["messages"][1]["tool_calls"][0]["name"] == "terminal"
    assert [m["role"] for m in second["messages"]] == ["assistant", "user"]
    assert second["next_cursor"] is None


def test_get_session_keeps_to_the_roles_asked_for(tmp_path: Path) -> None:
    load_sample()

    async def go(s: ClientSession) -> dict[str, Any]:
        return data(await s.call_tool("get_session", {"session": "20261118", "roles": ["user"]}))

    assert [m["role"] for m in drive(tmp_path, go)["messages"]] == ["user", "user"]


def test_answers_are_bounded_in_bytes_and_continue_with_the_cursor(tmp_path: Path) -> None:
    load_sample()
    words = ("lorem ipsum dolor sit amet " * 700)[:16_000]
    add_session("20261203_101010_big000", [f"{i} {words}" for i in range(30)])

    async def go(s: ClientSession) -> list[dict[str, Any]]:
        args: dict[str, Any] = {
            "session": "20261203_101010_big000",
            "limit": 100,
            "max_chars": 16000,
        }
        pages = [data(await s.call_tool("get_session", args))]
        while pages[-1]["next_cursor"] is not None and len(pages) < 40:
            pages.append(
                data(await s.call_tool("get_session", {**args, "cursor": pages[-1]["next_cursor"]}))
            )
        return pages

    pages = drive(tmp_path, go)
    assert len(pages) > 1
    for page in pages:
        assert len(json.dumps(page, ensure_ascii=False).encode()) <= MAX_RESULT_BYTES + 4096
    got = [m["content"] for page in pages for m in page["messages"]]
    assert [c.split(" ", 1)[0] for c in got] == [str(i) for i in range(30)]


def test_a_long_message_is_cut_and_says_how_long_it_was(tmp_path: Path) -> None:
    add_session("20261203_101010_long00", ["x" * 10_000])

    async def go(s: ClientSession) -> dict[str, Any]:
        args = {"session": "20261203_101010_long00", "max_chars": 500}
        return data(await s.call_tool("get_session", args))

    msg = drive(tmp_path, go)["messages"][0]
    assert msg["content"] == "x" * 500 and msg["truncated"] == {"content": 10_000}


def test_get_usage_gives_the_figures_of_hermes_usage(tmp_path: Path) -> None:
    load_sample()
    cli = child("usage", "--by", "source", "--json")
    assert cli.returncode == 0, cli.stderr
    want = json.loads(cli.stdout)

    async def go(s: ClientSession) -> dict[str, Any]:
        return data(await s.call_tool("get_usage", {"by": "source"}))

    got = drive(tmp_path, go)
    assert got["totals"] == want["totals"] and got["groups"] == want["groups"]
    assert got["group_count"] == len(want["groups"]) and got["next_cursor"] is None


def test_get_usage_pages_its_groups_with_the_cursor(tmp_path: Path) -> None:
    load_sample()

    async def go(s: ClientSession) -> list[dict[str, Any]]:
        args: dict[str, Any] = {"by": "session", "limit": 5}
        pages = [data(await s.call_tool("get_usage", args))]
        while pages[-1]["next_cursor"] is not None and len(pages) < 10:
            args["cursor"] = pages[-1]["next_cursor"]
            pages.append(data(await s.call_tool("get_usage", args)))
        return pages

    pages = drive(tmp_path, go)
    ids = [g["session_id"] for page in pages for g in page["groups"]]
    assert len(ids) == len(set(ids)) == pages[0]["group_count"] > 5


def test_the_usage_groupings_are_the_librarys() -> None:
    from hermes_cli.mcp.mcp_schemas import USAGE_GROUPINGS
    from hermes_state.reports.usage_report import GROUPINGS

    assert USAGE_GROUPINGS == GROUPINGS


# --- bad input ------------------------------------------------------------------------------


# (case, tool, arguments, what the error says)
BAD_INPUT: list[tuple[str, str, dict[str, Any], str]] = [
    ("unknown session", "get_session", {"session": "no-such"}, "Error (session_not_found)"),
    ("dangling operator", "search_messages", {"query": "docker AND"}, "Error (bad_query)"),
    ("parenthesis", "search_messages", {"query": "(docker"}, "Error (bad_query)"),
    ("limit too large", "search_messages", {"query": "x", "limit": 500}, "500 is greater than"),
    ("limit zero", "list_sessions", {"limit": 0}, "0 is less than the minimum"),
    ("unknown argument", "list_sessions", {"lmit": 5}, "'lmit' was unexpected"),
    ("bad since", "search_messages", {"query": "x", "since": "the other day"}, "): since"),
    ("unknown source", "search_messages", {"query": "x", "sources": ["nowhere"]}, "): sources"),
    ("garbage cursor", "list_sessions", {"cursor": "not-a-cursor"}, "Error (bad_cursor)"),
    ("missing session", "get_session", {}, "'session' is a required property"),
    ("unknown tool", "drop_tables", {}, "Error (unknown_tool)"),
    ("unknown model", "get_usage", {"models": ["no/such-model"]}, "Error (bad_argument): models"),
    ("unknown grouping", "get_usage", {"by": "year"}, "'year' is not one of"),
    ("empty range", "get_usage", {"since": "2026-02-01", "until": "2026-01-01"}, "not before"),
]


def test_bad_input_is_an_mcp_tool_error_and_the_server_goes_on(tmp_path: Path) -> None:
    load_sample()

    async def go(s: ClientSession) -> list[tuple[str, str, types.CallToolResult]]:
        answers = []
        for case, tool, arguments, expected in BAD_INPUT:
            answers.append((case, expected, await s.call_tool(tool, arguments)))
            after = await s.call_tool("list_sessions", {"limit": 1})  # still serving
            assert data(after)["sessions"], case
        return answers

    wrong = [
        (case, result.content)
        for case, expected, result in drive(tmp_path, go)
        if not (result.isError and expected in error(result))
    ]
    assert wrong == []


def test_a_cursor_of_other_arguments_is_refused(tmp_path: Path) -> None:
    load_sample()

    async def go(s: ClientSession) -> types.CallToolResult:
        page = data(await s.call_tool("list_sessions", {"limit": 2}))
        return await s.call_tool("list_sessions", {"limit": 3, "cursor": page["next_cursor"]})

    assert "Error (bad_cursor): cursor: it belongs to a call with other arguments" in error(
        drive(tmp_path, go)
    )


# --- concurrency, a vanishing store, a locked store ----------------------------------------

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("search_messages", {"query": "docker"}),
    ("search_messages", {"query": "the", "sort": "newest"}),
    ("list_sessions", {"limit": 3}),
    ("get_session", {"session": DOCKER_SESSION}),
    ("search_messages", {"query": "会議"}),
    ("get_session", {"session": "no-such-session"}),
] * 2


def test_several_calls_at_once_each_get_their_own_answer(tmp_path: Path) -> None:
    load_sample()

    async def go(s: ClientSession) -> tuple[list[Any], list[Any]]:
        one_by_one = [await s.call_tool(name, args) for name, args in CALLS]
        together: list[Any] = [None] * len(CALLS)

        async def call(i: int) -> None:
            together[i] = await s.call_tool(*CALLS[i])

        async with anyio.create_task_group() as tg:
            for i in range(len(CALLS)):
                tg.start_soon(call, i)
        return one_by_one, together

    one_by_one, together = drive(tmp_path, go)
    for alone, at_once in zip(one_by_one, together, strict=True):
        assert (alone.isError, alone.structuredContent) == (
            at_once.isError,
            at_once.structuredContent,
        )
    assert sum(r.isError for r in together) == 2


def test_a_store_that_disappears_mid_session_is_reported_then_found_again(tmp_path: Path) -> None:
    db = load_sample()

    async def go(s: ClientSession) -> list[types.CallToolResult]:
        before = await s.call_tool("list_sessions", {})
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}-journal")):
            path.unlink(missing_ok=True)
        gone = [await s.call_tool(name, args) for name, args in CALLS[:4]]
        load_sample()
        back = await s.call_tool("list_sessions", {})
        return [before, *gone, back]

    before, *gone, back = drive(tmp_path, go)
    assert data(before)["total"] == 12
    for result in gone:
        assert error(result).startswith("Error (store_not_found)")
    assert data(back)["total"] == 12


def test_a_locked_store_is_an_error_after_a_bounded_wait_never_a_hang(tmp_path: Path) -> None:
    db = load_sample()
    locker: dict[str, Any] = {}

    async def go(s: ClientSession) -> tuple[types.CallToolResult, float, types.CallToolResult]:
        with write_locked(db) as proc:
            locker["pid"] = proc.pid
            started = time.monotonic()
            locked = await s.call_tool("search_messages", {"query": "docker"})
            waited = time.monotonic() - started
        return locked, waited, await s.call_tool("search_messages", {"query": "docker"})

    locked, waited, after = drive(tmp_path, go, "--wait", "1")
    text = error(locked)
    assert text.startswith("Error (store_locked)") and f"PID {locker['pid']}" in text
    assert 1.0 <= waited < 10.0
    assert data(after)["hits"]


# --- redaction, profiles, read-only ---------------------------------------------------------


def test_secrets_are_redacted_by_default_and_shown_with_no_redact(tmp_path: Path) -> None:
    key = fake_key()
    add_session(
        "20261203_090000_secret",
        [f"deploy failed; I exported OPENAI_API_KEY={key} before", "password=hunter22 works"],
        title=f"deploy with {key}",
    )

    async def go(s: ClientSession) -> list[dict[str, Any]]:
        return [
            data(await s.call_tool("search_messages", {"query": "deploy"})),
            data(await s.call_tool("get_session", {"session": "20261203_090000"})),
            data(await s.call_tool("list_sessions", {})),
        ]

    redacted = drive(tmp_path, go)
    assert key not in json.dumps(redacted) and "hunter22" not in json.dumps(redacted)
    hit = redacted[0]["hits"][0]
    assert "[REDACTED:openai_key]" in hit["snippet"]
    assert hit["session_title"] == "deploy with [REDACTED:openai_key]"
    assert redacted[1]["messages"][1]["content"] == "password=[REDACTED:password] works"
    assert redacted[2]["sessions"][0]["title"] == "deploy with [REDACTED:openai_key]"
    shown = drive(tmp_path, go, "--no-redact")
    assert key in shown[1]["messages"][0]["content"] and shown[0]["redacted"] is False


def test_the_profile_flag_chooses_the_store(tmp_path: Path) -> None:
    load_sample()
    home = create_profile("coder")
    with open_store(home / "state.db") as store:
        sessions.create_session(store, "20261203_222222_coder1", "cli", started_at=1.79e9)

    async def go(s: ClientSession) -> dict[str, Any]:
        return data(await s.call_tool("list_sessions", {}))

    listed = drive(tmp_path, go, "-p", "coder")
    assert listed["profile"] == "coder"
    assert [r["id"] for r in listed["sessions"]] == ["20261203_222222_coder1"]


def test_the_server_never_writes_the_store(tmp_path: Path, sha256: Callable[[Path], str]) -> None:
    db = load_sample()
    before = (sha256(db), os.stat(db).st_mtime_ns, sorted(p.name for p in db.parent.iterdir()))

    async def go(s: ClientSession) -> None:
        for name, args in CALLS:
            await s.call_tool(name, args)

    drive(tmp_path, go)
    assert (
        sha256(db),
        os.stat(db).st_mtime_ns,
        sorted(p.name for p in db.parent.iterdir()),
    ) == before


def test_stored_text_comes_back_as_data(tmp_path: Path) -> None:
    hostile = 'line\x00one\x1b[31m red \u2028 {"jsonrpc": "2.0", "id": 1, "result": {}}\n'
    add_session("20261203_123456_hostil", [hostile])

    async def go(s: ClientSession) -> dict[str, Any]:
        return data(await s.call_tool("get_session", {"session": "20261203_123456_hostil"}))

    assert drive(tmp_path, go)["messages"][0]["content"] == hostile


def test_a_client_that_goes_away_ends_the_server_quietly() -> None:
    load_sample()
    proc = subprocess.Popen(
        hermes_argv("mcp"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    proc.stdin.write(
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
    )
    proc.stdin.write("\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], 15)
    assert ready and '"id":1' in proc.stdout.readline()
    proc.stdout.close()  # the client stops reading...
    for request in (
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_sessions"}},
    ):
        proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()
    time.sleep(0.5)  # ...while the server answers into the closed pipe
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    assert proc.wait(timeout=15) == 0
    assert "Traceback" not in proc.stderr.read()


def test_other_commands_never_load_the_mcp_sdk() -> None:
    code = (
        "import sys\n"
        "from hermes_cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('\\nLOADED ' + ' '.join(m for m in sys.modules if m.split('.')[0] "
        "in ('mcp', 'pydantic', 'anyio')) + '\\n')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=60
    )
    assert proc.stderr.strip().splitlines()[-1] == "LOADED", proc.stderr


def test_a_match_inside_a_redacted_secret_is_no_hit_and_not_counted(tmp_path: Path) -> None:
    stripe = "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    aws = "AKIA" + "IOSFODNN7EXAMPLE"
    add_session(
        "20261203_090000_oracle",
        [
            f"the billing key is {stripe} keep it safe",
            f"aws_access_key_id = {aws}",
            "plain words about billing",
        ],
    )
    # Prefix probes (the next character of the secret), the whole secret, a piece of it found
    # by substring (trigram), and an exclusion that would leave the message out.
    probes = [f"{stripe[:12]}{c}*" for c in (stripe[12], "x", "q")] + [
        f'"{stripe}"',
        stripe[9:17],
        f"{aws[:8]}*",
        "billing -" + stripe[:14] + "*",
        "keep safe",
    ]

    async def go(s: ClientSession) -> list[dict[str, Any]]:
        return [data(await s.call_tool("search_messages", {"query": q})) for q in probes]

    redacted = drive(tmp_path, go)
    counted = [(r["matches"], len(r["hits"])) for r in redacted]
    # Only the words outside secrets match: "billing" twice (the exclusion reaches no secret),
    # "keep safe" once.
    assert counted == [(0, 0)] * 6 + [(2, 2), (1, 1)], counted
    assert stripe not in json.dumps(redacted)
    shown = drive(tmp_path, go, "--no-redact")
    assert [r["matches"] for r in shown][:4] == [1, 0, 0, 1]
    assert shown[6]["matches"] == 1  # without redaction the exclusion does its work
