"""`hermes sessions …`: list, search, browse, show, export, import, prune, delete, rename, pin,
archive, stats, recover.

Each command parses its flags, calls one library operation and hands the result to render (for
people) or to output (json, jsonl, csv, tsv: the vocabulary of hermes_cli.rendering.records).
"""

import collections
import dataclasses
import io
import itertools
import sys
import time
from collections.abc import Iterable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from hermes_cli.rendering import output, records, render, session_views, store_views
from hermes_cli.shared.exitcodes import ExitCode
from hermes_cli.shared.machines import MachineOption
from hermes_cli.shared.options import (
    AGE_HELP,
    UNLIMITED,
    WHEN_HELP,
    ColorOption,
    ExactSessionRef,
    ExcludeSources,
    FieldsOption,
    ForceFlag,
    FormatOption,
    JsonFlag,
    NoPagerFlag,
    QueryCommand,
    Roles,
    SessionRef,
    Sources,
    YesFlag,
    command,
    cutoff,
    fields_of,
    models_option,
    output_format,
    since_option,
    until_option,
    validate_age,
    validate_roles,
    validate_text,
)

app = typer.Typer(
    help="Browse, search, export and maintain sessions.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


class ListSort(StrEnum):
    """Orderings of `sessions list`."""

    started = "started"
    active = "active"


class SearchSort(StrEnum):
    """Orderings of `sessions search`."""

    rank = "rank"
    newest = "newest"
    oldest = "oldest"


class PrintWhat(StrEnum):
    """What `sessions browse` prints for the chosen session."""

    id = "id"
    resume = "resume"


class ExportFormat(StrEnum):
    """Formats `sessions export` writes."""

    jsonl = "jsonl"
    json = "json"
    md = "md"


class Conflict(StrEnum):
    """What `sessions import` does with a session id that already exists."""

    skip = "skip"
    replace = "replace"  # type: ignore[assignment]  # the member, not str.replace


class TitleClash(StrEnum):
    """What `sessions import` does with a title another session of the store has."""

    fail = "fail"
    rename = "rename"
    skip = "skip"


def _setup(
    fmt: output.Format | None, as_json: bool, color: output.ColorMode, *, pager: bool = False
) -> output.Settings:
    """Decide this command's output settings from its flags and stdout."""
    return output.configure(output_format(fmt, as_json), color=color, pager=pager)


# --- list -----------------------------------------------------------------------------------


def _list_one(
    name: str,
    store: Any,
    *,
    filters: dict[str, Any],
    counted: dict[str, Any],
    limit: int,
    offset: int,
) -> tuple[list[dict[str, Any]], int]:
    from hermes_state.records import session_list

    rows = session_list.list_sessions(store, limit=limit, offset=offset, **filters)
    total = session_list.count_sessions(store, **counted)
    counts = session_list.message_counts(store, [r["id"] for r in rows])
    for r in rows:
        r["profile"] = name
        # Counted from the rows (the agent's counter can lag behind foreign writers).
        r["message_count"], r["stored_message_count"] = counts[r["id"]].live, counts[r["id"]].stored
    return rows, total


LIMIT_HELP = "Show at most N {what} (0: all). Default: 20 on a terminal, all in --json/--format."
DEFAULT_LIMIT = 20  # rows a person sees by default; machine formats get every row


def limit_option(what: str) -> Any:
    """Return the -n/--limit option of a listing of `what`."""
    return typer.Option("-n", "--limit", min=0, metavar="N", help=LIMIT_HELP.format(what=what))


def _limit_for(limit: int | None, settings: output.Settings) -> int:
    """Return the row limit: as given (0 = all), else 20 for people and all for programs."""
    if limit is None:
        return UNLIMITED if settings.machine else DEFAULT_LIMIT
    return limit or UNLIMITED


@command(
    app,
    "list",
    examples=[
        "hermes sessions list",
        "hermes sessions list --since yesterday --source telegram --source discord",
        "hermes sessions list --sort active -n 50 --no-pager",
        "hermes sessions list --reverse --since '2 weeks ago'",
        "hermes sessions list --all-profiles --format tsv | cut -f1,2,6",
        "hermes sessions list --json=id,title,source | jq -r '.sessions[].id'",
        "hermes sessions list --format jsonl | jq -r .id",
        "hermes sessions list --title 'travel plans' --model anthropic/claude-sonnet-4",
    ],
)
def list_sessions(
    source: Sources = None,
    exclude_source: ExcludeSources = None,
    title: Annotated[
        str | None,
        typer.Option(
            "--title",
            metavar="TEXT",
            callback=validate_text,
            help="Only sessions whose title contains TEXT (case folded for ASCII letters).",
        ),
    ] = None,
    model: Annotated[
        list[str] | None,
        models_option("sessions of model M, as `sessions stats` names it (repeatable)."),
    ] = None,
    since: Annotated[str | None, since_option("sessions active")] = None,
    until: Annotated[str | None, until_option("sessions last active")] = None,
    limit: Annotated[int | None, limit_option("sessions")] = None,
    offset: Annotated[
        int, typer.Option("--offset", min=0, metavar="N", help="Skip the first N sessions.")
    ] = 0,
    archived: Annotated[
        bool, typer.Option("--archived", help="Include archived sessions.")
    ] = False,
    sort: Annotated[
        ListSort, typer.Option("--sort", help="Newest start first, or most recently active first.")
    ] = ListSort.started,
    reverse: Annotated[
        bool, typer.Option("--reverse", help="Oldest first (reverses --sort).")
    ] = False,
    all_profiles: Annotated[
        bool,
        typer.Option(
            "--all-profiles", help="List the root and every named profile (adds Profile)."
        ),
    ] = False,
    vaulted: Annotated[
        bool,
        typer.Option(
            "--vault",
            help='Include vaulted sessions, marked [vault 2025] ("vault": "2025" in machine '
            "formats, null for live ones).",
        ),
    ] = False,
    machine: MachineOption = None,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    fields: FieldsOption = None,
    color: ColorOption = output.ColorMode.auto,
    no_pager: NoPagerFlag = False,
) -> None:
    """List sessions (read-only): id, title or preview, source, model, size, last active.

    --since and --until filter on when a session was last active (its newest message), as in
    every command. Archived sessions are left out unless --archived. A person sees 20 rows by
    default; --json and --format jsonl/csv/tsv print every row unless -n/--limit is given, and
    a limited answer says so (a note on stderr; "total" and "complete" in --json).

    On a narrow terminal the title and model are cut first, then whole columns are left out in
    this order: Model, Source, Tokens, Msgs, Profile, Last active. The ID is never cut.

    Vaulted sessions: search, show and export include them; list and browse only with --vault;
    search --live leaves them out.
    """
    from hermes_cli.rendering import pager
    from hermes_cli.shared import stores, waiting
    from hermes_state.store.errors import StoreNotFoundError
    from hermes_state.vault import profile_stores

    settings = _setup(fmt, as_json, color, pager=not no_pager)
    picked = fields_of(fields)
    session_keys = (*records.SESSION_KEYS, "vault") if vaulted else records.SESSION_KEYS
    if machine is not None:
        if vaulted or all_profiles:
            raise typer.BadParameter(
                "--machine reads each machine's store; leave out --vault and --all-profiles",
                param_hint="--machine",
            )
        session_keys = (*session_keys, "machine")
    left_out: int | None = None  # vaulted sessions a live-only listing leaves out
    if picked is not None:
        _check_fields(picked, session_keys)
    limit = _limit_for(limit, settings)
    filters = {
        "sources": source or None,
        "exclude_sources": exclude_source or None,
        "include_archived": archived,
        "order": sort.value,
        "reverse": reverse,
        "active_since": cutoff(since),
        "active_before": cutoff(until),
        "title_contains": title or None,
        "models": model or None,
    }
    counted = {k: v for k, v in filters.items() if k not in ("order", "reverse")}
    errors: list[dict[str, Any]] = []
    if vaulted and all_profiles:
        raise typer.BadParameter(
            "--vault lists one profile's vault; leave out --all-profiles", param_hint="--vault"
        )
    if vaulted:
        from hermes_state.vault import vault_search

        wanted: dict[str, Any] = dict(filters)
        try:
            with stores.read_store() as store:
                spanned = vault_search.list_spanning(
                    store, store.path.parent, limit=limit, offset=offset, **wanted
                )
        except StoreNotFoundError:
            spanned = vault_search.SpanningList([], 0)
        rows, total = spanned.rows, spanned.total
        for r in rows:
            r["profile"] = stores.profile_name()
    elif machine is not None:
        from hermes_cli.shared import machines

        pages = []
        for machine_name, where in machines.homes(machine):
            with machines.reading(where):
                try:
                    with stores.read_store() as store:
                        got = _list_one(
                            stores.profile_name(),
                            store,
                            filters=filters,
                            counted=counted,
                            limit=limit + offset,
                            offset=0,
                        )
                except StoreNotFoundError:
                    got = ([], 0)
            for r in got[0]:
                r["machine"] = machine_name
            pages.append(got)
        key = "last_active" if sort is ListSort.active else "started_at"
        merged = [r for rows, _ in pages for r in rows]
        merged.sort(key=lambda r: (r.get(key) or 0, r["id"]), reverse=not reverse)
        rows = merged[offset : offset + limit]
        total = sum(t for _, t in pages)
    elif all_profiles:
        pages, errors = stores.across_profiles(
            lambda name, store: _list_one(
                name, store, filters=filters, counted=counted, limit=limit + offset, offset=0
            )
        )
        key = "last_active" if sort is ListSort.active else "started_at"
        merged = [r for rows, _ in pages for r in rows]
        merged.sort(key=lambda r: (r.get(key) or 0, r["id"]), reverse=not reverse)
        rows = merged[offset : offset + limit]
        total = sum(t for _, t in pages)
    else:
        try:
            with stores.read_store() as store:
                _check_sources(store, source)
                _check_models(store, model)
                rows, total = _list_one(
                    stores.profile_name(),
                    store,
                    filters=filters,
                    counted=counted,
                    limit=limit,
                    offset=offset,
                )
                left_out = profile_stores.vault_only_count(
                    store, store.path.parent, waiting.current()
                )
        except StoreNotFoundError:
            rows, total = [], 0
    shaped, keys = records.pick(
        (
            {**records.session(r), "vault": r.get("vault")}
            if vaulted
            else {**records.session(r), "machine": r.get("machine")}
            if machine is not None
            else records.session(r)
            for r in rows
        ),
        session_keys,
        picked,
    )
    complete = offset + len(rows) >= total
    document = {
        "sessions": shaped,
        "total": total,
        "offset": offset,
        "complete": complete,
        "errors": errors,
    }
    if left_out is not None:
        document["vault_not_listed"] = left_out
    vault_note = (
        f"Not listed: {left_out:,} vaulted session(s) (--vault includes them)."
        if left_out
        else None
    )
    if settings.machine:
        output.emit(settings, document, shaped, keys)
        if not complete:
            session_views.more_rows_hint(len(rows), offset, total, limit)
        if vault_note and settings.format is not output.Format.json:
            render.echo(vault_note, err=True)
        return
    stores.report_profile_errors(errors)
    if not rows:
        render.echo("No sessions found." if total or _filtered(filters) else "No sessions yet.")
        if vault_note:
            render.echo(vault_note)
        return
    if vaulted:
        # The mark leads the title / preview: the ID stays whole, ready to copy.
        rows = [
            {**r, "title": f"[vault {r['vault']}] {session_views.session_label(r)}"}
            if r.get("vault")
            else r
            for r in rows
        ]
    if machine is not None:
        rows = [
            {**r, "title": f"[machine {r['machine']}] {session_views.session_label(r)}"}
            if r.get("machine")
            else r
            for r in rows
        ]
    with pager.paging(settings):
        session_views.session_list(rows, with_profile=all_profiles)
    session_views.more_rows_hint(len(rows), offset, total, limit)
    if vault_note:
        render.echo(vault_note)


def _filtered(filters: dict[str, Any]) -> bool:
    """Tell whether a listing asked for a subset (so an empty answer is not an empty store)."""
    return any(
        filters.get(k)
        for k in (
            "sources",
            "exclude_sources",
            "active_since",
            "active_before",
            "title_contains",
            "models",
        )
    )


def _check_fields(fields: list[str], keys: tuple[str, ...]) -> None:
    """Refuse, as a usage error, a --fields name the records of this command do not have."""
    try:
        records.pick((), keys, fields)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fields") from None


# --- search ---------------------------------------------------------------------------------

SEARCH_SYNTAX = """Query syntax:

\b
  docker build      messages with both words (AND between them is the same)
  "docker build"    the words next to each other, in this order
  build*            words that start with build
  docker OR podman  either; a b OR c means (a and b) or c
  docker -compose   without the word compose; also NOT compose, -"a phrase",
                    -build*
  会議              CJK text, found inside longer runs of CJK too

\b
  AND, OR, NOT are operators in capitals only; and, or, not are words. A word
  the index does not hold as a word (ocker in docker) is found as a substring.
  An exclusion leaves out every message with that word (whole words, case and
  accents folded; CJK text wherever it appears), wherever it stands in the
  query: 'a OR b -c' is a or b, without c. A query needs a word to search
  for: one of exclusions only ('NOT docker', -docker) is refused, as no index
  can list what lacks a word cheaply. After the first word, -word needs no
  quotes (hermes sessions search docker -compose); a query that starts with
  -word needs quotes or --: hermes sessions search -- -compose docker.
  Session titles are searched too: matching titles are listed first, under
  "Title matches:", and counted apart from the messages.
  Refused with a message, never dropped: parentheses, NEAR(...), column
  filters (role:, source:, content:), ^word, * other than at a word's end, an
  operator with nothing on one side, an unclosed quote. Put text in "quotes"
  to search for it as it is: "role:user".
"""


@command(
    app,
    "search",
    keys=SEARCH_SYNTAX,
    cls=QueryCommand,
    examples=[
        'hermes sessions search "chat-send"',
        'hermes sessions search "docker build" --role assistant --since 30d',
        "hermes sessions search 'docker -compose' --archived",
        "hermes sessions search 会議 --sort newest --limit 5",
        "hermes sessions search timeout --format csv > hits.csv",
        "hermes sessions search docker -compose --since 'last month'",
    ],
)
def search(
    words: Annotated[
        list[str],
        typer.Argument(
            metavar="QUERY...",
            help='Words (all must match), "a phrase", prefix*, OR, NOT word or -word (leave '
            "out), or CJK text; see Query syntax below.",
            show_default=False,
        ),
    ],
    source: Sources = None,
    exclude_source: ExcludeSources = None,
    role: Roles = None,
    since: Annotated[str | None, since_option("messages sent")] = None,
    until: Annotated[str | None, until_option("messages sent")] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "-n",
            "--limit",
            min=0,
            metavar="N",
            help="Show at most N hits. Default: 20 on a terminal; --json and --format "
            "jsonl/csv/tsv give every hit. Every hit (0, or a machine format without -n) "
            "means every message is examined, as --all. A note on stderr says when more "
            "matched.",
            show_default=False,
        ),
    ] = None,
    sort: Annotated[
        SearchSort | None,
        typer.Option(
            "--sort",
            help="Best match first (the default; substring and scanned matches come newest "
            "first), or newest, or oldest. An explicit --sort rank is refused for matches "
            "that cannot be ranked.",
            show_default=False,
        ),
    ] = None,
    complete: Annotated[
        bool,
        typer.Option(
            "--all",
            "--complete",
            help="Examine every message and rank every match. By default a search stops at "
            "a work budget (about 200,000 candidates) and ranks the newest 2,000 matches; "
            "the output says when it did.",
        ),
    ] = False,
    archived: Annotated[
        bool, typer.Option("--archived", help="Include archived sessions.")
    ] = False,
    live_only: Annotated[
        bool,
        typer.Option("--live", help="Search the live store only (leave out the vault's sessions)."),
    ] = False,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    fields: FieldsOption = None,
    color: ColorOption = output.ColorMode.auto,
    no_pager: NoPagerFlag = False,
    machine: MachineOption = None,
) -> None:
    """Search message text (read-only); matches are highlighted.

    Each hit is a block: `id · title · role · when`, then the snippet wrapped to the terminal;
    the last line says how many: "N matches in M sessions", or "at least N ..." when the search
    stopped counting (at 2,000 matches, or at its work budget; --all counts every one).
    --json carries the same as "matches", "sessions" and "complete" (false: lower bounds).
    Notes on stderr say when the hits are not the whole answer: a search stopped at its work
    budget, or ranked among the newest matches only. Archived sessions are left out unless
    --archived, as in `sessions list`.

    Vaulted sessions: search, show and export include them; list and browse only with --vault;
    search --live leaves them out. A vaulted hit is marked `[vault 2025]` ("vault": "2025" in
    machine formats, null for live hits). The answer is the one a single store holding every
    session would give: hits merge by message id, and best-match ranks are recomputed with
    the statistics of all the stores together (the same BM25 scores, to rounding). Counts are
    sums over the stores, and each store has its own work budget.
    """
    from hermes_cli.rendering import pager
    from hermes_cli.shared import machines, stores
    from hermes_state.records import session_list
    from hermes_state.search import search as lib, title_search
    from hermes_state.store.errors import StoreNotFoundError
    from hermes_state.vault import vault_search

    query = " ".join(words)
    if not query.strip():
        raise typer.BadParameter(
            "the query is empty; give a word to search for (`hermes sessions list` shows "
            "recent sessions)",
            param_hint="QUERY",
        )
    problem = lib.query_problem(query)
    if problem is not None:
        raise typer.BadParameter(f"{problem.message}; {problem.hint}", param_hint="QUERY")
    settings = _setup(fmt, as_json, color, pager=not no_pager)
    limit = _limit_for(limit, settings)
    # Every hit asked for: every message examined (a budget cut would be a silent cut).
    complete = complete or limit >= UNLIMITED
    picked = fields_of(fields)
    hit_keys = (*records.HIT_KEYS, "machine") if machine is not None else records.HIT_KEYS
    if picked is not None:
        _check_fields(picked, hit_keys)
    for warning in lib.query_warnings(query):
        render.echo(f"Note: {warning.message}; {warning.hint}.", err=True)
    hidden = 0
    marks: dict[str, str | None] = {}
    found: list[tuple[Any, dict[str, str | None]]] = []
    titled: list[Any] = []
    for machine_name, where in machines.homes(machine):
        with machines.reading(where):
            try:
                with stores.read_store() as store:
                    home = store.path.parent
                    try:
                        _check_sources(store, source)
                    except typer.BadParameter:
                        # A source only vaulted sessions have is a fine filter for the whole
                        # search.
                        if live_only or not set(source or ()) <= (
                            set(session_list.distinct_sources(store))
                            | vault_search.vault_sources(store, home)
                        ):
                            raise
                    hits = vault_search.search_spanning(
                        store,
                        home,
                        query,
                        vaulted=not live_only,
                        source_filter=source or None,
                        exclude_sources=exclude_source or None,
                        role_filter=role or None,
                        limit=limit,
                        sort=(sort or SearchSort.rank).value,
                        after=cutoff(since),
                        before=cutoff(until),
                        archived=None if archived else False,
                        complete=complete,
                        strict_sort=sort is not None,
                    )
                    titles = vault_search.hit_titles(store, home, hits)
                    for h in hits:
                        title = titles.get(h["session_id"])
                        vaulted = f"[vault {h['vault']}]" if h.get("vault") else None
                        mark = f"{vaulted} {title or ''}".rstrip() if vaulted else title
                        marks[h["session_id"]] = machines.mark(machine_name, mark)
                        if machine is not None:
                            h["machine"] = machine_name
                    if not hits and not archived:
                        hidden += _archived_matches(
                            store, query, source, exclude_source, role, since, until
                        )
                    # A title is no message: it has no role, so --role leaves title matches out.
                    if not role:
                        titled += title_search.search_titles(
                            store,
                            query,
                            sources=source or None,
                            exclude_sources=exclude_source or None,
                            include_archived=archived,
                            active_since=cutoff(since),
                            active_before=cutoff(until),
                        )
            except StoreNotFoundError:
                hits, titles = lib.SearchResult(route="none"), {}
            found.append((hits, titles))
    hits, titles = _merge_machines(found, (sort or SearchSort.rank).value, limit)
    shaped, keys = records.pick(
        (
            {**records.hit(h, titles.get(h["session_id"])), "machine": h.get("machine")}
            if machine is not None
            else records.hit(h, titles.get(h["session_id"]))
            for h in hits
        ),
        hit_keys,
        picked,
    )
    document = {
        "query": query,
        "ordering": hits.ordering,
        "route": hits.route,
        "partial": hits.partial,
        "ranked": _ranked(hits),
        "examined": hits.examined,
        "candidates": hits.candidates,
        "searched_back_to": records.iso_utc(hits.searched_back_to),
        "matches": hits.matches,
        "sessions": hits.sessions,
        "complete": hits.complete,
        "hits": shaped,
        "title_match_count": len(titled),
        "title_matches": [records.title_hit(t) for t in titled[:limit]],
    }
    session_views.search_notes(hits, sort=(sort or SearchSort.rank).value)
    if hidden:
        render.echo("Note: archived sessions have matches; --archived includes them.", err=True)
    if output.emit(settings, document, shaped, keys):
        # A record stream cannot say it is cut short; a --json document says it itself.
        if len(hits) < hits.matches and settings.format is not output.Format.json:
            render.echo(f"Note: {_count_line(hits)}", err=True)
        if titled and settings.format is not output.Format.json:
            render.echo(
                f"Note: {_titled_line(len(titled))} (not in these message records; --json "
                "lists them as title_matches, `hermes sessions list --title TEXT` lists "
                "sessions by title).",
                err=True,
            )
        return
    filtered = _filter_words(
        source=source, exclude_source=exclude_source, role=role, since=since, until=until
    )
    if not hits and not titled:
        render.echo(f"No messages match {query!r}{filtered}.")
        return
    with pager.paging(settings):
        if titled:
            session_views.title_hits(titled[:limit])
            shown = min(len(titled), limit)
            more = f"; showing {shown:,} (--limit 0 shows all)" if shown < len(titled) else ""
            render.echo(f"{_titled_line(len(titled))}{more}.")
            render.echo()
        if not hits:
            render.echo(f"No messages match {query!r}{filtered}.")
            return
        # The vault mark leads the title, so the header line says where the hit lives.
        session_views.search_hits(hits, marks)
        render.echo("\n" + _count_line(hits))


