"""`hermes usage` and the usage figures it shares with `sessions stats`: every total against a
hand-written SQL sum over the same rows, unknown costs kept unknown, auxiliary rows, the
sessions' own counters where no row holds them, time filters, the chart, bad input."""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import time
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from clitools import ANSI_ESCAPE, child, load_sample, pty_child, run, run_json

from hermes_cli.commands.usage import periods_between
from hermes_cli.rendering import records
from hermes_state.records import messages, sessions
from hermes_state.reports import usage, usage_report as usage_report_module
from hermes_state.reports.usage_report import COUNTERS, FIGURES, UsageFilter, usage_report
from hermes_state.store.connection import open_store

DAY = 86400.0
# Noon, local time, of a Monday: day and week buckets never sit on a DST edge.
MONDAY = datetime(2026, 11, 2, 12, 0).timestamp()
HOSTILE_MODEL = "\x1b[31mevil[/] [bold]model\u202e"
PRICED = "('actual', 'estimated', 'included')"


def local_day(ts: float) -> str:
    """Return the local calendar day of an epoch time."""
    return datetime.fromtimestamp(ts).date().isoformat()


@pytest.fixture
def store_path(db_path: Path) -> Path:
    """Usage written every way the agent writes it, at known times:

    - s-cli: two per-call reports on one route (Monday, then Tuesday) and one on another
      model the next week, plus an auxiliary title-generation call (now);
    - s-gw: a gateway session whose totals were set as cumulative figures (no usage row of
      its own) and an auxiliary vision call (now), its message on the Tuesday of week two;
    - s-free: a call whose cost nobody knows (estimate 0, no status);
    - s-billed: a call with a billed (actual) cost besides its estimate, five weeks on;
    - s-included: a call included in a subscription (a real $0);
    - s-none: a session that never called a model.
    """
    with open_store(db_path) as store:
        sessions.create_session(store, "s-cli", "cli", model="m-big", started_at=MONDAY)
        usage.record_usage(
            store,
            "s-cli",
            "m-big",
            billing_provider="anthropic",
            input_tokens=1000,
            output_tokens=200,
            cache_read_tokens=500,
            cache_write_tokens=50,
            reasoning_tokens=30,
            estimated_cost_usd=0.5,
            at=MONDAY,
        )
        usage.record_usage(
            store,
            "s-cli",
            "m-big",
            billing_provider="anthropic",
            input_tokens=500,
            output_tokens=100,
            estimated_cost_usd=0.25,
            at=MONDAY + DAY,
        )
        usage.record_usage(
            store,
            "s-cli",
            "m-small",
            billing_provider="openai",
            input_tokens=60,
            output_tokens=6,
            estimated_cost_usd=0.01,
            at=MONDAY + 7 * DAY,
        )
        usage.record_auxiliary_usage(
            store,
            "s-cli",
            "title_generation",
            model="m-small",
            billing_provider="openai",
            input_tokens=40,
            output_tokens=10,
            estimated_cost_usd=0.001,
        )
        sessions.create_session(store, "s-gw", "telegram", model="m-big", started_at=MONDAY)
        messages.append_message(store, "s-gw", "user", "hello", timestamp=MONDAY + 8 * DAY)
        usage.update_token_counts(
            store,
            "s-gw",
            input_tokens=3000,
            output_tokens=400,
            estimated_cost_usd=1.2,
            cost_status="estimated",
            api_call_count=4,
            absolute=True,
        )
        usage.record_auxiliary_usage(
            store, "s-gw", "vision", model="m-vision", input_tokens=900, output_tokens=9
        )
        sessions.create_session(store, "s-free", "discord", model="m-free", started_at=MONDAY)
        usage.record_usage(
            store, "s-free", "m-free", input_tokens=700, output_tokens=70, at=MONDAY + 2 * DAY
        )
        sessions.create_session(store, "s-billed", "cli", model="m-big", started_at=MONDAY)
        usage.record_usage(
            store,
            "s-billed",
            "m-big",
            input_tokens=100,
            output_tokens=10,
            estimated_cost_usd=0.05,
            actual_cost_usd=0.04,
            at=MONDAY + 35 * DAY,
        )
        sessions.create_session(store, "s-included", "cron", model="m-sub", started_at=MONDAY)
        usage.update_token_counts(
            store,
            "s-included",
            input_tokens=20,
            output_tokens=2,
            model="m-sub",
            estimated_cost_usd=0.0,
            cost_status="included",
            api_call_count=1,
        )
        sessions.create_session(store, "s-none", "cli", model="m-big", started_at=MONDAY)
    return db_path


