"""What the store says was used and spent: one definition of every usage figure, summed per period,
model, provider, task, source or session (read by `hermes usage` and `hermes sessions stats`).

The unit is a *usage record*, and every figure is a sum over records:

- each row of ``session_model_usage`` (one per session, model, billing route and task; the
  agent's auxiliary calls such as title generation or compression are rows with ``task`` set),
  at the time it was last added to (``last_seen``);
- each session's own counters that its rows do not account for: ``max(0, column - rows)``,
  figure by figure, under the session's model and provider, task ``''``, at the session's last
  activity (its newest message or activity stamp, else its start). That is the whole of a
  session's usage in a store without the table (releases before per-route accounting), and the
  part written as cumulative totals (the gateway's convention) elsewhere.

  Only the rows the agent also adds to the session's counters are subtracted: the
  conversation's own (task ``''``) and per-turn routes (ROUTE_TASKS, e.g. voice chat).
  Auxiliary calls (title generation, compression, vision …) never touch the session's
  counters, so subtracting them would lose a gateway session's main usage; the agent's own
  Insights report does subtract them, and under-counts such sessions by their auxiliary calls.

Cost: a record's cost is its actual (billed) cost when one was recorded (> 0), else its
estimate when it has one (an estimate > 0, or a cost status of actual/estimated/included,
which makes a 0 a real 0). Otherwise the cost is *unknown*: the record's tokens count, its cost
does not, and it is counted in ``unknown_cost_count`` / ``unknown_cost_tokens``. A sum with no
known cost is None, never 0. Differences below a billionth of a dollar are float rounding, not
spend. ``total_tokens`` is input + output, as everywhere in this package.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_state.store.connection import Store
from hermes_state.store.sql import marks

PERIODS = ("day", "week", "month")
GROUPINGS = (*PERIODS, "model", "provider", "task", "source", "session")
# The key each grouping's rows carry (a session is `session_id` outside a session object).
GROUP_KEYS = {g: ("session_id" if g == "session" else g) for g in GROUPINGS}
COUNTERS = (
    "api_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
FIGURES = (
    "session_count",
    *COUNTERS,
    "total_tokens",
    "estimated_cost_usd",
    "actual_cost_usd",
    "cost_usd",
    "unknown_cost_count",
    "unknown_cost_tokens",
)
# A cost status that makes a stored 0 a known 0 (the agent's CostStatus minus "unknown").
PRICED_STATUSES = ("actual", "estimated", "included")
# Tasks whose calls the agent adds to the session's counters as well as to their own row
# (a per-turn route; hermes-agent's voice_turn_route). Every other task is an auxiliary call.
ROUTE_TASKS = ("voice_chat",)
ROUNDING_USD = 1e-9
BASIS_ROWS = "session_model_usage"
BASIS_SESSIONS = "sessions"
EMPTY = "''"

# How each grouping buckets or names a record (`r` is the records CTE). Periods are local days,
# weeks starting on Monday (named by that Monday) and months.
_KEY_SQL = {
    "day": "date(r.at, 'unixepoch', 'localtime')",
    "week": "date(r.at, 'unixepoch', 'localtime', 'weekday 0', '-6 days')",
    "month": "strftime('%Y-%m', r.at, 'unixepoch', 'localtime')",
    "model": "r.model",
    "provider": "r.provider",
    "task": "r.task",
    "source": "r.source",
    "session": "r.session_id",
}


@dataclass(frozen=True)
class UsageFilter:
    """Which records count: a time range (epoch seconds, until exclusive), sources, models."""

    since: float | None = None
    until: float | None = None
    sources: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    # Sessions whose records a store must not count (a vault store's stale copies of live ones).
    exclude_sessions: tuple[str, ...] = ()

    def where(self) -> tuple[str, list[Any]]:
        """Return the WHERE clause over the records CTE and its parameters."""
        clauses: list[str] = ["1"]
        params: list[Any] = []
        if self.since is not None:
            clauses.append("r.at >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append("r.at < ?")
            params.append(self.until)
        for column, values in (("r.source", self.sources), ("r.model", self.models)):
            if values:
                clauses.append(f"{column} IN ({marks(len(values))})")
                params.extend(values)
        if self.exclude_sessions:
            clauses.append("r.session_id NOT IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(self.exclude_sessions)))
        return " AND ".join(clauses), params


@dataclass(frozen=True)
class UsageReport:
    """Usage figures of the matching records: their totals, and one row per group."""

    by: str
    basis: str  # BASIS_ROWS (the per-route table, plus leftovers) or BASIS_SESSIONS (no table)
    filter: UsageFilter
    totals: dict[str, Any]
    groups: list[dict[str, Any]] = field(default_factory=list)
    # The vault years summed in ((): the profile has none); None: the live store alone.
    vault: tuple[str, ...] | None = None


def basis(store: Store) -> str:
    """Return where the store keeps usage: the per-route table, or only the sessions' columns."""
    return BASIS_ROWS if store.columns("session_model_usage") else BASIS_SESSIONS


