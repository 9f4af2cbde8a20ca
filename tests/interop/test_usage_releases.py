"""`hermes usage` on stores the real releases wrote: each field release (schema 22, 30, 31) records
usage every way the agent does (per-call deltas with estimated, billed, unknown and included
costs, a gateway's cumulative totals, auxiliary calls, a per-turn route task where the release
has one) through its own SessionDB; then our real process reports it and every total must equal
a hand-written SQL sum over the same rows, the groups must add up to the totals, and
`sessions stats` must show the same figures.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_usage import assert_figures_equal, raw_totals

from hermes_state.reports.usage_report import COUNTERS, UsageFilter
from interop.harness import hermes
from interop.releases import Release, python_for

# Runs under the release's own interpreter: it must not import anything from this repository.
WRITER = r"""
import inspect, json, sys, time
from pathlib import Path
from hermes_state import SessionDB

db = SessionDB(db_path=Path(sys.argv[1]))
update_params = set(inspect.signature(db.update_token_counts).parameters)
aux_params = set(inspect.signature(db.record_auxiliary_usage).parameters)

def update(sid, **kw):
    db.update_token_counts(sid, **{k: v for k, v in kw.items() if k in update_params})

def aux(sid, task, **kw):
    db.record_auxiliary_usage(sid, task, **{k: v for k, v in kw.items() if k in aux_params})

db.create_session("u_cli", "cli", model="anthropic/claude-sonnet-4.6")
db.append_message("u_cli", "user", "fix the build")
for i in range(3):
    update("u_cli", input_tokens=1000 + i, output_tokens=200, cache_read_tokens=400,
           cache_write_tokens=30, reasoning_tokens=12, model="anthropic/claude-sonnet-4.6",
           estimated_cost_usd=0.0125, cost_status="estimated", cost_source="pricing",
           billing_provider="anthropic", api_call_count=1)
# A /model switch mid-session: the next calls go through another route.
update("u_cli", input_tokens=300, output_tokens=50, model="openai/gpt-4.1",
       estimated_cost_usd=0.004, cost_status="estimated", billing_provider="openai",
       api_call_count=1)
aux("u_cli", "title_generation", model="openai/gpt-4.1-mini", billing_provider="openai",
    input_tokens=80, output_tokens=12, estimated_cost_usd=0.0001, api_call_count=1)
aux("u_cli", "compression", model="openai/gpt-4.1-mini", input_tokens=900, output_tokens=150)
# A turn routed through a task of its own (voice chat), where the release knows tasks.
update("u_cli", input_tokens=55, output_tokens=5, model="openai/gpt-realtime",
       estimated_cost_usd=0.002, cost_status="estimated", billing_provider="openai",
       api_call_count=1, task="voice_chat")

db.create_session("u_gw", "telegram", model="openai/gpt-4.1", chat_id="42")
db.append_message("u_gw", "user", "こんにちは")
# The gateway sets cumulative totals (no per-route row), then an auxiliary call lands.
update("u_gw", input_tokens=5000, output_tokens=700, model="openai/gpt-4.1",
       estimated_cost_usd=0.9, cost_status="estimated", api_call_count=6, absolute=True)
aux("u_gw", "vision", model="google/gemini-2.5-flash", input_tokens=1200, output_tokens=40,
    estimated_cost_usd=0.0003)

db.create_session("u_unknown", "discord", model="local/llama")
update("u_unknown", input_tokens=640, output_tokens=64, model="local/llama",
       cost_status="unknown", api_call_count=2)

db.create_session("u_billed", "cli", model="anthropic/claude-sonnet-4.6")
update("u_billed", input_tokens=100, output_tokens=10, model="anthropic/claude-sonnet-4.6",
       estimated_cost_usd=0.05, actual_cost_usd=0.04, cost_status="actual",
       billing_provider="anthropic", api_call_count=1)

db.create_session("u_sub", "cron", model="openai/gpt-5")
update("u_sub", input_tokens=30, output_tokens=3, model="openai/gpt-5", estimated_cost_usd=0.0,
       cost_status="included", billing_provider="openai-codex",
       billing_mode="subscription_included", api_call_count=1)