def _ro(db: Path) -> sqlite3.Connection:
    """Open a store read-only with plain sqlite3 (the raw side of a comparison)."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def raw_totals(db: Path, flt: UsageFilter | None = None) -> dict[str, Any]:
    """Sum the figures by hand: usage rows, plus each session's counters beyond its rows.

    Written apart from hermes_state.reports.usage_report (correlated subqueries, not its join), from
    the definition in its docstring.
    """
    flt = flt or UsageFilter()
    conn = _ro(db)
    has_rows = bool(conn.execute("PRAGMA table_info(session_model_usage)").fetchall())

    def covered(col: str) -> str:
        # What the session's own counters include: its conversation's rows and voice turns.
        if not has_rows:
            return "0"
        return (
            f"COALESCE((SELECT SUM({col}) FROM session_model_usage u WHERE u.session_id = s.id"
            " AND (u.task = '' OR u.task = 'voice_chat')), 0)"
        )

    session_cols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
    stamp = "s.last_activity_at" if "last_activity_at" in session_cols else "NULL"
    left = {c: f"MAX(0, COALESCE(s.{c}, 0) - {covered(c)})" for c in COUNTERS}
    left_est = f"(s.estimated_cost_usd - {covered('estimated_cost_usd')})"
    left_act = f"(s.actual_cost_usd - {covered('actual_cost_usd')})"
    left_sql = (
        "SELECT s.id AS session_id, COALESCE(s.model, 'unknown') AS model, s.source AS source,"
        f" MAX(COALESCE({stamp}, s.started_at), COALESCE((SELECT MAX(m.timestamp)"
        " FROM messages m WHERE m.session_id = s.id), s.started_at)) AS at, "
        + ", ".join(f"{expr} AS {c}" for c, expr in left.items())
        + f", CASE WHEN {left_est} > 1e-9 THEN {left_est} WHEN s.estimated_cost_usd IS NOT NULL"
        f" AND s.cost_status IN {PRICED} THEN 0 END AS est,"
        f" CASE WHEN {left_act} > 1e-9 THEN {left_act} END AS act FROM sessions s"
    )
    row_sql = (
        "SELECT u.session_id, u.model, s.source, COALESCE(u.last_seen, u.first_seen) AS at, "
        + ", ".join(f"u.{c}" for c in COUNTERS)
        + f", CASE WHEN u.estimated_cost_usd > 0 OR u.cost_status IN {PRICED}"
        " THEN u.estimated_cost_usd END AS est,"
        " CASE WHEN u.actual_cost_usd > 0 THEN u.actual_cost_usd END AS act"
        " FROM session_model_usage u LEFT JOIN sessions s ON s.id = u.session_id"
    )
    where, params = flt.where()
    nonzero = " OR ".join([*(f"r.{c} > 0" for c in COUNTERS), "r.est > 0", "r.act > 0"])
    parts = [f"SELECT * FROM ({left_sql}) r WHERE ({nonzero})"]
    if has_rows:
        parts.append(f"SELECT * FROM ({row_sql}) r")
    out: dict[str, Any] = dict.fromkeys(FIGURES, 0)
    costs = ("estimated_cost_usd", "actual_cost_usd", "cost_usd")
    out.update(dict.fromkeys(costs))  # a sum of no known cost is unknown, as SQL's SUM of nulls
    sessions_seen: set[str] = set()
    for part in parts:
        sql = (
            "SELECT r.session_id, r.input_tokens + r.output_tokens AS tok, "
            + ", ".join(f"r.{c}" for c in COUNTERS)
            + f", r.est, r.act FROM ({part}) r WHERE {where}"
        )
        for rec in conn.execute(sql, params):
            sessions_seen.add(rec["session_id"])
            for c in COUNTERS:
                out[c] += rec[c] or 0
            out["total_tokens"] += rec["tok"]
            cost = rec["act"] if rec["act"] is not None else rec["est"]
            for key, value in zip(costs, (rec["est"], rec["act"], cost), strict=True):
                if value is not None:
                    out[key] = (out[key] or 0) + value
            if cost is None:
                out["unknown_cost_count"] += 1
                out["unknown_cost_tokens"] += rec["tok"]
    conn.close()
    out["session_count"] = len(sessions_seen)
    return out


def report_of(db: Path, by: str = "model", flt: UsageFilter | None = None) -> Any:
    """Return the library's report of the store."""
    with open_store(db, read_only=True) as store:
        return usage_report(store, by, flt)