def _ranked(hits: Any) -> int:
    """Return how many matches were ranked by relevance (every one when the search ranked all,
    0 when the hits are in time order): a count, never null."""
    if hits.ranked is not None:
        return int(hits.ranked)
    return int(hits.matches) if hits.ordering == "rank" else 0


def _titled_line(n: int) -> str:
    """Say how many sessions have a title that matches (the title half of a search)."""
    return f"{n:,} session{'' if n == 1 else 's'} with a matching title"


def _filter_words(**given: Any) -> str:
    """Return ` (with --since 30d, --source cli)`: the filters an empty answer was under."""
    shown = []
    for name, value in given.items():
        flag = "--" + name.replace("_", "-")
        for item in value if isinstance(value, list) else [value] if value else []:
            shown.append(f"{flag} {item}")
    return f" (with {', '.join(shown)})" if shown else ""


def _merge_machines(
    found: list[tuple[Any, dict[str, str | None]]], sort: str, limit: int
) -> tuple[Any, dict[str, str | None]]:
    """Return one answer from each machine's: newest/oldest by time; ranked answers (each
    machine's own BM25 order) interleaved, this machine's first; counts summed."""
    from hermes_state.search import search as lib

    if len(found) == 1:
        return found[0]
    results = [hits for hits, _ in found]
    if sort == "rank":
        merged = [h for row in itertools.zip_longest(*results) for h in row if h is not None]
    else:
        merged = sorted(
            (h for hits in results for h in hits),
            key=lambda h: float(h.get("timestamp") or 0),
            reverse=sort == "newest",
        )
    first = results[0]
    combined = lib.SearchResult(
        merged[:limit],
        ordering=first.ordering,
        route=first.route,
        partial=any(r.partial for r in results),
        ranked=first.ranked,
        examined=first.examined,
        candidates=first.candidates,
        searched_back_to=first.searched_back_to,
        matches=sum(r.matches for r in results),
        sessions=sum(r.sessions for r in results),
        complete=all(r.complete for r in results),
    )
    titles = {k: v for _, t in found for k, v in t.items()}
    return combined, titles