def _col(cols: Sequence[str], name: str, alias: str, default: str = "NULL") -> str:
    """Return alias.name, or a default where an older store lacks the column."""
    return f"{alias}.{name}" if name in cols else default


def activity_sql(store: Store, alias: str = "s") -> str:
    """SQL of a session's last activity: its newest message or activity stamp, else its start."""
    newest = (
        f"COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = {alias}.id),"
        f" {alias}.started_at)"
    )
    if "last_activity_at" not in store.columns("sessions"):
        return newest
    return f"MAX(COALESCE({alias}.last_activity_at, {alias}.started_at), {newest})"


def records_sql(store: Store) -> str:
    """Return the WITH clause defining ``records``: one row per usage record (module docstring).

    Columns: session_id, model, provider (NULL when unnamed), task ('' = the conversation
    itself), source, at, the COUNTERS, estimated and actual (NULL when unknown).
    """
    s_cols = store.columns("sessions")
    u_cols = store.columns("session_model_usage")
    priced = ", ".join(f"'{s}'" for s in PRICED_STATUSES)
    s_counter = {c: f"COALESCE({_col(s_cols, c, 's', '0')}, 0)" for c in COUNTERS}
    s_est = _col(s_cols, "estimated_cost_usd", "s")
    s_act = _col(s_cols, "actual_cost_usd", "s")
    s_status = _col(s_cols, "cost_status", "s")
    s_provider = f"NULLIF({_col(s_cols, 'billing_provider', 's')}, '')"
    if u_cols:
        u_status = _col(u_cols, "cost_status", "u")
        u_at = [_col(u_cols, "last_seen", "u"), _col(u_cols, "first_seen", "u")]
        rows = (
            "SELECT u.session_id AS session_id, u.model AS model,"
            f" NULLIF({_col(u_cols, 'billing_provider', 'u')}, '') AS provider,"
            f" COALESCE({_col(u_cols, 'task', 'u', EMPTY)}, '') AS task,"
            f" s.source AS source, COALESCE({', '.join(u_at)}, {activity_sql(store)}) AS at, "
            + ", ".join(f"COALESCE(u.{c}, 0) AS {c}" for c in COUNTERS)
            + ", CASE WHEN u.estimated_cost_usd > 0"
            f" OR {u_status} IN ({priced}) THEN u.estimated_cost_usd END AS estimated,"
            " CASE WHEN u.actual_cost_usd > 0 THEN u.actual_cost_usd END AS actual"
            " FROM session_model_usage u LEFT JOIN sessions s ON s.id = u.session_id"
        )
        # Most sessions' rows account for all their counters: one index lookup per session
        # finds the few that have something left, and only those are summed per counter.
        counted = ""  # the rows the session's counters include (see the module docstring)
        if "task" in u_cols:
            routes = ", ".join(f"'{t}'" for t in ROUTE_TASKS)
            counted = f" AND (COALESCE(u.task, '') = '' OR u.task IN ({routes}))"
        diffs = [f"{s_counter[k]} - COALESCE(SUM(u.{k}), 0)" for k in COUNTERS]
        diffs.append(
            f"COALESCE(COALESCE({s_est}, 0) - COALESCE(SUM(u.estimated_cost_usd), 0)"
            f" > {ROUNDING_USD}, 0)"
        )
        diffs.append(f"COALESCE({s_act} - COALESCE(SUM(u.actual_cost_usd), 0) > {ROUNDING_USD}, 0)")
        covered = (
            "flagged AS (SELECT s.id AS id FROM sessions s WHERE (SELECT"
            f" MAX({', '.join(diffs)}) FROM session_model_usage u"
            f" WHERE u.session_id = s.id{counted}) > 0), "
            "covered AS (SELECT u.session_id AS session_id, "
            + ", ".join(f"SUM(COALESCE(u.{c}, 0)) AS {c}" for c in COUNTERS)
            + ", SUM(COALESCE(u.estimated_cost_usd, 0)) AS est,"
            " SUM(COALESCE(u.actual_cost_usd, 0)) AS act FROM session_model_usage u"
            f" WHERE u.session_id IN (SELECT id FROM flagged){counted} GROUP BY u.session_id), "
        )
        join = " LEFT JOIN covered c ON c.session_id = s.id WHERE s.id IN (SELECT id FROM flagged)"
        c = {**{k: f"COALESCE(c.{k}, 0)" for k in COUNTERS}, "est": "COALESCE(c.est, 0)"}
        c["act"] = "COALESCE(c.act, 0)"
    else:
        rows = covered = join = ""
        c = {**dict.fromkeys(COUNTERS, "0"), "est": "0", "act": "0"}
    left_est = f"({s_est} - {c['est']})"
    left_act = f"({s_act} - {c['act']})"
    stamp = _col(s_cols, "last_activity_at", "s")
    leftover = (
        "leftover AS (SELECT s.id AS id, s.started_at AS started_at,"
        f" {stamp} AS last_activity_at, COALESCE(s.model, 'unknown') AS model,"
        f" {s_provider} AS provider, s.source AS source, "
        + ", ".join(f"MAX(0, {s_counter[k]} - {c[k]}) AS {k}" for k in COUNTERS)
        + f", CASE WHEN {left_est} > {ROUNDING_USD} THEN {left_est}"
        f" WHEN {s_est} IS NOT NULL AND {s_status} IN ({priced}) THEN 0 END AS estimated,"
        f" CASE WHEN {left_act} > {ROUNDING_USD} THEN {left_act} END AS actual"
        f" FROM sessions s{join}), "
    )
    any_left = " OR ".join([*(f"l.{k} > 0" for k in COUNTERS), "l.estimated > 0", "l.actual > 0"])
    left_rows = (
        "SELECT l.id AS session_id, l.model AS model, l.provider AS provider, '' AS task,"
        " l.source AS source,"
        f" {activity_sql(store, 'l')} AS at, "
        + ", ".join(f"l.{k}" for k in COUNTERS)
        + f", l.estimated, l.actual FROM leftover l WHERE {any_left}"
    )
    body = f"{rows} UNION ALL {left_rows}" if rows else left_rows
    return f"WITH {covered}{leftover}records AS ({body})"


