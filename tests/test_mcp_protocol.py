"""`hermes mcp` on the wire, driven by a raw JSON-RPC client: a cancelled call is answered once
and the server goes on, malformed lines get an error reply, SIGINT/SIGTERM end it, refusals are
text with their hint, and no answer line outgrows the size bound."""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

import pytest
from clitools import load_sample
from support.mcp_raw import raw_server, write_locked

from hermes_cli.mcp.mcp_calls import MAX_RESULT_BYTES
from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store
from hermes_state.store.home import default_db_path


def cancel(client: Any, id_: int) -> None:
    """Send the notification that cancels request id_."""
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": id_, "reason": "test"},
        }
    )


@pytest.mark.parametrize("outcome", ["answer", "refusal"])
def test_a_cancelled_call_is_answered_once_and_the_server_goes_on(outcome: str) -> None:
    db = load_sample()
    # The call waits for a lock (--wait 3); the cancel comes while it waits. The worker then
    # finishes with an answer (the lock goes after 1 s) or a refusal (it outlasts the wait).
    hold, worker_done = (1.0, 1.8) if outcome == "answer" else (30.0, 3.8)
    with raw_server("--wait", "3") as client:
        with write_locked(db, seconds=hold):
            cancelled = client.call("search_messages", {"query": "docker"})
            time.sleep(0.3)
            cancel(client, cancelled)
            first = client.reply(cancelled, timeout=10)
            time.sleep(worker_done - 0.3)
        after = client.reply(client.call("list_sessions", {"limit": 1}), timeout=15)
        client.read_line(0.5)  # a late second answer would be here
        replies = client.replies_to(cancelled)
        status, stderr = client.close(), client.stderr()
    assert len(replies) == 1, replies
    assert "error" in first  # the SDK answers a cancelled request with an error
    assert after["result"]["structuredContent"]["sessions"]
    assert status == 0 and "already responded" not in stderr


def test_many_cancelled_calls_leave_the_server_serving() -> None:
    db = load_sample()
    with raw_server("--wait", "2") as client, write_locked(db, seconds=1.0):
        ids = [client.call("search_messages", {"query": f"docker{i}"}) for i in range(6)]
        time.sleep(0.2)
        for id_ in ids:
            cancel(client, id_)
        time.sleep(2.5)
        after = client.reply(client.call("search_messages", {"query": "docker"}), timeout=15)
        client.read_line(0.5)
        counts = [len(client.replies_to(id_)) for id_ in ids]
    assert counts == [1] * 6
    assert after["result"]["structuredContent"]["hits"]


# (case, bytes sent, the id the reply carries, its error code)
MALFORMED: list[tuple[str, bytes, int | None, int]] = [
    ("garbage line", b"this is not json\n", None, -32700),
    ("invalid utf-8", b'{"jsonrpc": "2.0", "id": 7, "method": "ping"\xff}\n', None, -32700),
    (
        "lone surrogate",
        b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"search_messages",'
        b'"arguments":{"query":"a\\ud800b"}}}\n',
        8,
        -32600,
    ),
    ("unknown method", b'{"jsonrpc":"2.0","id":9,"method":"no/such"}\n', 9, -32601),
    ("not an object", b"[1, 2, 3]\n", None, -32600),
    ("no jsonrpc", b'{"id": 10, "method": "ping"}\n', 10, -32600),
    (
        "bad params",
        b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"arguments":{}}}\n',
        11,
        -32602,
    ),
]