def _count_line(hits: Any) -> str:
    """Return the closing line of a search: how many matches in how many sessions."""
    n, m = hits.matches, hits.sessions
    text = f"{n:,} match{'' if n == 1 else 'es'} in {m:,} session{'' if m == 1 else 's'}"
    if not hits.complete:
        text = f"At least {text} (--all counts every one)"
    if len(hits) < n:
        text += f"; showing {len(hits):,} (--limit 0 shows all)"
    return text[0].upper() + text[1:] + "."


def _archived_matches(
    store: Any,
    query: str,
    sources: list[str] | None,
    excluded: list[str] | None,
    roles: list[str] | None,
    since: str | None,
    until: str | None,
) -> int:
    """Count (up to 1) the matches in archived sessions a search left out, to say so."""
    from hermes_state.search import search as lib

    found = lib.search_messages(
        store,
        query,
        source_filter=sources or None,
        exclude_sources=excluded or None,
        role_filter=roles or None,
        limit=1,
        sort="newest",
        after=cutoff(since),
        before=cutoff(until),
        archived=True,
        context=False,
    )
    return len(found)


def _check_sources(store: Any, sources: list[str] | None) -> None:
    """Refuse a --source no session of this store has, naming the sources it does have."""
    import difflib

    from hermes_state.records import session_list

    if not sources:
        return
    known = session_list.distinct_sources(store)
    unknown = [s for s in sources if s not in known]
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], known, n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    have = ", ".join(known) if known else "no sessions yet"
    raise typer.BadParameter(
        f"no session comes from {unknown[0]!r}{guess}; this store has: {have}",
        param_hint="'--source'",
    )