def _figures_sql() -> str:
    """Return the aggregate select list of FIGURES over records `r`."""
    cost = "COALESCE(r.actual, r.estimated)"
    return ", ".join(
        [
            "COUNT(DISTINCT r.session_id) AS session_count",
            *(f"COALESCE(SUM(r.{c}), 0) AS {c}" for c in COUNTERS),
            "COALESCE(SUM(r.input_tokens + r.output_tokens), 0) AS total_tokens",
            "SUM(r.estimated) AS estimated_cost_usd",
            "SUM(r.actual) AS actual_cost_usd",
            f"SUM({cost}) AS cost_usd",
            f"COALESCE(SUM({cost} IS NULL), 0) AS unknown_cost_count",
            f"COALESCE(SUM(CASE WHEN {cost} IS NULL THEN r.input_tokens + r.output_tokens END), 0)"
            " AS unknown_cost_tokens",
        ]
    )


def _where(flt: UsageFilter | None) -> tuple[str, list[Any]]:
    return (flt or UsageFilter()).where()


def usage_totals(store: Store, flt: UsageFilter | None = None) -> dict[str, Any]:
    """Return the FIGURES summed over every matching record."""
    where, params = _where(flt)
    row = store.conn.execute(
        f"{records_sql(store)} SELECT {_figures_sql()} FROM records r WHERE {where}", params
    ).fetchone()
    return {k: row[k] for k in FIGURES}


