"""`hermes sessions search`: full-text search of messages and titles, live and vaulted."""

import itertools
from typing import Annotated, Any

import typer

from hermes_cli.commands.sessions_options import (
    SearchSort,
    check_fields,
    check_sources,
    limit_for,
    setup,
)
from hermes_cli.rendering import output, records, render, session_views
from hermes_cli.shared.machines import MachineOption
from hermes_cli.shared.options import (
    UNLIMITED,
    ColorOption,
    ExcludeSources,
    FieldsOption,
    FormatOption,
    JsonFlag,
    NoPagerFlag,
    Roles,
    Sources,
    cutoff,
    fields_of,
    since_option,
    until_option,
)

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


SEARCH_EXAMPLES = [
    'hermes sessions search "chat-send"',
    'hermes sessions search "docker build" --role assistant --since 30d',
    "hermes sessions search 'docker -compose' --archived",
    "hermes sessions search 会議 --sort newest --limit 5",
    "hermes sessions search timeout --format csv > hits.csv",
    "hermes sessions search docker -compose --since 'last month'",
]


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
    settings = setup(fmt, as_json, color, pager=not no_pager)
    limit = limit_for(limit, settings)
    # Every hit asked for: every message examined (a budget cut would be a silent cut).
    complete = complete or limit >= UNLIMITED
    picked = fields_of(fields)
    hit_keys = (*records.HIT_KEYS, "machine") if machine is not None else records.HIT_KEYS
    if picked is not None:
        check_fields(picked, hit_keys)
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
                        check_sources(store, source)
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
