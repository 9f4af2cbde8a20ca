"""`hermes mcp`: the four tools (search_messages, list_sessions, get_session, get_usage), each
answering one call with a bounded page, and the table of their specs (TOOLS)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermes_cli.mcp.mcp_calls import (
    ITEMS_BUDGET,
    MAX_TOOL_CALLS,
    SCAN_ROWS,
    TOOL_CALL_CHARS,
    Call,
    ToolError,
    check_sources,
    cutoff_of,
    make_cursor,
    normalized,
    open_store,
    profile_name,
    read_cursor,
    wire_size,
    within_budget,
)
from hermes_cli.mcp.mcp_schemas import (
    GET_INPUT,
    GET_OUTPUT,
    LIST_INPUT,
    LIST_OUTPUT,
    SEARCH_INPUT,
    SEARCH_OUTPUT,
    USAGE_INPUT,
    USAGE_OUTPUT,
)

if TYPE_CHECKING:
    from hermes_state.store.connection import Store


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, description, JSON schemas and the function that answers it."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    run: Callable[[dict[str, Any], Call], dict[str, Any]]


# --- search_messages ------------------------------------------------------------------------


def _redacted_hit(hit: dict[str, Any]) -> dict[str, Any]:
    """Return a shaped search hit with its title, snippet and context redacted."""
    from hermes_state.reports import redact
    from hermes_state.search import hits

    out = dict(hit)
    title, snippet = hit.get("session_title"), hit.get("snippet")
    out["session_title"] = redact.redact(title) if title else title
    out["snippet"] = redact.redact_snippet(snippet) if snippet else snippet
    out["context"] = [
        {
            **c,
            "content": redact.redact_fragment(
                c.get("content"), cut_end=len(c.get("content") or "") >= hits.CONTEXT_CHARS
            ),
        }
        for c in hit.get("context") or []
    ]
    return out


def search_messages(args: dict[str, Any], call: Call) -> dict[str, Any]:
    """Answer search_messages: one page of hits, and how they were found."""
    from hermes_cli.rendering import records
    from hermes_state.reports import redact
    from hermes_state.search import search
    from hermes_state.vault import vault_search

    wanted = normalized(args, SEARCH_INPUT)
    offset = read_cursor("search_messages", wanted, args.get("cursor")) or 0
    query = wanted["query"]
    problem = search.query_problem(query)
    if problem is not None:
        raise ToolError("bad_query", f"query: {problem.message}", problem.hint)
    limit = wanted["limit"]
    after, before = cutoff_of(wanted, "since"), cutoff_of(wanted, "until")
    vaulted = not wanted["live_only"]
    with open_store() as store:
        home = store.path.parent
        check_sources(store, wanted.get("sources"), vaulted=vaulted)
        # As `sessions search` (its --live is live_only): one answer over live and vault.
        hits = vault_search.search_spanning(
            store,
            home,
            query,
            vaulted=vaulted,
            source_filter=wanted.get("sources"),
            exclude_sources=wanted.get("exclude_sources"),
            role_filter=wanted.get("roles"),
            limit=limit + 1,  # one more than the page: is there a next one?
            offset=offset,
            sort=wanted.get("sort", "rank"),
            after=after,
            before=before,
            archived=None if wanted["archived"] else False,
            complete=wanted["complete"],
            strict_sort="sort" in wanted,
            # Redacted: a match inside a secret is no match (nor counted), or prefix probes
            # would read a secret back one character at a time.
            hide=redact.blank_secrets if call.redact else None,
        )
        page = hits[:limit]
        titles = vault_search.hit_titles(store, home, page)
    # Each hit's "vault" is its vault year, None (null) for the live store.
    shaped = [records.hit(h, titles.get(h["session_id"])) for h in page]
    notes = [f"{w.message}; {w.hint}" for w in search.query_warnings(query)]
    echoed = query
    if call.redact:
        shaped = [_redacted_hit(h) for h in shaped]
        # Everything the server says is redacted, the query it repeats and its notes too.
        echoed, notes = redact.redact(query), [redact.redact(n) for n in notes]
    kept = within_budget(shaped, ITEMS_BUDGET - wire_size([echoed, notes]))
    more = kept < len(shaped) or len(hits) > limit
    return {
        "profile": profile_name(),
        "query": echoed,
        "ordering": hits.ordering,
        "route": hits.route,
        "partial": hits.partial,
        "ranked": hits.ranked,
        "examined": hits.examined,
        "candidates": hits.candidates,
        "searched_back_to": records.iso_utc(hits.searched_back_to),
        # As `sessions search --json`: how many match, in how many sessions (complete=false:
        # at least that many; the search stopped counting).
        "matches": hits.matches,
        "sessions": hits.sessions,
        "complete": hits.complete,
        "notes": notes,
        "hits": shaped[:kept],
        "next_cursor": make_cursor("search_messages", wanted, offset + kept) if more else None,
        "redacted": call.redact,
    }


# --- list_sessions --------------------------------------------------------------------------


def list_sessions(args: dict[str, Any], call: Call) -> dict[str, Any]:
    """Answer list_sessions: one page of sessions, newest first."""
    from hermes_cli.rendering import records
    from hermes_state.records import session_list
    from hermes_state.reports import redact
    from hermes_state.vault import vault_search

    wanted = normalized(args, LIST_INPUT)
    offset = read_cursor("list_sessions", wanted, args.get("cursor")) or 0
    filters: dict[str, Any] = {
        "sources": wanted.get("sources"),
        "exclude_sources": wanted.get("exclude_sources"),
        "include_archived": wanted["archived"],
        "active_since": cutoff_of(wanted, "since"),
        "active_before": cutoff_of(wanted, "until"),
    }
    with open_store() as store:
        check_sources(store, wanted.get("sources"), vaulted=wanted["vault"])
        if wanted["vault"]:
            # As `sessions list --vault`: one list over live and vault, counted from the rows.
            spanned = vault_search.list_spanning(
                store,
                store.path.parent,
                limit=wanted["limit"],
                offset=offset,
                order=wanted["sort"],
                **filters,
            )
            rows, total = spanned.rows, spanned.total
        else:
            rows = session_list.list_sessions(
                store, limit=wanted["limit"], offset=offset, order=wanted["sort"], **filters
            )
            total = session_list.count_sessions(store, **filters)
            counts = session_list.message_counts(store, [r["id"] for r in rows])
            for row in rows:
                # Counted from the rows, as `sessions list` does (the agent's counter can lag).
                row["message_count"] = counts[row["id"]].live
                row["stored_message_count"] = counts[row["id"]].stored
    profile = profile_name()
    shaped = []
    for row in rows:
        out = {**records.session(row, profile), "vault": row.get("vault")}
        if call.redact:
            out["title"] = redact.redact(out["title"])
            out["preview"] = redact.redact_fragment(
                out["preview"], cut_end=(out["preview"] or "").endswith("…")
            )
        shaped.append(out)
    kept = within_budget(shaped)
    more = offset + kept < total
    return {
        "profile": profile,
        "total": total,
        "offset": offset,
        "sessions": shaped[:kept],
        "next_cursor": make_cursor("list_sessions", wanted, offset + kept) if more else None,
        "redacted": call.redact,
    }


# --- get_session ----------------------------------------------------------------------------


def _field(text: str, max_chars: int, call: Call, truncated: dict[str, int], name: str) -> str:
    """Return a message field cut to max_chars (redacted when asked), noting a cut."""
    from hermes_state.reports import redact

    if len(text) > max_chars:
        truncated[name] = len(text)
        return redact.redact_prefix(text, max_chars) if call.redact else text[:max_chars]
    return redact.redact(text) if call.redact else text


def _tool_calls(value: Any) -> list[Any]:
    """Return a message's tool calls as a list (stored as JSON text by some writers)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [value]
    if isinstance(value, dict):
        return [value]
    return value if isinstance(value, list) else []