db.create_session("u_idle", "cli", model="openai/gpt-4.1")
flush = getattr(db, "flush_token_counts", None)
if flush:
    flush()
db.close()
print(json.dumps({"ok": True}))
"""

BYS = ("day", "week", "month", "model", "provider", "task", "source", "session")


def _write_usage(release: Release, home: Path) -> None:
    """Have the release record usage in a store of its own in home."""
    python = python_for(release)
    script = home.parent / "write_usage.py"
    script.write_text(WRITER, encoding="utf-8")  # the harness's file, not a store file
    done = subprocess.run(
        [str(python), str(script), str(home / "state.db")],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(home.parent),
            "HERMES_HOME": str(home),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        cwd=str(home.parent),
    )
    assert done.returncode == 0, f"{release.key} writer failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture
def usage_home(release: Release, built: Path) -> Path:
    """A store the release built (the realistic build) with usage the release recorded."""
    _write_usage(release, built)
    return built


def _usage(home: Path, *args: str) -> dict[str, Any]:
    done = hermes(home, "usage", *args, "--json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def test_every_total_of_a_release_store_equals_a_raw_sql_sum(
    release: Release, usage_home: Path
) -> None:
    db = usage_home / "state.db"
    for by in BYS:
        data = _usage(usage_home, "--by", by)
        assert data["basis"] == "session_model_usage"
        assert_figures_equal(data["totals"], raw_totals(db))
        for key in (*COUNTERS, "total_tokens", "unknown_cost_count", "unknown_cost_tokens"):
            assert sum(g[key] for g in data["groups"]) == data["totals"][key], (by, key)


def test_filtered_totals_of_a_release_store_equal_raw_sql_sums(
    release: Release, usage_home: Path
) -> None:
    db = usage_home / "state.db"
    data = _usage(usage_home, "--source", "cli", "--model", "anthropic/claude-sonnet-4.6")
    flt = UsageFilter(sources=("cli",), models=("anthropic/claude-sonnet-4.6",))
    assert_figures_equal(data["totals"], raw_totals(db, flt))
    assert data["totals"]["session_count"] == 3  # with the build's s_cli_docker


def test_the_release_s_usage_is_counted_once_each(release: Release, usage_home: Path) -> None:
    sessions = {g["session_id"]: g for g in _usage(usage_home, "--by", "session")["groups"]}
    cli = sessions["u_cli"]
    want_in = 1000 + 1001 + 1002 + 300 + 80 + 900 + 55
    assert cli["input_tokens"] == want_in  # main calls, both routes, aux calls, the voice turn
    # The gateway's cumulative totals count once, beside its auxiliary call.
    assert sessions["u_gw"]["input_tokens"] == 5000 + 1200
    assert sessions["u_gw"]["cost_usd"] == pytest.approx(0.9 + 0.0003)
    assert sessions["u_billed"]["cost_usd"] == pytest.approx(0.04)
    assert sessions["u_sub"]["cost_usd"] == 0.0  # included in a subscription: a real $0
    assert sessions["u_unknown"]["cost_usd"] is None  # unknown stays unknown, never $0
    assert sessions["u_unknown"]["unknown_cost_tokens"] == 704
    assert "u_idle" not in sessions
    tasks = {g["task"] for g in _usage(usage_home, "--by", "task")["groups"]}
    assert {"", "title_generation", "compression", "vision"} <= tasks


def test_stats_of_a_release_store_shows_the_same_figures(
    release: Release, usage_home: Path
) -> None:
    done = hermes(usage_home, "sessions", "stats", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    by_model = _usage(usage_home, "--by", "model")["groups"]
    assert stats["by_model"] == [
        {k: g[k] for k in ("model", "session_count", "input_tokens", "output_tokens", "cost_usd")}
        for g in by_model
    ]


def test_the_release_store_is_unchanged_and_the_chart_draws(
    release: Release, usage_home: Path
) -> None:
    db = usage_home / "state.db"
    before = db.stat()
    done = hermes(usage_home, "usage", "--by", "day", "--chart", "cost")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Cost by day") and "█" in done.stdout
    after = db.stat()
    assert (before.st_mtime_ns, before.st_size) == (after.st_mtime_ns, after.st_size)