def _check_models(store: Any, models: list[str] | None) -> None:
    """Refuse a --model no session of this store has, naming the closest it does have."""
    import difflib

    from hermes_state.records import session_list

    if not models:
        return
    known = session_list.distinct_models(store)
    unknown = [m for m in models if m not in known]
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.4)
    close += [k for k in known if unknown[0].lower() in k.lower()][:1]
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    have = ", ".join(known) if known else "no sessions yet"
    raise typer.BadParameter(
        f"no session used model {unknown[0]!r}{guess}; this store has: {have}",
        param_hint="'--model'",
    )


def _titles(store: Any, session_ids: set[str]) -> dict[str, str | None]:
    from hermes_state.records import sessions as lib
    from hermes_state.store.errors import SessionNotFoundError

    titles: dict[str, str | None] = {}
    for sid in session_ids:
        try:
            titles[sid] = lib.get_session_title(store, sid)
        except SessionNotFoundError:
            titles[sid] = None
    return titles


# --- browse ---------------------------------------------------------------------------------

BROWSE_KEYS = """Keys:

\b
  typing          search as you type (empty: the session list)
  Up/Down, PgUp/PgDn, ^P/^N   move
  Enter           choose: leave and print the session id (with --print resume,
                  the line that resumes it in Hermes Agent)
  Esc             clear the query; with an empty query, leave
  Tab             one row per hit / one row per session
  ^S ^R ^T        cycle the source, role and time (active since) filters
  ^G              not archived / all, archived too / archived only / pinned only
  F1              list every key on the screen
  F3 or ^O        open the whole transcript (there: Up/Down, PgUp/PgDn or
                  b/Space, Home/End, h back to the hit, Esc or q back, Enter choose)
  F6              expand tool calls and reasoning
  F2 rename  F4 export  F7 pin/unpin  F8 delete  F9 archive/unarchive
  F5 or ^L        refresh (new messages of a running gateway)
  ^Q or ^C        quit without choosing
"""


@command(
    app,
    "browse",
    keys=BROWSE_KEYS,
    examples=[
        "hermes sessions browse",
        "hermes sessions browse docker --source cli --archived",
        'hermes sessions show "$(hermes sessions browse --print-id)"',
        "hermes sessions browse --print resume",
    ],
)
def browse(
    query: Annotated[
        str,
        typer.Argument(
            metavar="QUERY", help='Start with this search: words, "a phrase", prefix*, CJK.'
        ),
    ] = "",
    source: Sources = None,
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role",
            metavar="R",
            callback=validate_roles,
            help="Only role R: user, assistant, tool (repeatable).",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="WHEN",
            callback=validate_age,
            help=(
                "Only sessions active since WHEN (searching: messages written since WHEN). "
                + WHEN_HELP
            ),
        ),
    ] = None,
    archived: Annotated[
        bool, typer.Option("--archived", help="Include archived sessions.")
    ] = False,
    print_what: Annotated[
        PrintWhat,
        typer.Option(
            "--print",
            help=(
                "On Enter, print the session id, or the line that resumes it in Hermes Agent "
                "(the agent's own `hermes --resume ID`, by its path; see sessions "
                "resume-command)."
            ),
        ),
    ] = PrintWhat.id,
    print_id: Annotated[
        bool, typer.Option("--print-id", help="Same as --print id (for $(...) in scripts).")
    ] = False,
    vaulted: Annotated[
        bool,
        typer.Option(
            "--vault",
            help=(
                "Include vaulted sessions (marked [vault 2025]; read-only here: "
                "`hermes vault return ID` brings one back)."
            ),
        ),
    ] = False,
) -> None:
    """Browse and search sessions full-screen; Enter prints the chosen session id.

    Read-only unless you act on a session (each action is confirmed first). Quitting without
    choosing prints nothing and exits 1. Archived sessions are left out unless --archived
    (^G changes that on the screen). --print resume prints Hermes Agent's own command line
    for the session (`/path/to/agent/hermes --resume ID`: the agent's executable by its path,
    as `sessions resume-command` finds it, since this tool is called `hermes` too). Vaulted
    sessions (`hermes vault`) are browsed only with --vault: the list and the hits then span
    the live store and the vault, and a vaulted session can be previewed, opened and exported
    but not renamed, pinned, archived or deleted.
    """
    from hermes_cli.apps import browse as tui

    what = PrintWhat.id if print_id else print_what
    chosen = tui.run(
        query=query,
        sources=source or (),
        roles=role or (),
        since=since,
        archived=archived,
        prints=what.value,
        vaulted=vaulted,
    )
    if chosen is None:
        raise typer.Exit(1)
    render.echo(tui.chosen_line(chosen, what.value))


# --- resume-command -------------------------------------------------------------------------