def _message(msg: Mapping[str, Any], wanted: Mapping[str, Any], call: Call) -> dict[str, Any]:
    """Return one transcript message: text fields cut to max_chars, tool calls summarised."""
    from hermes_cli.rendering import records
    from hermes_state.shapes.content import content_text

    limit = wanted["max_chars"]
    truncated: dict[str, int] = {}
    calls = []
    listed = _tool_calls(msg.get("tool_calls"))
    for i, item in enumerate(listed[:MAX_TOOL_CALLS]):
        fn = item.get("function") if isinstance(item, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        arguments = fn.get("arguments", item if not isinstance(item, dict) else None)
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(
            {
                "id": item.get("id") if isinstance(item, dict) else None,
                "name": fn.get("name"),
                "arguments": _field(
                    arguments, min(limit, TOOL_CALL_CHARS), call, truncated, f"tool_calls[{i}]"
                ),
            }
        )
    out: dict[str, Any] = {
        "id": msg.get("id"),
        "role": msg.get("role"),
        "created_at": records.iso_utc(msg.get("timestamp")),
        "content": _field(content_text(msg.get("content")), limit, call, truncated, "content"),
        "tool_name": msg.get("tool_name"),
        "tool_call_id": msg.get("tool_call_id"),
        "tool_calls": calls,
        "finish_reason": msg.get("finish_reason"),
        "active": bool(msg.get("active", 1)),
        "compacted": bool(msg.get("compacted", 0)),
        "message_uid": msg.get("message_uid"),
    }
    if len(listed) > MAX_TOOL_CALLS:
        out["tool_calls_omitted"] = len(listed) - MAX_TOOL_CALLS
    if wanted["reasoning"]:
        thought = records.reasoning_text(msg)
        out["reasoning"] = (
            None if thought is None else _field(thought, limit, call, truncated, "reasoning")
        )
    out["truncated"] = truncated
    return out


def _page_of_messages(
    store: Store, sid: str, wanted: Mapping[str, Any], after_id: int
) -> tuple[list[dict[str, Any]], int | None]:
    """Return up to limit messages after after_id (of the roles asked for), and the id the
    next page goes on after (None: the transcript ends here)."""
    from hermes_state.records import messages

    roles = set(wanted.get("roles") or ())
    limit = wanted["limit"]
    chunk = 500 if roles else limit + 1  # one more than a page: is there a next one?
    found: list[dict[str, Any]] = []
    examined = 0
    while examined < SCAN_ROWS:
        rows = messages.get_messages(
            store,
            sid,
            include_inactive=wanted["include_inactive"],
            include_compacted=True,
            limit=chunk,
            after_id=after_id,
        )
        for row in rows:
            if roles and row.get("role") not in roles:
                after_id = row["id"]
                examined += 1
                continue
            if len(found) == limit:
                return found, after_id  # another message follows this page
            found.append(row)
            after_id = row["id"]
            examined += 1
        if len(rows) < chunk:
            return found, None
    return found, after_id  # examined its share of rows: the next page goes on from here


def _fitted_message(
    msg: Mapping[str, Any], wanted: Mapping[str, Any], call: Call, budget: int
) -> dict[str, Any]:
    """Return a message too large for a page alone, its fields cut shorter until it fits (or
    to 100 characters each); truncated names every field cut and its full length."""
    limit = wanted["max_chars"]
    shaped = _message(msg, wanted, call)
    while wire_size(shaped) > budget and limit > 100:
        limit = max(100, limit // 2)
        shaped = _message(msg, {**wanted, "max_chars": limit}, call)
    return shaped


def get_session(args: dict[str, Any], call: Call) -> dict[str, Any]:
    """Answer get_session: the session's metadata and one page of its transcript."""
    from hermes_cli.commands import vault
    from hermes_cli.rendering import records
    from hermes_state.records import session_list, sessions as lib
    from hermes_state.reports import redact

    wanted = normalized(args, GET_INPUT)
    after = read_cursor("get_session", wanted, args.get("cursor")) or 0
    # As `sessions show`: a session the live store lacks is read from its vault store.
    with open_store() as live, vault.session_store(live, wanted["session"]) as (store, sid, year):
        row = lib.require_session(store, sid)
        counts = session_list.message_counts(store, [sid])[sid]
        later = lib.continued_as(store, sid)
        rows, resume_after = _page_of_messages(store, sid, wanted, after)
    row["message_count"], row["stored_message_count"] = counts.live, counts.stored
    head = {
        **records.session(row, profile_name()),
        "cwd": row.get("cwd"),
        "git_branch": row.get("git_branch"),
        "continued_as": later,
        "vault": year,
    }
    if call.redact:
        head["title"] = redact.redact(head["title"])
    budget = ITEMS_BUDGET - wire_size(head)
    shaped = [_message(m, wanted, call) for m in rows]
    kept = within_budget(shaped, budget)
    if kept == 1 and wire_size(shaped[0]) > budget:
        shaped[0] = _fitted_message(rows[0], wanted, call, budget)
    if kept < len(shaped):
        resume_after = shaped[kept - 1]["id"]
    return {
        "profile": head["profile"],
        "session": head,
        "messages": shaped[:kept],
        "next_cursor": (
            make_cursor("get_session", wanted, int(resume_after))
            if resume_after is not None
            else None
        ),
        "redacted": call.redact,
    }


# --- get_usage ------------------------------------------------------------------------------


def _check_models(store: Store, models: tuple[str, ...], *, vaulted: bool = False) -> None:
    """Refuse a model no usage is recorded for (in the vault too, vaulted), naming the ones
    that have usage."""
    from hermes_state.reports import usage_report
    from hermes_state.vault import profile_stores

    if not models:
        return
    if vaulted:
        have = profile_stores.sources_and_models(store, store.path.parent, store.waiting)[1]
    else:
        have = usage_report.models_with_usage(store)
    unknown = [m for m in models if m not in have]
    if unknown:
        listed = ", ".join(have) if have else "none yet"
        raise ToolError(
            "bad_argument",
            f"models: no usage is recorded for {unknown[0]!r}",
            f"This store has usage of: {listed}.",
        )


def get_usage(args: dict[str, Any], call: Call) -> dict[str, Any]:
    """Answer get_usage: tokens, API calls and cost, totalled and per group (one page of them)."""
    from hermes_cli.commands.usage import usage_document
    from hermes_state.reports import redact, usage_report
    from hermes_state.vault import profile_stores

    wanted = normalized(args, USAGE_INPUT)
    offset = read_cursor("get_usage", wanted, args.get("cursor")) or 0
    flt = usage_report.UsageFilter(
        since=cutoff_of(wanted, "since"),
        until=cutoff_of(wanted, "until"),
        sources=tuple(dict.fromkeys(wanted.get("sources", ()))),
        models=tuple(dict.fromkeys(wanted.get("models", ()))),
    )
    if flt.since is not None and flt.until is not None and flt.since >= flt.until:
        raise ToolError(
            "bad_argument",
            f"since: {wanted['since']!r} is not before until {wanted['until']!r}",
            "Nothing can be in between; give an earlier since or a later until.",
        )
    vaulted = not wanted["live_only"]
    with open_store() as store:
        check_sources(store, list(flt.sources), vaulted=vaulted)
        _check_models(store, flt.models, vaulted=vaulted)
        if vaulted:  # as `hermes usage`: the live store and every vault year
            report = profile_stores.usage_across(
                store, store.path.parent, wanted["by"], flt, waiting=store.waiting
            )
        else:
            report = usage_report.usage_report(store, wanted["by"], flt)
    # The document of `hermes usage --json`, its groups paged.
    document = usage_document(report, profile_name(), wanted["by"], flt)
    groups = document["groups"]
    page = groups[offset : offset + wanted["limit"]]
    if call.redact:
        page = [{**g, "title": redact.redact(g["title"])} if g.get("title") else g for g in page]
    kept = within_budget(page, ITEMS_BUDGET - wire_size({**document, "groups": []}))
    more = offset + kept < len(groups)
    return {
        **document,
        "groups": page[:kept],
        "group_count": len(groups),
        "offset": offset,
        "next_cursor": make_cursor("get_usage", wanted, offset + kept) if more else None,
        "redacted": call.redact,
    }


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "search_messages",
        "Search messages",
        "Full-text search of every message (words, phrases, prefix*, OR, -exclusions, CJK), as "
        "`hermes sessions search`: hits with session, role, time, a snippet with >>>matches<<< "
        "and the messages around. partial=true: the search stopped at its work budget "
        "(complete=true looks further); ordering rank_recent: ranked among the newest matches. "
        "Vaulted sessions are searched too (live_only=true leaves them out): a hit's vault is "
        'its vault year ("2025"), null for the live store.',
        SEARCH_INPUT,
        SEARCH_OUTPUT,
        search_messages,
    ),
    ToolSpec(
        "list_sessions",
        "List sessions",
        "Sessions newest first (or most recently active first), as `hermes sessions list`: id, "
        "title or a preview, source, model, message count, tokens, cost, times. Archived ones "
        "only with archived=true; vaulted ones only with vault=true (each row's vault: its "
        'vault year, "2025", or null for live). total counts every session the filters keep.',
        LIST_INPUT,
        LIST_OUTPUT,
        list_sessions,
    ),
    ToolSpec(
        "get_session",
        "Read a session",
        "One session's metadata and a page of its transcript, oldest first, as `hermes sessions "
        "show`: each message's role, time, text, tool calls (arguments cut) and, with "
        "reasoning=true, the model's reasoning. Name the session by id, id prefix or title. "
        "A session the live store lacks is read from the vault (read-only): its vault is then "
        'the vault year ("2025"), null for a live session.',
        GET_INPUT,
        GET_OUTPUT,
        get_session,
    ),
    ToolSpec(
        "get_usage",
        "Usage and cost",
        "Tokens (input, output, cache, reasoning), API calls and cost, as `hermes usage`: "
        "totals and one row per day, week, month, model, provider, task, source or session "
        "(costliest first; periods oldest first). A cost nobody recorded is null (unknown), "
        "never 0; unknown_cost_count says how many records lack one. Vaulted sessions count "
        "(live_only=true leaves them out; vault lists the years counted).",
        USAGE_INPUT,
        USAGE_OUTPUT,
        get_usage,
    ),
)
