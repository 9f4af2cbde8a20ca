"""`sessions show --redact` and `sessions export --redact`: secrets leave neither, and a redacted
export still imports."""

from __future__ import annotations

import json
import string
from pathlib import Path

from clitools import load_sample, run

from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store
from hermes_state.store.home import default_db_path
from hermes_state.transfer.portability import import_sessions

SID = "20261203_090000_secret"


def made_up(prefix: str, n: int) -> str:
    """A made-up key of a provider's shape, assembled at run time."""
    return prefix + "".join(string.ascii_letters[(i * 11) % 52] for i in range(n - 4)) + "2468"


OPENAI = made_up("sk-" + "proj-", 60)
GITHUB = made_up("gh" + "p_", 36)


def add_secret_session(sid: str = SID, title: str = f"deploy with {GITHUB}") -> None:
    """Write a session whose title, prompt, text, tool call and reasoning hold secrets."""
    with open_store(default_db_path()) as store:
        sessions.create_session(
            store, sid, "cli", started_at=1_790_000_000.0, system_prompt=f"use {OPENAI}"
        )
        sessions.set_session_title(store, sid, title)
        messages.append_messages(
            store,
            sid,
            [
                {"role": "user", "content": f"my key is {OPENAI}", "timestamp": 1_790_000_001.0},
                {
                    "role": "assistant",
                    "content": "setting it",
                    "reasoning": f"the user gave {OPENAI}",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": "terminal",
                                "arguments": json.dumps({"command": f"export GH={GITHUB}"}),
                            },
                        }
                    ],
                    "timestamp": 1_790_000_002.0,
                },
                {
                    "role": "tool",
                    "content": "ok",
                    "tool_call_id": "call_1",
                    "timestamp": 1_790_000_003.0,
                },
            ],
        )


def test_show_redact_hides_secrets_from_people() -> None:
    add_secret_session()
    result = run("sessions", "show", SID, "--redact", "--reasoning", "--no-pager")
    assert result.exit_code == 0, result.stderr
    assert OPENAI not in result.stdout and GITHUB not in result.stdout
    assert "deploy with [REDACTED:github_token]" in result.stdout
    assert "my key is [REDACTED:openai_key]" in result.stdout
    assert "the user gave [REDACTED:openai_key]" in result.stdout


def test_show_redact_hides_secrets_from_scripts() -> None:
    add_secret_session()
    result = run("sessions", "show", SID, "--redact", "--json")
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert OPENAI not in result.stdout and GITHUB not in result.stdout
    call = shown["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(call) == {"command": "export GH=[REDACTED:github_token]"}


def test_show_without_redact_prints_what_is_stored() -> None:
    add_secret_session()
    result = run("sessions", "show", SID, "--json")
    assert result.exit_code == 0, result.stderr
    assert OPENAI in result.stdout


def test_a_redacted_export_has_no_secrets_and_still_imports(tmp_path: Path) -> None:
    load_sample()
    add_secret_session()
    out = tmp_path / "shared.jsonl"
    result = run("sessions", "export", "--redact", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert OPENAI not in text and GITHUB not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) == 13
    copy = tmp_path / "copy.db"
    with open_store(copy) as store:
        imported = import_sessions(store, out)
        assert imported.ok and imported.imported == 13, imported
        row = sessions.require_session(store, SID)
        rows = messages.get_messages(store, SID)
    assert row["title"] == "deploy with [REDACTED:github_token]"
    assert row["system_prompt"] == "use [REDACTED:openai_key]"
    assert rows[0]["content"] == "my key is [REDACTED:openai_key]"
    assert rows[1]["reasoning"] == "the user gave [REDACTED:openai_key]"


def test_a_redacted_export_keeps_message_identities(tmp_path: Path) -> None:
    add_secret_session()
    plain, redacted = tmp_path / "plain.jsonl", tmp_path / "redacted.jsonl"
    assert run("sessions", "export", "-o", str(plain)).exit_code == 0
    assert run("sessions", "export", "--redact", "-o", str(redacted)).exit_code == 0
    uids = [
        [m["message_uid"] for m in json.loads(path.read_text(encoding="utf-8"))["messages"]]
        for path in (plain, redacted)
    ]
    assert uids[0] == uids[1] and all(uids[0])


def test_titles_that_redaction_makes_equal_stay_unique_and_import(tmp_path: Path) -> None:
    add_secret_session("20261203_090000_first0", f"deploy with {OPENAI}")
    add_secret_session("20261203_090000_second", f"deploy with {made_up('sk-' + 'proj-', 70)}")
    out = tmp_path / "shared.jsonl"
    assert run("sessions", "export", "--redact", "-o", str(out)).exit_code == 0
    with open_store(tmp_path / "copy.db") as store:
        imported = import_sessions(store, out)
        titles = {
            sessions.require_session(store, sid)["title"]
            for sid in ("20261203_090000_first0", "20261203_090000_second")
        }
    assert imported.ok and imported.imported == 2, imported
    assert titles == {"deploy with [REDACTED:openai_key]", "deploy with [REDACTED:openai_key] #2"}