@pytest.mark.parametrize(
    ("sent", "id_", "code"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_a_malformed_request_gets_a_json_rpc_error_reply(
    sent: bytes, id_: int | None, code: int
) -> None:
    load_sample()
    with raw_server() as client:
        client.send_bytes(sent)
        reply = client.reply(id_, timeout=10)
        assert reply["error"]["code"] == code and reply["error"]["message"]
        after = client.reply(client.call("list_sessions", {"limit": 1}))
    assert after["result"]["structuredContent"]["sessions"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("busy", [False, True], ids=["idle", "mid-call"])
def test_sigint_and_sigterm_end_the_server_within_two_seconds(
    signum: signal.Signals, busy: bool
) -> None:
    db = load_sample()
    with raw_server("--wait", "20") as client, write_locked(db, seconds=25):
        if busy:
            client.call("search_messages", {"query": "docker"})  # waits for the lock
            time.sleep(0.3)
        started = time.monotonic()
        client.proc.send_signal(signum)
        status = client.proc.wait(timeout=10)
        took = time.monotonic() - started
    assert took < 2.0 and status == 128 + signum


def test_a_refusal_is_text_with_its_hint_and_no_structured_content() -> None:
    load_sample()
    with raw_server() as client:
        results = [
            client.reply(client.call(tool, args))["result"]
            for tool, args in [
                ("get_session", {"session": "no-such"}),
                ("search_messages", {"query": "docker AND"}),
                ("list_sessions", {"cursor": "garbage"}),
                ("get_usage", {"models": ["no/such-model"]}),
                ("drop_tables", {}),
            ]
        ]
    for result in results:
        assert result["isError"] is True and "structuredContent" not in result
        text = result["content"][0]["text"]
        assert text.startswith("Error (") and "\nHint: " in text, text


@pytest.mark.parametrize("padding", [0, 30], ids=["whole", "cut-at-80"])
def test_a_lock_holders_command_line_is_redacted_in_the_refusal(padding: int) -> None:
    db = load_sample()
    token = "ghp_" + "Zq7" * 12
    # padding moves the token over the 80th character, where the command line is cut with "…".
    extra = ("--pad", "p" * padding, "--token", token) if padding else ("--token", token)
    with raw_server("--wait", "0.5") as client, write_locked(db, extra_argv=extra) as locker:
        text = client.reply(client.call("search_messages", {"query": "docker"}))["result"]
    text = text["content"][0]["text"]
    assert text.startswith("Error (store_locked)") and f"PID {locker.pid}" in text
    assert "Zq7Zq7" not in text and "[REDACTED:" in text, text


def test_every_answer_line_stays_within_the_bound_on_the_wire() -> None:
    # Text that grows when written as JSON: control characters (6 bytes each), quotes and
    # backslashes (2), CJK (3 bytes) - in content, tool calls and reasoning of one message.
    heavy = ('\x01"\\会' * 4000)[:16_000]
    call = {"id": "c", "function": {"name": "terminal", "arguments": heavy[:2000]}}
    sid = "20261203_101010_heavy0"
    with open_store(default_db_path()) as store:
        sessions.create_session(store, sid, "cli", started_at=1_790_000_000.0)
        messages.append_messages(
            store,
            sid,
            [
                {
                    "role": "assistant",
                    "content": f"{i} {heavy}",
                    "reasoning": heavy,
                    "tool_calls": [call] * 20,
                    "timestamp": 1_790_000_001.0 + i,
                }
                for i in range(8)
            ],
        )
    args: dict[str, Any] = {"session": sid, "limit": 100, "max_chars": 16_000, "reasoning": True}
    seen: list[int] = []
    with raw_server() as client:
        cursor = None
        for _ in range(60):
            page = client.reply(
                client.call("get_session", {**args, **({"cursor": cursor} if cursor else {})})
            )
            doc = page["result"]["structuredContent"]
            seen += [int(m["content"].split(" ", 1)[0]) for m in doc["messages"]]
            cursor = doc["next_cursor"]
            if cursor is None:
                break
        sizes = [len(line) + 1 for line in client.lines]
    assert seen == list(range(8))
    assert max(sizes) <= MAX_RESULT_BYTES, max(sizes)


def test_two_raw_clients_at_once_are_both_served() -> None:
    load_sample()
    answers: dict[int, list[Any]] = {}

    def run(n: int) -> None:
        with raw_server() as client:
            ids = [client.call("search_messages", {"query": "docker"}) for _ in range(5)]
            answers[n] = [client.reply(i)["result"]["structuredContent"]["hits"] for i in ids]

    threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(answers) == [0, 1]
    assert all(hits for n in answers for hits in answers[n])
    assert json.dumps(answers[0]) == json.dumps(answers[1])