@command(
    app,
    "resume-command",
    examples=[
        "hermes sessions resume-command 20261118_091502_a1c9e2",
        'hermes sessions resume-command "Fix Docker build"',
        "hermes -p coder sessions resume-command 20261118 --json",
    ],
)
def resume_command(session: ExactSessionRef, as_json: JsonFlag = False) -> None:
    """Print the line that resumes a session in Hermes Agent (read-only), for scripts.

    The line runs the agent's own `hermes` by its path (this tool is also called `hermes`, so
    a bare `hermes --resume ID` would run whichever comes first on PATH): $HERMES_AGENT_BIN
    when set, else the first `hermes` on PATH whose Python environment holds the agent's
    run_agent.py. When neither is found the line says `hermes` and a note on stderr says so.
    `-p NAME` is added for a named profile. A vaulted session is refused: the agent resumes
    sessions of the live store (`hermes vault return ID` first).
    """
    from hermes_cli.commands import vault
    from hermes_cli.shared import agent_command, stores
    from hermes_state.records import sessions as lib
    from hermes_state.store.home import DEFAULT_PROFILE

    with stores.read_store() as live, vault.session_store(live, session) as (store, sid, year):
        lib.require_session(store, sid)
    if year is not None:
        from hermes_state.store.errors import HermesStateError

        raise HermesStateError(
            f"session {sid} is in the vault (vault/{year}.db); the agent resumes live sessions",
            hint=f"bring it back first: hermes vault return {sid}",
        )
    name = stores.profile_name()
    command_line = agent_command.resume_command(sid, None if name == DEFAULT_PROFILE else name)
    if as_json:
        render.emit_json(
            {
                "session_id": sid,
                "command": command_line.line,
                "argv": list(command_line.argv),
                "agent_found": bool(command_line.found),
            }
        )
    else:
        render.write(command_line.line + "\n")
    if not command_line.found:
        render.echo(
            "Note: Hermes Agent's `hermes` was not found on PATH; the line runs whichever "
            f"`hermes` comes first (set {agent_command.AGENT_BIN_ENV} to the agent's).",
            err=True,
        )


# --- show -----------------------------------------------------------------------------------


def _visible(
    rows: Iterable[dict[str, Any]], *, include_all: bool, roles: list[str] | None
) -> Iterator[dict[str, Any]]:
    """Yield the messages `show` prints: live and compacted rows (all with --all), of roles."""
    wanted = set(roles or ())
    for m in rows:
        if not (include_all or m.get("active", 1) or m.get("compacted")):
            continue
        if wanted and m.get("role") not in wanted:
            continue
        yield m