def assert_figures_equal(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Compare figures: counts exactly, costs to float rounding, unknown as None."""
    for key in FIGURES:
        if key.endswith("_usd"):
            assert (got[key] is None) == (want[key] is None), (key, got[key], want[key])
            if want[key] is not None:
                assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), key
        else:
            assert got[key] == want[key], (key, got[key], want[key])


# --- the figures ----------------------------------------------------------------------------


FILTERS = [
    UsageFilter(),
    UsageFilter(since=MONDAY + 0.5 * DAY),
    UsageFilter(until=MONDAY + 7 * DAY),
    UsageFilter(since=MONDAY + 6 * DAY, until=MONDAY + 30 * DAY),
    UsageFilter(sources=("cli",)),
    UsageFilter(sources=("telegram", "discord")),
    UsageFilter(models=("m-big",)),
    UsageFilter(models=("m-small",), sources=("cli",)),
]


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: repr(f)[11:60])
def test_every_total_equals_a_raw_sql_sum_over_the_same_rows(
    store_path: Path, flt: UsageFilter
) -> None:
    assert_figures_equal(report_of(store_path, "model", flt).totals, raw_totals(store_path, flt))


@pytest.mark.parametrize("by", ["day", "week", "month", "model", "provider", "task", "source"])
def test_groups_add_up_to_the_totals(store_path: Path, by: str) -> None:
    report = report_of(store_path, by)
    for key in (*COUNTERS, "total_tokens", "unknown_cost_count", "unknown_cost_tokens"):
        assert sum(g[key] for g in report.groups) == report.totals[key], key
    known = [g["cost_usd"] for g in report.groups if g["cost_usd"] is not None]
    assert sum(known) == pytest.approx(report.totals["cost_usd"])


def test_totals_of_a_store_with_only_usage_rows_are_the_table_sums(db_path: Path) -> None:
    with open_store(db_path) as store:
        sessions.create_session(store, "a", "cli", model="m")
        for i in range(5):
            usage.record_usage(store, "a", "m", input_tokens=10 + i, estimated_cost_usd=0.1)
        usage.record_auxiliary_usage(store, "a", "compression", model="m", input_tokens=7)
    conn = _ro(db_path)
    raw = conn.execute(
        "SELECT SUM(input_tokens), SUM(api_call_count), COUNT(*) FROM session_model_usage"
    ).fetchone()
    conn.close()
    totals = report_of(db_path).totals
    assert (totals["input_tokens"], totals["api_call_count"]) == (raw[0], raw[1]) == (67, 6)
    assert totals["cost_usd"] == pytest.approx(0.5)


def test_auxiliary_rows_count_once_beside_the_conversation(store_path: Path) -> None:
    tasks = {g["task"]: g for g in report_of(store_path, "task").groups}
    assert tasks["title_generation"]["input_tokens"] == 40
    assert tasks["title_generation"]["cost_usd"] == pytest.approx(0.001)
    # s-cli's own counters hold its main calls only: nothing of it is counted twice.
    cli = {g["session_id"]: g for g in report_of(store_path, "session").groups}["s-cli"]
    assert cli["input_tokens"] == 1000 + 500 + 60 + 40


def test_a_session_with_only_cumulative_totals_counts_its_own_counters(store_path: Path) -> None:
    gw = {g["session_id"]: g for g in report_of(store_path, "session").groups}["s-gw"]
    # Its counters hold the conversation; the vision call is not in them: both count, once.
    assert (gw["input_tokens"], gw["output_tokens"], gw["api_call_count"]) == (3900, 409, 5)
    assert gw["cost_usd"] == pytest.approx(1.2)
    assert gw["unknown_cost_tokens"] == 909  # the vision call's cost was not recorded
    # ... at its last activity (its message), not at its start.
    days = {g["day"]: g for g in report_of(store_path, "day").groups}
    assert days[local_day(MONDAY + 8 * DAY)]["input_tokens"] == 3000


def test_unknown_cost_stays_unknown_and_is_counted(store_path: Path) -> None:
    models = {g["model"]: g for g in report_of(store_path, "model").groups}
    free = models["m-free"]
    assert free["cost_usd"] is None and free["estimated_cost_usd"] is None
    assert (free["unknown_cost_count"], free["unknown_cost_tokens"]) == (1, 770)
    totals = report_of(store_path).totals
    assert totals["unknown_cost_count"] == 2  # m-free, and s-gw's vision call
    assert totals["unknown_cost_tokens"] == 770 + 909
    # A cost the agent marked as included in a subscription is a real $0, not unknown.
    assert models["m-sub"]["cost_usd"] == 0.0 and models["m-sub"]["unknown_cost_count"] == 0


def test_the_billed_cost_wins_over_the_estimate(store_path: Path) -> None:
    billed = {g["session_id"]: g for g in report_of(store_path, "session").groups}["s-billed"]
    assert billed["cost_usd"] == pytest.approx(0.04)
    assert billed["actual_cost_usd"] == pytest.approx(0.04)
    assert billed["estimated_cost_usd"] == pytest.approx(0.05)


def test_a_row_counts_at_the_time_it_was_last_added_to(store_path: Path) -> None:
    days = {g["day"]: g for g in report_of(store_path, "day").groups}
    # Both calls of s-cli's first route are one row, last added to on the Tuesday.
    assert local_day(MONDAY) not in days
    assert days[local_day(MONDAY + DAY)]["input_tokens"] == 1500
    since = report_of(store_path, "model", UsageFilter(since=MONDAY + 2 * DAY)).totals
    assert since["input_tokens"] == report_of(store_path).totals["input_tokens"] - 1500


def test_weeks_start_on_monday_and_months_are_calendar_months(store_path: Path) -> None:
    weeks = [g["week"] for g in report_of(store_path, "week").groups]
    assert local_day(MONDAY) in weeks and local_day(MONDAY + 7 * DAY) in weeks
    assert all(date.fromisoformat(w).weekday() == 0 for w in weeks)
    months = [g["month"] for g in report_of(store_path, "month").groups]
    assert months == sorted(months) and "2026-11" in months and "2026-12" in months


def test_without_the_usage_table_the_sessions_columns_are_all_there_is(db_path: Path) -> None:
    load_sample(db_path)
    with open_store(db_path) as store:
        store.conn.execute("DROP TABLE session_model_usage")  # an older release's layout
    report = report_of(db_path, "source")
    assert report.basis == "sessions"
    conn = _ro(db_path)
    raw = conn.execute(
        "SELECT SUM(input_tokens), SUM(output_tokens), SUM(estimated_cost_usd), COUNT(*)"
        " FROM sessions WHERE input_tokens > 0 OR output_tokens > 0"
    ).fetchone()
    conn.close()
    totals = report.totals
    assert (totals["input_tokens"], totals["output_tokens"]) == (raw[0], raw[1])
    assert totals["cost_usd"] == pytest.approx(raw[2])
    assert totals["session_count"] == raw[3] == 12
    assert_figures_equal(totals, raw_totals(db_path))


def test_stats_and_usage_share_every_figure(store_path: Path) -> None:
    stats = run_json("sessions", "stats")
    by_model = run_json("usage", "--by", "model")["groups"]
    assert stats["by_model"] == [
        {k: g[k] for k in ("model", "session_count", "input_tokens", "output_tokens", "cost_usd")}
        for g in by_model
    ]
    by_session = sorted(
        run_json("usage", "--by", "session")["groups"], key=lambda g: -g["total_tokens"]
    )
    assert [(t["id"], t["total_tokens"], t["cost_usd"]) for t in stats["top_sessions"]] == [
        (g["session_id"], g["total_tokens"], g["cost_usd"]) for g in by_session[:10]
    ]


@pytest.mark.parametrize(
    "flt",
    [UsageFilter(), UsageFilter(since=MONDAY + DAY), UsageFilter(exclude_sessions=("s-cli",))],
)
def test_groupings_from_one_statement_equal_each_grouping_alone(
    store_path: Path, flt: UsageFilter
) -> None:
    wanted = [("model", "cost", None), ("session", "tokens", 2), ("day", "cost", None)]
    with open_store(store_path, read_only=True) as store:
        together = usage_report_module.usage_groupings(store, wanted, flt)
        alone = [
            usage_report_module.usage_groups(store, by, flt, order=order, limit=limit)
            for by, order, limit in wanted
        ]
    assert together == alone
    assert len(together[1]) == 2 and all(together)


# --- the command ----------------------------------------------------------------------------


def test_usage_json_has_the_filters_totals_and_groups(store_path: Path) -> None:
    data = run_json("usage", "--by", "day", "--source", "cli", "--since", "2026-11-03")
    assert data["by"] == "day" and data["basis"] == "session_model_usage"
    assert data["sources"] == ["cli"] and data["since_at"].startswith("2026-11-0")
    want = raw_totals(
        store_path,
        UsageFilter(since=datetime(2026, 11, 3).timestamp(), sources=("cli",)),
    )
    assert_figures_equal(data["totals"], want)
    assert [g["day"] for g in data["groups"]] == sorted(g["day"] for g in data["groups"])


def test_usage_json_keys_are_the_documented_vocabulary(store_path: Path) -> None:
    data = run_json("usage", "--by", "session")
    assert tuple(data) == records.USAGE_KEYS
    assert FIGURES == records.USAGE_FIGURE_KEYS
    assert tuple(data["totals"]) == FIGURES
    assert tuple(data["groups"][0]) == ("session_id", "title", "source", "model", *FIGURES)


def test_usage_csv_prints_one_row_per_group_with_a_header(store_path: Path) -> None:
    result = run("usage", "--by", "provider", "--format", "csv")
    assert result.exit_code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0]) == ["provider", *FIGURES]
    assert {r["provider"] for r in rows} == {"anthropic", "openai", ""}
    assert sum(int(r["input_tokens"]) for r in rows) == raw_totals(store_path)["input_tokens"]


def test_usage_fields_keeps_only_the_named_fields(store_path: Path) -> None:
    result = run("usage", "--by", "source", "--format", "tsv", "--fields", "source,cost_usd")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "source\tcost_usd" and len(lines) == 5


def test_usage_table_shows_unknown_cost_as_unknown_never_as_zero(store_path: Path) -> None:
    out = run("usage", "--by", "model").stdout
    free = next(line for line in out.splitlines() if line.startswith("m-free"))
    assert free.rstrip().endswith("unknown") and "$0.00" not in free
    total = next(line for line in out.splitlines() if line.startswith("Total"))
    assert total.rstrip().endswith(" + ?")
    assert "cost unknown for 2 usage records (1,679 tokens)" in out


def test_usage_by_session_names_each_session(store_path: Path) -> None:
    out = run("usage", "--by", "session").stdout
    assert "s-gw" in out and "s-none" not in out  # a session that used nothing is no usage


def test_usage_chart_draws_a_bar_per_period_with_the_numbers_beside_it(store_path: Path) -> None:
    out = run("usage", "--by", "day", "--chart", "cost").stdout
    lines = out.splitlines()
    assert lines[0].startswith("Cost by day")
    first, last = local_day(MONDAY + DAY), local_day(MONDAY + 35 * DAY)
    days = [line.split()[0] for line in lines[1:] if line[:4].isdigit()]
    # Every day from the first to the last usage, empty ones too: the time axis stays true.
    assert days[0] == first and days[-1] >= last and len(days) == len(set(days))
    assert len(days) >= (date.fromisoformat(last) - date.fromisoformat(first)).days + 1
    biggest = next(line for line in lines if line.startswith(local_day(MONDAY + 8 * DAY)))
    assert "█" in biggest and "$1.20" in biggest
    assert any(line.startswith("Total: $2.00 + ? · ") for line in lines)
    assert all(line == line.rstrip() for line in lines)


def test_usage_chart_of_tokens(store_path: Path) -> None:
    out = run("usage", "--by", "week", "--chart", "tokens").stdout
    assert out.startswith("Tokens (input + output) by week")
    assert "3.5k tok" in out  # the second week: s-gw and s-cli's other model


def test_usage_on_a_terminal_draws_the_chart_of_the_real_process(store_path: Path) -> None:
    done = pty_child("usage", "--by", "day", "--no-pager", columns=80)
    assert done.returncode == 0, done.output
    assert ANSI_ESCAPE in done.output  # a terminal gets colour
    text = re.sub(r"\x1b\[[0-9;]*m", "", done.output)
    assert "Cost by day" in text and "█" in text and "$1.20" in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_usage_on_a_terminal_at_60_columns_keeps_every_number_whole(store_path: Path) -> None:
    done = pty_child("usage", "--by", "model", "--no-pager", "--color", "never", columns=60)
    assert done.returncode == 0, done.output
    assert "Not shown at 60 columns" in done.output
    assert "$2.00 + ?" in done.output  # the total cost, never cut


def test_usage_runs_as_a_real_process(store_path: Path) -> None:
    done = child("usage", "--by", "task", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {g["task"] for g in data["groups"]} == {"", "title_generation", "vision"}
    assert_figures_equal(data["totals"], raw_totals(store_path))


def test_hostile_model_names_are_shown_escaped_and_exported_exactly(db_path: Path) -> None:
    with open_store(db_path) as store:
        sessions.create_session(store, "h", "cli")
        usage.record_usage(store, "h", HOSTILE_MODEL, input_tokens=5, estimated_cost_usd=0.2)
    out = run("usage", "--by", "model").stdout
    assert "\x1b" not in out and "\u202e" not in out
    assert "\\x1b[31mevil[/] [bold]model\\u202e" in out
    assert run_json("usage")["groups"][0]["model"] == HOSTILE_MODEL


def test_usage_of_a_profile_without_a_store_is_none(hermes_home: Path) -> None:
    result = run("usage")
    assert result.exit_code == 0 and "No usage recorded yet" in result.stdout
    assert not (hermes_home / "state.db").exists()
    data = run_json("usage")
    assert data["totals"]["input_tokens"] == 0 and data["totals"]["cost_usd"] is None


def test_usage_reads_without_writing(store_path: Path) -> None:
    before = store_path.stat()
    run_json("usage", "--by", "day")
    after = store_path.stat()
    assert (before.st_mtime_ns, before.st_size) == (after.st_mtime_ns, after.st_size)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--by", "year"), "'year' is not one of"),
        (("--since", "someday"), "is not an age or a date"),
        (("--since", "2026-12-01", "--until", "2026-11-01"), "is not before --until"),
        (("--source", "telegrm"), "did you mean 'telegram'?"),
        (("--model", "m-bigg"), "did you mean 'm-big'?"),
        (("--fields", "nope"), "unknown field 'nope'"),
        (("--json", "--format", "csv"), "disagree"),
    ],
)
def test_bad_input_is_one_line_and_a_usage_error(
    store_path: Path, args: tuple[str, ...], needle: str
) -> None:
    result = run("usage", *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0]
    assert "Traceback" not in result.output


def test_a_missing_home_is_an_error_with_a_hint(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "nowhere"))
    result = run("usage")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "Hint: " in result.stderr


# --- helpers --------------------------------------------------------------------------------


def test_periods_between_names_every_day_monday_and_month() -> None:
    assert periods_between("day", "2026-02-27", "2026-03-02") == [
        "2026-02-27",
        "2026-02-28",
        "2026-03-01",
        "2026-03-02",
    ]
    assert periods_between("week", "2026-11-02", "2026-11-16") == [
        "2026-11-02",
        "2026-11-09",
        "2026-11-16",
    ]
    assert periods_between("month", "2026-11", "2027-02") == [
        "2026-11",
        "2026-12",
        "2027-01",
        "2027-02",
    ]


def test_one_usage_query_is_fast_on_a_store_of_many_sessions(db_path: Path) -> None:
    # Not a benchmark (bench/usage_bench.py is): a guard against a per-row query sneaking in.
    with open_store(db_path) as store:
        now = time.time()
        for i in range(300):
            sessions.create_session(store, f"s{i}", "cli", model="m", started_at=now - i * 600)
            usage.record_usage(store, f"s{i}", "m", input_tokens=i, at=now - i * 600)
    start = time.perf_counter()
    report = report_of(db_path, "day")
    assert time.perf_counter() - start < 2.0
    assert report.totals["input_tokens"] == sum(range(300))
    assert report.groups[-1]["day"] == date.today().isoformat()
