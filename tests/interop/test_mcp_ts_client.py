"""`hermes mcp` driven by a client nobody here wrote: the official TypeScript SDK's (pinned from
the npm registry, installed into the interop cache on first use; skipped with the reason when
Node, npm or the registry is unavailable). tests/interop/mcp_ts_client.mjs runs each scenario
and reports in JSON: every tool, every refusal kind with its hint, a cancel then further calls,
two clients at once, SIGINT and SIGTERM."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from clitools import load_sample
from support.children import child_env, hermes_argv
from support.mcp_raw import write_locked

from interop.releases import cache_dir

SDK = "@modelcontextprotocol/sdk"
SDK_VERSION = "1.32.2"  # what most MCP hosts embed (issue 34 was found with it)
SPEC = f"{SDK}@{SDK_VERSION}"
SCRIPT = Path(__file__).with_name("mcp_ts_client.mjs")
INSTALL_TIMEOUT_S = 600
DOCKER_SESSION = "20261118_091502_a1c9e2"


def sdk_modules() -> Path:
    """Return the node_modules holding the pinned SDK, installing it with npm on first use."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js and npm are needed for the TypeScript SDK client (apt: nodejs npm)")
    root = cache_dir() / f"node-mcp-sdk-{SDK_VERSION}"
    root.mkdir(parents=True, exist_ok=True)
    marker = root / ".installed"
    with open(root.parent / f"node-mcp-sdk-{SDK_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test processes install once
        if marker.is_file() and (root / "node_modules" / SDK / "package.json").is_file():
            return root / "node_modules"
        try:
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(root), SPEC],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot install {SDK}@{SDK_VERSION} with npm: {exc}")
        if done.returncode != 0:
            tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            pytest.skip(f"cannot install {SDK}@{SDK_VERSION} from the npm registry: {tail}")
        marker.write_text(SDK_VERSION)
    return root / "node_modules"


@pytest.fixture
def client_dir(tmp_path: Path) -> Path:
    """A directory with the client script beside the SDK's node_modules (ESM resolves there)."""
    modules = sdk_modules()
    where = tmp_path / "ts-client"
    where.mkdir()
    shutil.copy(SCRIPT, where / SCRIPT.name)
    (where / "node_modules").symlink_to(modules)
    (where / "package.json").write_text('{"type": "module"}', encoding="utf-8")
    return where


def scenario(where: Path, name: str, *global_flags: str, **extra: Any) -> dict[str, Any]:
    """Run one scenario of the client against `hermes [global_flags] mcp`; return its report."""
    argv = hermes_argv(*global_flags, "mcp")
    config = {
        "command": argv[0],
        "args": argv[1:],
        "env": child_env(),
        "session": DOCKER_SESSION,
        **extra,
    }
    done = subprocess.run(
        ["node", str(where / SCRIPT.name), name, json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=where,
    )
    assert done.stdout.strip(), done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and "error" not in report, (report, done.stderr[-2000:])
    return report


def test_every_tool_answers_the_typescript_client(client_dir: Path) -> None:
    load_sample()
    report = scenario(client_dir, "tools")
    assert report["tools"] == ["get_session", "get_usage", "list_sessions", "search_messages"]
    for name, answer in report["answers"].items():
        # A resolved call: the SDK found its structured content valid against the schema.
        assert answer.get("isError") is False and answer["structured"], (name, answer)
        assert json.loads(answer["text"]) == answer["structured"], name
    assert report["answers"]["search_messages"]["structured"]["hits"]
    assert report["answers"]["get_session"]["structured"]["session"]["id"] == DOCKER_SESSION


def test_every_refusal_reaches_the_typescript_client_with_its_hint(client_dir: Path) -> None:
    load_sample()
    report = scenario(client_dir, "refusals")
    for kind, answer in report["answers"].items():
        assert answer.get("isError") is True, (kind, answer)  # not a thrown -32602
        assert answer["text"].startswith("Error (") and "\nHint: " in answer["text"], answer
        assert answer["structured"] is None, (kind, answer)
    assert report["answers"]["session_not_found"]["text"].startswith("Error (session_not_found)")
    assert report["answers"]["unknown_tool"]["text"].startswith("Error (unknown_tool)")
    assert report["after"]["isError"] is False and report["after"]["structured"]["sessions"]


def test_a_cancel_from_the_typescript_client_leaves_the_server_serving(
    client_dir: Path,
) -> None:
    db = load_sample()
    # Both cancelled calls wait for the lock (--wait 20) when their cancel comes; the lock goes
    # after 8 s, so their workers then finish with an answer nobody may send twice; the further
    # calls come 8 s after the cancels.
    with write_locked(db, seconds=8):
        report = scenario(client_dir, "cancel", "--wait", "20", settleMs=8000)
    assert report["aborted"]["ok"] is False and "the test cancels it" in report["aborted"]["error"]
    assert report["timedOut"]["ok"] is False and "timed out" in report["timedOut"]["error"]
    assert [n.get("isError") for n in report["next"]] == [False, False, False], report["next"]
    assert all(n["structured"]["sessions"] for n in report["next"])


def test_two_typescript_clients_at_once_are_both_served(client_dir: Path) -> None:
    load_sample()
    results = scenario(client_dir, "two")["results"]
    assert len(results) == 8
    assert all(r.get("isError") is False for r in results), results
    # Each client's answers are the same as the other's.
    assert [r["structured"] for r in results[:4]] == [r["structured"] for r in results[4:]]


@pytest.mark.parametrize("signal", ["SIGINT", "SIGTERM"])
def test_a_signal_ends_the_server_within_two_seconds(client_dir: Path, signal: str) -> None:
    load_sample()
    started = time.monotonic()
    report = scenario(client_dir, "sigint", signal=signal)
    assert report["gone"] is True and report["ms"] < 2000, report
    assert time.monotonic() - started < 60