def _order_key(by: str, order: str) -> Any:
    """Return the sort key of groups: periods oldest first, else costliest (or most tokens)."""
    key = GROUP_KEYS[by]

    def named(g: dict[str, Any]) -> str:
        return "" if g[key] is None else str(g[key])

    if by in PERIODS:
        return named
    if order == "tokens":
        return lambda g: (
            -g["total_tokens"],
            g["cost_usd"] is None,
            -(g["cost_usd"] or 0),
            named(g),
        )
    return lambda g: (g["cost_usd"] is None, -(g["cost_usd"] or 0), -g["total_tokens"], named(g))


def usage_groups(
    store: Store,
    by: str,
    flt: UsageFilter | None = None,
    *,
    order: str = "cost",
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Return the FIGURES per group (keyed by GROUP_KEYS[by]).

    Periods come oldest first; other groupings costliest first (``order="tokens"``: most
    tokens first), unknown costs after known ones. ``session`` rows also carry the session's
    title, source and model.
    """
    _check_grouping(by)
    where, params = _where(flt)
    sql = (
        f"{records_sql(store)} SELECT {_KEY_SQL[by]} AS g, {_figures_sql()} FROM records r"
        f" WHERE {where} GROUP BY g"
    )
    if limit is not None:
        # The same order as _order_key, in SQL: a top 10 of 30,000 sessions sorts no dicts.
        sql += f" ORDER BY {_ordering_sql(by, order)} LIMIT ?"
        params.append(max(0, int(limit)))
    groups = sorted(_groups(by, store.conn.execute(sql, params)), key=_order_key(by, order))
    if by == "session":
        _add_session_columns(store, groups)
    return groups


def usage_groupings(
    store: Store,
    wanted: Sequence[tuple[str, str, int | None]],
    flt: UsageFilter | None = None,
) -> list[list[dict[str, Any]]]:
    """Return the groups of several groupings, each (by, order, limit) as usage_groups gives
    them, from one statement: the records (and the check of every session's counters against
    its usage rows) are worked out once for all of them."""
    for by, _order, _limit in wanted:
        _check_grouping(by)
    where, params = _where(flt)
    records = records_sql(store).replace("records AS (", "records AS MATERIALIZED (")
    arms: list[str] = []
    values: list[Any] = []
    for n, (by, order, limit) in enumerate(wanted):
        arm = (
            f"SELECT {_KEY_SQL[by]} AS g, {_figures_sql()} FROM records r WHERE {where} GROUP BY g"
        )
        values += params
        if limit is not None:
            arm += f" ORDER BY {_ordering_sql(by, order)} LIMIT ?"
            values.append(max(0, int(limit)))
        arms.append(f"SELECT {n} AS part, * FROM ({arm})")
    with store.snapshot():
        rows = store.conn.execute(f"{records} {' UNION ALL '.join(arms)}", values).fetchall()
        out = []
        for n, (by, order, _limit) in enumerate(wanted):
            groups = _groups(by, [r for r in rows if r["part"] == n])
            groups.sort(key=_order_key(by, order))
            if by == "session":
                _add_session_columns(store, groups)
            out.append(groups)
    return out


def _ordering_sql(by: str, order: str) -> str:
    """Return _order_key's order as an ORDER BY over groups (so a LIMIT keeps the same top)."""
    if by in PERIODS:
        return "g"
    if order == "tokens":
        return "total_tokens DESC, cost_usd IS NULL, cost_usd DESC, g"
    return "cost_usd IS NULL, cost_usd DESC, total_tokens DESC, g"


def _check_grouping(by: str) -> None:
    if by not in GROUPINGS:
        raise ValueError(f"unknown grouping {by!r}; one of {', '.join(GROUPINGS)}")


def _groups(by: str, rows: Any) -> list[dict[str, Any]]:
    key = GROUP_KEYS[by]
    return [{key: row["g"], **{k: row[k] for k in FIGURES}} for row in rows]


def _add_session_columns(store: Store, groups: list[dict[str, Any]]) -> None:
    """Give each session group its session's title, source and model."""
    from hermes_state.store.sql import chunks

    title = _col(store.columns("sessions"), "title", "s")
    info: dict[str, Any] = {}
    for batch in chunks([g["session_id"] for g in groups]):
        for row in store.conn.execute(
            f"SELECT s.id, {title} AS title, s.source, s.model FROM sessions s"
            f" WHERE s.id IN ({marks(len(batch))})",
            batch,
        ):
            info[row[0]] = row
    for i, g in enumerate(groups):
        row = info.get(g["session_id"])
        named = {k: (row[k] if row is not None else None) for k in ("title", "source", "model")}
        groups[i] = {"session_id": g["session_id"], **named, **{k: g[k] for k in FIGURES}}


def usage_report(
    store: Store, by: str = "model", flt: UsageFilter | None = None, *, order: str = "cost"
) -> UsageReport:
    """Return the totals and the groups of the matching records, from one statement (the
    records are worked out once, and both sums see the same committed state)."""
    _check_grouping(by)
    flt = flt or UsageFilter()
    where, params = flt.where()
    records = records_sql(store).replace("records AS (", "records AS MATERIALIZED (")
    figures = _figures_sql()
    sql = (
        f"{records} SELECT 0 AS total, {_KEY_SQL[by]} AS g, {figures} FROM records r"
        f" WHERE {where} GROUP BY g"
        f" UNION ALL SELECT 1 AS total, NULL AS g, {figures} FROM records r WHERE {where}"
    )
    with store.snapshot():
        rows = store.conn.execute(sql, [*params, *params]).fetchall()
        total = next(r for r in rows if r["total"])
        totals = {k: total[k] for k in FIGURES}
        groups = [r for r in rows if not r["total"]]
        groups = sorted(_groups(by, groups), key=_order_key(by, order))
        if by == "session":
            _add_session_columns(store, groups)
    return UsageReport(by=by, basis=basis(store), filter=flt, totals=totals, groups=groups)


def models_with_usage(store: Store) -> list[str]:
    """Return every model some usage record names, in name order."""
    sql = f"{records_sql(store)} SELECT DISTINCT model FROM records ORDER BY model"
    return [r[0] for r in store.conn.execute(sql) if r[0] is not None]


COSTS = ("estimated_cost_usd", "actual_cost_usd", "cost_usd")


def add_figures(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Return the FIGURES of two disjoint sets of records together (an unknown sum stays None)."""
    out = dict(a)
    for k in FIGURES:
        x, y = a.get(k), b.get(k)
        if k in COSTS:
            out[k] = None if x is None and y is None else (x or 0) + (y or 0)
        else:
            out[k] = (x or 0) + (y or 0)
    return out


def merge_groups(
    by: str, parts: Sequence[Sequence[dict[str, Any]]], *, order: str = "cost"
) -> list[dict[str, Any]]:
    """Merge the groups of several stores' reports (same grouping) into one, in report order."""
    key = GROUP_KEYS[by]
    merged: dict[Any, dict[str, Any]] = {}
    for groups in parts:
        for g in groups:
            have = merged.get(g[key])
            merged[g[key]] = dict(g) if have is None else add_figures(have, g)
    return sorted(merged.values(), key=_order_key(by, order))
