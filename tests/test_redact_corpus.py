"""Redaction measured on a planted corpus (tests/support/secret_corpus.py), on every surface that
shows stored text: MCP search snippets (with their context), MCP get_session, `sessions show
--redact` and `sessions export --redact`. Recall: planted secrets of which no piece shows;
precision: of everything redacted, how much was a secret (a look-alike changed is a false
positive). Also: redaction of this repository's own Python code changes (almost) no line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from clitools import run
from mcp import ClientSession
from support.secret_corpus import Case, leaked, look_alike_cases, secret_cases
from test_mcp import CALL_TIMEOUT_S, data, server

from hermes_state.records import messages, sessions
from hermes_state.reports import redact
from hermes_state.store.connection import open_store
from hermes_state.store.home import default_db_path

SID = "20261206_120000_corpus"
REPO_ROOT = Path(__file__).resolve().parents[1]
MIN_RECALL = 0.95
# Files that plant secrets on purpose (their changed lines are the point, not false positives).
PLANTING = {"test_redact.py", "test_redact_cli.py", "test_mcp.py", "test_mcp_protocol.py"}


def plant(cases: list[Case]) -> list[int]:
    """Write every case as a user message of one session; return their ids in order."""
    with open_store(default_db_path()) as store:
        sessions.create_session(store, SID, "cli", started_at=1_790_000_000.0)
        messages.append_messages(
            store,
            SID,
            [
                {"role": "user", "content": c.text, "timestamp": 1_790_000_001.0 + i}
                for i, c in enumerate(cases)
            ],
        )
        return [int(m["id"]) for m in messages.get_messages(store, SID)]


def mcp_surfaces(tmp_path: Path, cases: list[Case], ids: list[int]) -> dict[str, dict[int, str]]:
    """Return what the MCP tools show of each message: search hits, and get_session."""

    async def go(s: ClientSession) -> dict[str, dict[int, str]]:
        hits: dict[int, str] = {}
        for case in cases:
            found = data(await s.call_tool("search_messages", {"query": case.name}))
            for hit in found["hits"]:
                hits[hit["id"]] = hits.get(hit["id"], "") + "\n" + (hit["snippet"] or "")
                # The context: the message before (none for the first), the hit, the one after.
                at = ids.index(hit["id"])
                around = ids[max(0, at - 1) : at + 2]
                assert len(around) == len(hit["context"])
                for i, c in zip(around, hit["context"], strict=True):
                    hits[i] = hits.get(i, "") + "\n" + (c["content"] or "")
        shown: dict[int, str] = {}
        args: dict[str, Any] = {"session": SID, "limit": 100, "max_chars": 16000}
        for _ in range(20):
            page = data(await s.call_tool("get_session", args))
            shown.update((m["id"], m["content"]) for m in page["messages"])
            if page["next_cursor"] is None:
                break
            args["cursor"] = page["next_cursor"]
        return {"mcp search": hits, "mcp get_session": shown}

    async def main() -> dict[str, dict[int, str]]:
        with anyio.fail_after(CALL_TIMEOUT_S * 6):
            async with server(errlog=tmp_path / "server-stderr.txt") as session:
                return await go(session)

    return anyio.run(main)


def cli_surfaces(tmp_path: Path, ids: list[int]) -> dict[str, dict[int, str]]:
    """Return what `sessions show --redact --json` and `sessions export --redact` show."""
    shown = run("sessions", "show", SID, "--redact", "--json")
    assert shown.exit_code == 0, shown.stderr
    out = tmp_path / "export.jsonl"
    exported = run("sessions", "export", "--redact", "--session-id", SID, "-o", str(out))
    assert exported.exit_code == 0, exported.stderr
    record = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    return {
        "show --redact": {int(m["id"]): m["content"] for m in json.loads(shown.stdout)["messages"]},
        "export --redact": dict(zip(ids, (m["content"] for m in record["messages"]), strict=True)),
    }


def measure(
    surface: dict[int, str], secrets: list[tuple[int, Case]], looks: list[tuple[int, Case]]
) -> dict[str, Any]:
    """Return recall and precision of one surface, with the cases that failed."""
    missing = [c.name for i, c in secrets if i not in surface]
    leaks = [c.name for i, c in secrets if i in surface and leaked(c.secret, surface[i], c.text)]
    damaged = [c.name for i, c in looks if i in surface and c.keep not in surface[i]]
    shown = len(secrets) - len(missing)
    hidden = shown - len(leaks)
    return {
        "recall": hidden / shown if shown else 0.0,
        "precision": hidden / (hidden + len(damaged)) if hidden else 0.0,
        "secrets": shown,
        "look_alikes": sum(1 for i, _ in looks if i in surface),
        "leaks": leaks,
        "false_positives": damaged,
        "missing": missing,
    }


def test_recall_and_precision_on_the_planted_corpus_on_every_surface(tmp_path: Path) -> None:
    secrets, looks = secret_cases(), look_alike_cases()
    cases = [*secrets, *looks]
    ids = plant(cases)
    by_id = list(zip(ids, cases, strict=True))
    surfaces = {**mcp_surfaces(tmp_path, cases, ids), **cli_surfaces(tmp_path, ids)}
    # The measure itself: stored text as it is leaks every secret and keeps every look-alike.
    raw = measure({i: c.text for i, c in by_id}, by_id[: len(secrets)], by_id[len(secrets) :])
    assert raw["recall"] == 0.0 and not raw["false_positives"], raw
    report = {
        name: measure(surface, by_id[: len(secrets)], by_id[len(secrets) :])
        for name, surface in surfaces.items()
    }
    print(json.dumps({k: {**v} for k, v in report.items()}, indent=1))
    for name, got in report.items():
        assert not got["missing"], (name, got)
        assert got["recall"] >= MIN_RECALL and not got["false_positives"], (name, got)
        assert got["look_alikes"] == len(looks), (name, got)


def code_lines() -> list[tuple[str, str]]:
    """Return (where, line) of every line of this repository's Python code, the files that
    plant secrets on purpose left out."""
    out = []
    for package in ("hermes_state", "hermes_cli", "bench", "tests", "examples"):
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if path.name in PLANTING or path.name == "secret_corpus.py":
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                out.append((f"{path.relative_to(REPO_ROOT)}:{n}", line))
    return out


def test_redaction_leaves_this_repositorys_code_alone() -> None:
    lines = code_lines()
    changed = [(where, line) for where, line in lines if redact.redact(line) != line]
    print(f"{len(changed)} of {len(lines)} lines changed")
    assert len(lines) > 50_000
    assert len(changed) * 20_000 < len(lines), changed