@command(
    app,
    "show",
    examples=[
        "hermes sessions show 20261118_091502_a1c9e2",
        'hermes sessions show "Fix Docker build" --tail 20',
        "hermes sessions show 20261118 --role user --role assistant --reasoning",
        "hermes sessions show 20261118 --color always | less -R",
        "hermes sessions show 20261118 --format jsonl | jq -r .content",
        "hermes sessions show 20261118 --redact",
    ],
)
def show(
    session: SessionRef,
    include_all: Annotated[
        bool, typer.Option("--all", help="Also show rewound/superseded (inactive) messages.")
    ] = False,
    tail: Annotated[
        int | None,
        typer.Option("--tail", min=1, metavar="N", help="Only the last N messages shown."),
    ] = None,
    role: Roles = None,
    reasoning: Annotated[
        bool, typer.Option("--reasoning", help="Also print the model's reasoning text.")
    ] = False,
    redact: Annotated[
        bool,
        typer.Option(
            "--redact",
            help="Replace API keys, tokens, private keys and passwords in the title, message "
            "text, tool calls and reasoning with [REDACTED:kind].",
        ),
    ] = False,
    machine: MachineOption = None,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    color: ColorOption = output.ColorMode.auto,
    no_pager: NoPagerFlag = False,
) -> None:
    """Print the transcript of one session (read-only); long ones go through the pager.

    A session the live store does not have is shown from the vault, marked with its year
    (`[vault 2025]`; "vault": "2025" in machine formats, null for live sessions). A session the
    agent resumed after it was vaulted is one conversation: its vaulted history first, then the
    live part, each message marked with where it is.
    """
    from hermes_cli.commands import vault
    from hermes_cli.rendering import pager
    from hermes_cli.shared import machines, stores
    from hermes_state.records import messages, session_list, sessions as lib
    from hermes_state.reports import redact as redaction

    settings = _setup(fmt, as_json, color, pager=not no_pager)
    machine_name, where = _session_home(machine, session)
    # A session the live store lacks is looked up in the vault (marked with its year).
    with (
        machines.reading(where),
        stores.read_store() as live,
        vault.session_parts(live, session) as (sid, parts),
    ):
        store, year = parts[-1]
        row = lib.require_session(store, sid)
        if redact:
            row = redaction.redact_session(row)
        later = lib.continued_as(store, sid)
        if later is not None and not settings.machine:
            titled = lib.require_session(store, later).get("title")
            titled = redaction.redact(titled) if redact and titled else titled
            render.echo(
                f"Note: compression continued this session as {later}"
                + (f" ({titled!r})" if titled else "")
                + f"; see it with: hermes sessions show {later}",
                err=True,
            )
        each = [session_list.message_counts(part, [sid])[sid] for part, _year in parts]
        counts = each[-1]._replace(
            live=sum(c.live for c in each), stored=sum(c.stored for c in each)
        )
        row["message_count"], row["stored_message_count"] = counts.live, counts.stored
        older = [y for _part, y in parts[:-1]]
        rows: Iterable[dict[str, Any]] = _visible(
            (
                {**m, "vault": part_year}
                for part, part_year in parts
                for m in messages.iter_messages(part, sid, include_inactive=True)
            ),
            include_all=include_all,
            roles=role,
        )
        if redact:
            rows = map(redaction.redact_message, rows)
        skipped = 0
        if tail is not None:
            # Bounded memory: only the last N rows are ever held.
            seen = 0

            def counted(items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
                nonlocal seen
                for item in items:
                    seen += 1
                    yield item

            rows = list(collections.deque(counted(rows), maxlen=tail))
            skipped = seen - len(rows)
        if settings.machine:
            head = {**records.session(row, stores.profile_name()), "vault": year}
            if older:
                head["vault_parts"] = older
            if machine is not None:
                head["machine"] = machine_name
            shaped = ({**records.message(m, sid), "vault": m.get("vault")} for m in rows)
            if settings.format is output.Format.json:
                output.emit_json_stream(head, "messages", shaped)
            else:
                output.emit(settings, None, shaped, (*records.MESSAGE_KEYS, "vault"))
            return
        with pager.paging(settings):
            if machine_name is not None:
                render.echo(f"[machine {machine_name}] from the copy in {where} (read-only)")
            if year is not None:
                render.echo(f"[vault {year}] this session is in vault/{year}.db (read-only)")
            for part, part_year in parts[:-1]:
                n = session_list.message_counts(part, [sid])[sid].stored
                render.echo(
                    f"[vault {part_year}] resumed: its first {n} message(s) are in"
                    f" vault/{part_year}.db (read-only), shown before the live ones; the agent"
                    f" sees only the live part (`hermes vault return {sid}` joins them)"
                )
            session_views.session_header(row, counts, include_all=include_all)
            render.echo()
            shown = session_views.transcript(rows, reasoning=reasoning, skipped=skipped)
            if not shown:
                render.echo("(no messages)")


def _session_home(machine: str | None, session: str) -> tuple[str | None, Path]:
    """Return the machine (None: this one) and home that have the session, this one first."""
    from hermes_cli.commands import vault
    from hermes_cli.shared import machines, stores
    from hermes_state.store.errors import SessionNotFoundError, StoreNotFoundError

    found = machines.homes(machine)
    if len(found) == 1:
        return found[0]
    for name, where in found:
        with machines.reading(where):
            try:
                with stores.read_store() as live, vault.session_store(live, session):
                    return name, where
            except (SessionNotFoundError, StoreNotFoundError):
                continue
    raise SessionNotFoundError(f"No session {session!r} on this machine or a followed one")


# --- export / import ------------------------------------------------------------------------


@command(
    app,
    "export",
    examples=[
        "hermes sessions export -o all.jsonl",
        "hermes sessions export --until 90d -o old.jsonl",
        "hermes sessions export --since 2026-01-01 --source telegram --format md -o tg.md",
        "hermes sessions export --session-id 20261118 --format json | jq '.[0].title'",
        "hermes sessions export --after-id 58213 -o new.jsonl",
        "hermes sessions export --session-id 20261118 --redact -o for-support.jsonl",
    ],
)
def export(
    output_path: Annotated[
        str,
        typer.Option(
            "-o",
            "--output",
            metavar="PATH",
            help="New file to write (never overwritten); - for stdout.",
        ),
    ] = "-",
    fmt: Annotated[ExportFormat, typer.Option("--format", help="Output format.")] = (
        ExportFormat.jsonl
    ),
    session_ids: Annotated[
        list[str] | None,
        typer.Option("--session-id", metavar="ID", help="Export this session (repeatable)."),
    ] = None,
    source: Sources = None,
    exclude_source: ExcludeSources = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            "--newer-than",
            metavar="WHEN",
            callback=validate_age,
            help="Only sessions last active at or after WHEN. --newer-than is the older name. "
            f"{WHEN_HELP}",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            "--older-than",
            metavar="WHEN",
            callback=validate_age,
            help="Only sessions last active before WHEN. --older-than is the older name. "
            f"{WHEN_HELP}",
        ),
    ] = None,
    after_id: Annotated[
        int | None,
        typer.Option(
            "--after-id",
            metavar="N",
            min=0,
            help="A change feed: only messages with a row id above N, in records of their "
            "sessions (importing one appends them). The summary names the feed's high-water "
            "mark, the N of the next run: every message committed later has a higher id, so "
            "no message is missed or exported twice.",
        ),
    ] = None,
    redact: Annotated[
        bool,
        typer.Option(
            "--redact",
            help="Replace API keys, tokens, private keys and passwords in titles, system "
            "prompts, message text, tool calls and reasoning with [REDACTED:kind]. The file "
            "still imports: prompt hashes are recomputed for the redacted text, and a title "
            "that redaction makes the same as an earlier one gets #2.",
        ),
    ] = False,
) -> None:
    """Export sessions with every message, exactly (read-only, streamed: memory stays flat).

    Records keep every column of the store, message row ids, per-model usage rows and system
    prompts; `sessions import` puts them into any profile, of any Hermes Agent release.
    """
    from hermes_cli.shared import stores
    from hermes_state.records import session_list
    from hermes_state.reports import redact as redaction
    from hermes_state.store.errors import StoreNotFoundError
    from hermes_state.transfer import portability
    from hermes_state.vault import vault

    before = cutoff(until)
    after = cutoff(since)
    writer = {
        ExportFormat.jsonl: portability.write_jsonl,
        ExportFormat.json: portability.write_json,
        ExportFormat.md: portability.write_markdown,
    }[fmt]
    to_stdout = output_path == "-"
    target = None if to_stdout else portability.check_export_target(Path(output_path))
    stdout = output.terminal_safe(sys.stdout, markdown=fmt is ExportFormat.md)
    mark: int | None = None
    try:
        with stores.read_store() as store:
            _check_sources(store, source)
            named = session_ids or []
            ids, vaulted = _split_refs(store, named) if named else (None, None)
            span: dict[str, Any] = {
                "sources": source or None,
                "exclude_sources": exclude_source or None,
                "active_after": after,
                "active_before": before,
                "after_id": after_id,
            }
            if after_id is not None:
                # Taken first: the feed is exactly the ids in (N, mark] (see feed_mark).
                mark = portability.feed_mark(store)
                span["upto_id"] = mark
            records_iter = portability.export_all(store, session_ids=ids, **span)
            # Vaulted sessions are exported too, each record marked with its vault year.
            records_iter = vault.export_spanning(store, records_iter, session_ids=vaulted, **span)
            if redact:
                records_iter = redaction.redact_records(records_iter)
            if target is None:
                counts = writer(records_iter, stdout)
            else:
                total = (
                    len(dict.fromkeys(ids))
                    if ids is not None
                    else None
                    if after_id is not None
                    else session_list.count_sessions(
                        store,
                        sources=source or None,
                        exclude_sources=exclude_source or None,
                        include_archived=True,
                        active_since=after,
                        active_before=before,
                    )
                )
                with render.progress("Exporting sessions", total=total) as bar:
                    counts = portability.export_to_path(
                        records_iter, target, writer, progress=bar.advance
                    )
    except StoreNotFoundError:
        # A profile that never recorded anything exports an empty (but valid) file.
        if target is None:
            writer(iter(()), stdout)
        else:
            portability.export_to_path(iter(()), target, writer)
        render.echo("No store yet: nothing to export.", err=True)
        return
    where = "stdout" if to_stdout else str(target)
    what = (
        "stored messages, every generation" if after_id is None else f"messages above id {after_id}"
    )
    render.echo(
        f"Exported {counts.sessions} session{'s' if counts.sessions != 1 else ''} "
        f"({counts.messages} {what}) to {where}",
        err=True,
    )
    if after_id is not None:
        top = max(after_id, mark or 0)
        render.echo(f"Highest message id: {top} (next run: --after-id {top})", err=True)


def _split_refs(store: Any, refs: list[str]) -> tuple[list[str], list[str]]:
    """Resolve session refs across the profile's stores to (live ids, vault-only ids)."""
    from hermes_cli.shared import waiting
    from hermes_state.vault import profile_stores

    live: list[str] = []
    vaulted: list[str] = []
    for ref in refs:
        found = profile_stores.locate(store, store.path.parent, ref, waiting.current())
        (live if found.live else vaulted).append(found.session_id)
    return live, vaulted


def _count_records(path: Path) -> int | None:
    """Count the records of a JSONL export (its non-blank lines); None for a JSON array."""
    try:
        with open(path, "rb") as fp:
            head = fp.read(4096).lstrip()
            if head[:1] != b"{":
                return None
            fp.seek(0)
            n = 0
            last = b"\n"
            while chunk := fp.read(1 << 20):
                n += chunk.count(b"\n")
                last = chunk[-1:]
            return n + (last != b"\n")
    except OSError:
        return None


@command(
    app,
    "import",
    examples=[
        "hermes sessions import all.jsonl",
        "hermes -p copy sessions import all.jsonl --on-conflict replace",
        "hermes sessions import theirs.jsonl --on-title-clash rename",
        "hermes sessions export | hermes -p copy sessions import -",
    ],
)
def import_(
    source: Annotated[
        str,
        typer.Argument(metavar="FILE", help="A jsonl or json export; - reads standard input."),
    ],
    on_conflict: Annotated[
        Conflict,
        typer.Option("--on-conflict", help="For ids already in the store: keep or replace them."),
    ] = Conflict.skip,
    on_title_clash: Annotated[
        TitleClash,
        typer.Option(
            "--on-title-clash",
            help="For a title another session here has: fail (report that session, import the "
            "rest), rename (import it as 'Title #2', numbered as compression numbers a "
            "continuation) or skip it.",
        ),
    ] = TitleClash.fail,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print what was imported as one JSON object (counts, errors, warnings)."
        ),
    ] = False,
) -> None:
    """Import an export made by `sessions export` (each session all or nothing).

    A session the profile's vault holds is present (skipped, "in vault 2025"). Message ids are
    kept when above every id the profile's stores have used, else renumbered above them all.
    """
    from hermes_cli.shared import stores
    from hermes_state.transfer import portability
    from hermes_state.vault import vault_import

    if source == "-":
        # Exports are UTF-8 whatever the locale says; bytes that are not are reported.
        data: Any = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="")
        total = None
    else:
        data = Path(source)
        if not data.is_file():
            what = "a directory" if data.is_dir() else "not found"
            raise typer.BadParameter(f"{source}: {what}", param_hint="'FILE'")
        total = _count_records(data) if render.progress_wanted() else None
    with (
        stores.write_store(create=True) as store,
        render.progress("Importing sessions", total=total) as bar,
    ):
        result = portability.import_sessions(
            store,
            data,
            on_conflict=on_conflict.value,
            on_title_clash=on_title_clash.value,
            progress=bar.advance,
            others=vault_import.other_stores(store),
        )
    if as_json:
        render.emit_json(dataclasses.asdict(result) | {"ok": result.ok})
        if result.errors:
            raise typer.Exit(1)
        return
    appended = f"; appended to {result.appended}" if result.appended else ""
    away = ", ".join(f"{n} in {where}" for where, n in sorted(result.elsewhere.items()))
    titled = f"; {result.title_skipped} left out for their title" if result.title_skipped else ""
    render.echo(
        f"Imported {result.imported} session{'s' if result.imported != 1 else ''} "
        f"({result.messages} messages); replaced {result.replaced}{appended}; "
        f"skipped {result.skipped} already present" + (f" ({away})" if away else "") + f"{titled}."
    )
    if result.kept_ids and not result.renumbered:
        render.echo(f"Every message kept its id ({result.kept_ids}).")
    for note in result.warnings:
        render.warn(note)
    for issue in result.errors:
        where = f" (session {issue.session_id})" if issue.session_id else ""
        render.echo(f"Error: line {issue.line}{where}: {issue.message}", err=True)
    if result.errors:
        render.echo(
            f"Hint: {len(result.errors)} session(s) were not imported; fix those lines and "
            "re-run (sessions already imported are skipped).",
            err=True,
        )
        raise typer.Exit(1)


# --- edits ----------------------------------------------------------------------------------


@command(
    app,
    "delete",
    examples=[
        "hermes sessions delete 20261118_091502_a1c9e2",
        'hermes sessions delete "Grocery list" --yes',
    ],
)
def delete(session: ExactSessionRef, yes: YesFlag = False) -> None:
    """Delete one session and all its messages."""
    from hermes_cli.commands import vault
    from hermes_cli.shared import stores
    from hermes_state.records import session_list, sessions as lib
    from hermes_state.upkeep import maintenance

    with stores.write_store() as store:
        sid = vault.editable_session(store, session, whole=True)
        row = lib.require_session(store, sid)
        counts = session_list.message_counts(store, [sid])[sid]
        label = f"'{sid}'" + (f" ({row['title']})" if row.get("title") else "")
        pinned = " (it is PINNED)" if row.get("pinned") else ""
        render.confirm(
            f"Delete session {label}{pinned} and its {counts.stored} stored messages "
            f"({counts.live} live, the rest earlier generations)?",
            assume_yes=yes,
        )
        deleted = maintenance.delete_session(store, sid)
    render.echo(f"Deleted session '{sid}' ({deleted} messages).")


@command(
    app,
    "rename",
    examples=[
        "hermes sessions rename 20261128_220940 WAL vs DELETE",
        'hermes sessions rename 20261128 ""',
    ],
)
def rename(
    session: ExactSessionRef,
    title: Annotated[list[str], typer.Argument(metavar="TITLE", help="The new title.")],
) -> None:
    """Give a session a new (unique) title; an empty title clears it."""
    from hermes_cli.commands import vault
    from hermes_cli.shared import stores
    from hermes_state.records import sessions as lib

    text = " ".join(title)
    with stores.write_store(check="sessions") as store:
        sid = vault.editable_session(store, session)
        stored = lib.set_session_title(store, sid, text)
    if stored is None:
        render.echo(f"Session '{sid}' title cleared.")
    else:
        render.echo(f"Session '{sid}' renamed to: {stored}")


SessionRefs = Annotated[
    list[str],
    typer.Argument(metavar="ID...", help="Session ids, unique id prefixes or exact titles."),
]


def _set_flag(refs: list[str], flag: str, value: bool) -> None:
    """Set pinned/archived on every named session; an unknown one fails before any change."""
    from hermes_cli.commands import vault
    from hermes_cli.shared import stores
    from hermes_state.records import sessions as lib
    from hermes_state.store.errors import SessionNotFoundError

    setter = lib.set_session_pinned if flag == "pinned" else lib.set_session_archived
    done = {
        ("pinned", True): "Pinned",
        ("pinned", False): "Unpinned",
        ("archived", True): "Archived",
        ("archived", False): "Unarchived",
    }[(flag, value)]
    with stores.write_store(check="sessions") as store:
        rows = [lib.require_session(store, vault.editable_session(store, ref)) for ref in refs]
        for row in dict((r["id"], r) for r in rows).values():
            sid = row["id"]
            label = f" ({render.visible(row['title'], newlines=False)})" if row.get("title") else ""
            shown = render.visible(sid, newlines=False)
            if bool(row.get(flag)) == value:
                render.echo(f"Session '{shown}'{label} is already {done.lower()}.")
                continue
            if not setter(store, sid, value):
                raise SessionNotFoundError(f"No session with id {sid}")
            render.echo(f"{done} session '{shown}'{label}.")


@command(app, "pin", examples=["hermes sessions pin 20261118_091502_a1c9e2"])
def pin(sessions: SessionRefs) -> None:
    """Pin sessions: prune never deletes a pinned session."""
    _set_flag(sessions, "pinned", True)


@command(app, "unpin", examples=["hermes sessions unpin 20261118"])
def unpin(sessions: SessionRefs) -> None:
    """Unpin sessions."""
    _set_flag(sessions, "pinned", False)


@command(app, "archive", examples=["hermes sessions archive 20261118 20261119"])
def archive(sessions: SessionRefs) -> None:
    """Archive sessions: hidden from listings (list --archived shows them), nothing deleted."""
    _set_flag(sessions, "archived", True)


@command(app, "unarchive", examples=["hermes sessions unarchive 20261118"])
def unarchive(sessions: SessionRefs) -> None:
    """Unarchive sessions."""
    _set_flag(sessions, "archived", False)


# --- prune ----------------------------------------------------------------------------------


@command(
    app,
    "prune",
    examples=[
        "hermes sessions prune --dry-run",
        "hermes sessions prune --older-than 30d --source cron --yes",
        "hermes sessions prune --since 2025-01-01 --until 2025-07-01 --exclude-source telegram",
    ],
)
def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            "--until",
            metavar="AGE",
            callback=validate_age,
            help=f"Delete ended sessions last active before AGE ago (--until is the same). "
            f"{AGE_HELP}",
        ),
    ] = "90d",
    since: Annotated[str | None, since_option("sessions last active")] = None,
    source: Sources = None,
    exclude_source: ExcludeSources = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")
    ] = False,
    compact: Annotated[
        bool,
        typer.Option(
            "--compact",
            help="Always rewrite the file afterwards to give the freed space back to the disk "
            "(otherwise only when a quarter of the file was freed, or the file is small: the "
            "rewrite takes time in proportion to the whole store).",
        ),
    ] = False,
    yes: YesFlag = False,
    force: ForceFlag = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the plan (with --dry-run) or what was deleted and reclaimed as one JSON "
            "object.",
        ),
    ] = False,
) -> None:
    """Delete old ended sessions (never pinned ones), then tidy up.

    The freed pages stay in the file for new rows unless they are a quarter of it, the file is
    small, or --compact asks for the rewrite that gives them back to the disk.
    """
    from hermes_cli.shared import stores
    from hermes_cli.shared.durations import cutoff_to_days
    from hermes_state.upkeep import maintenance

    days = cutoff_to_days(cutoff(older_than) or time.time())
    sources, excluded, active_after = source or None, exclude_source or None, cutoff(since)
    opener = stores.read_store if dry_run else stores.write_store  # a preview never writes
    with opener() as store:
        _check_sources(store, sources)
        with render.progress("Finding sessions to prune"):
            preview = maintenance.prune_sessions(
                store,
                days,
                dry_run=True,
                sources=sources,
                exclude_sources=excluded,
                active_after=active_after,
            )
        if as_json and (dry_run or not preview.sessions):
            render.emit_json(records.prune(preview.to_dict()))
            return
        if not as_json:
            store_views.prune_preview(preview)
        if dry_run:
            render.echo("Dry run: nothing deleted.")
            return
        if not preview.sessions:
            return
        render.confirm(
            f"Delete these {preview.sessions:,} session(s) ({preview.messages:,} stored messages)?",
            assume_yes=yes,
        )

        def step(done: int, total: int) -> None:
            bar.set(completed=done, total=total)
            _pause_for_tests("prune", done)

        scope: dict[str, Any] = {
            "sources": sources,
            "exclude_sources": excluded,
            "active_after": active_after,
        }
        try:
            with render.progress("Deleting sessions", total=preview.sessions) as bar:
                result = maintenance.prune_sessions(store, days, progress=step, **scope)
        except KeyboardInterrupt:
            _interrupted_prune(store, days, preview.sessions, scope)
        try:
            with render.progress("Reclaiming space") as bar:
                optimized = stores.reclaim_after_delete(
                    store, bar, result, compact=compact, force=force
                )
        except KeyboardInterrupt:
            render.echo(
                f"Interrupted while giving space back to the disk: pruned {result.sessions:,} "
                "session(s), and the store is healthy (the rewrite is all or nothing); "
                "`hermes db optimize` gives the space back.",
                err=True,
            )
            raise typer.Exit(ExitCode.INTERRUPTED) from None
    if as_json:
        store_views.deletion_json(result, optimized, shape=records.prune)
        return
    store_views.prune_result(result, optimized)


# Tests stop a long write at a known point: "prune:N:PATH" creates PATH once N sessions are
# done, then waits (at most 60 s) for the signal the test sends.
PAUSE_ENV = "HERMES_CLI_PAUSE_AT"


def _pause_for_tests(step: str, done: int) -> None:
    """Wait at a step named by HERMES_CLI_PAUSE_AT (tests only; unset, it does nothing)."""
    import os

    name, _, rest = os.environ.get(PAUSE_ENV, "").partition(":")
    at, _, path = rest.partition(":")
    if name != step or not at.isdigit() or done < int(at) or not path:
        return
    Path(path).touch()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)


def _interrupted_prune(store: Any, days: float, planned: int, scope: dict[str, Any]) -> None:
    """Say what an interrupted prune did (counted again from the store) and exit 130."""
    from hermes_state.upkeep import maintenance

    try:
        left = maintenance.prune_sessions(store, days, dry_run=True, **scope).sessions
        did = f"deleted {max(0, planned - left):,} of {planned:,} sessions"
    except (KeyboardInterrupt, Exception):  # a second Ctrl-C, or the count failed: say less
        did = f"deleted some of {planned:,} sessions"
    render.echo(
        f"Interrupted: {did}; the store is healthy (each batch of deletions is all or "
        "nothing); run the same command again to finish.",
        err=True,
    )
    raise typer.Exit(ExitCode.INTERRUPTED)


# --- stats ----------------------------------------------------------------------------------


def _stats_one(name: str, store: Any) -> dict[str, Any]:
    """Return one profile's statistics over its stores: the live one and every vault year."""
    from hermes_cli.shared import waiting
    from hermes_state.reports import stats as lib
    from hermes_state.vault import profile_stores

    across = profile_stores.stats_across(store, store.path.parent, waiting.current())
    by_source = across["by_source"]
    report = records.stats(
        {
            "profile": name,
            "session_count": sum(r["sessions"] for r in by_source),
            "message_count": sum(r["messages"] for r in by_source),
            "stored_message_count": sum(r["stored_messages"] for r in by_source),
            "by_source": by_source,
            "by_model": across["by_model"],
            "top_sessions": across["top_sessions"],
            "store": lib.store_stats(store),
        }
    )
    report["vault"] = across["vault"]
    return report


def _empty_stats(name: str, path: Path) -> dict[str, Any]:
    return records.stats(
        {
            "profile": name,
            "store": {"path": str(path), "files": {}, "total_bytes": 0},
        }
    )


@command(
    app,
    "stats",
    examples=[
        "hermes sessions stats",
        "hermes sessions stats --all-profiles --no-pager",
        "hermes sessions stats --format csv | grep by_model",
    ],
)
def stats(
    all_profiles: Annotated[
        bool, typer.Option("--all-profiles", help="Report the root and every named profile.")
    ] = False,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    color: ColorOption = output.ColorMode.auto,
    no_pager: NoPagerFlag = False,
) -> None:
    """Show counts by source, tokens and cost by model, top sessions and file sizes (read-only)."""
    from hermes_cli.rendering import pager
    from hermes_cli.shared import stores
    from hermes_state.store.errors import StoreNotFoundError

    settings = _setup(fmt, as_json, color, pager=not no_pager)
    if all_profiles:
        reports, errors = stores.across_profiles(_stats_one)
        rows = [r for report in reports for r in records.stats_rows(report)]
        if output.emit(
            settings, {"profiles": reports, "errors": errors}, rows, records.STATS_ROW_KEYS
        ):
            return
        stores.report_profile_errors(errors)
        with pager.paging(settings):
            for i, report in enumerate(reports):
                if i:
                    render.echo()
                store_views.stats(report, title=f"Profile: {report['profile']}")
        return
    missing = False
    try:
        with stores.read_store() as store:
            report = _stats_one(stores.profile_name(), store)
    except StoreNotFoundError:
        report = _empty_stats(stores.profile_name(), stores.db_path())
        missing = True
    if output.emit(settings, report, list(records.stats_rows(report)), records.STATS_ROW_KEYS):
        return
    if missing:
        render.echo("No sessions yet.")
        render.key_values([("Total sessions", 0), ("Total messages", 0)])
        return
    with pager.paging(settings):
        store_views.stats(report)


# --- recover --------------------------------------------------------------------------------


@command(
    app,
    "recover",
    examples=[
        "hermes sessions recover --to /tmp/recovered.db",
        "hermes sessions recover --from damaged.db --to fixed.db --allow-partial --json",
    ],
)
def recover(
    to: Annotated[
        Path,
        typer.Option("--to", metavar="NEW.db", help="The new store to write (must not exist)."),
    ],
    source: Annotated[
        Path | None,
        typer.Option("--from", metavar="PATH", help="Store to salvage (default: this profile's)."),
    ] = None,
    allow_partial: Annotated[
        bool, typer.Option("--allow-partial", help="Accept a result that lost unreadable rows.")
    ] = False,
    report: Annotated[
        Path | None,
        typer.Option("--report", metavar="PATH", help="Where to write the JSON report."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the recovery report as JSON on stdout.")
    ] = False,
) -> None:
    """Copy everything readable from a store into a new file; the source is never written."""
    from hermes_cli.shared import stores
    from hermes_state.recover import recover as lib

    src = source or stores.db_path()
    with render.progress("Recovering") as bar:

        def step(table: str, copied: int, total: int | None) -> None:
            bar.set(f"Copying {table}", copied, total)

        result = lib.recover(
            src, to, allow_partial=allow_partial, report_path=report, progress=step
        )
    if as_json:
        render.emit_json(result.to_dict())
    else:
        render.echo(result.summary())  # first line: whether anything was lost, and how much
        for line in result.details():  # per table: lost of expected, and what expected is from
            render.echo(f"  {line}")
        store_views.recovery_report(result)
    if not result.accepted:
        raise typer.Exit(1)
