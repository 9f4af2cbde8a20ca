"""`hermes sessions browse`: what the screen asks for and gets back (filters, requests, rows,
results) and the limits every read keeps to; no library call, no drawing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

HITS_PAGE = 50  # hits fetched per page (more are fetched when the cursor nears the end)
SESSIONS_PAGE = 50
GROUPED_HITS = 500  # hits grouped into the sessions view of a query
WINDOW_BEFORE = 3  # preview: messages shown before and after the hit
WINDOW_AFTER = 3
TRANSCRIPT_MAX = 5000  # messages the transcript screen loads; beyond that, export
TRANSCRIPT_FIRST = 50  # the first batch handed to the screen: a screenful, at once
TRANSCRIPT_CHUNK = 500
COUNT_BUDGET_S = 1.0
BODY_CHARS = 2000  # a message body in the preview is cut here
COLLAPSED_CHARS = 80
ROLES = ("user", "assistant", "tool")
SINCE_CHOICES: tuple[str | None, ...] = (None, "1h", "24h", "7d", "30d", "90d", "365d")
SCOPES = ("unarchived", "all", "archived", "pinned")
SCOPE_LABELS = {
    "unarchived": "not archived",
    "all": "all, archived too",
    "archived": "archived only",
    "pinned": "pinned only",
}
VIEWS = ("hits", "sessions")
ROUTE_TEXT = {
    "word": "word index",
    "cjk": "CJK index",
    "trigram": "substring index",
    "scan": "scan of recent messages",
    "none": "nothing to search",
}
MATCH_STYLE = "bold reverse"
ROLE_STYLES = {"user": "bold green", "assistant": "bold blue", "tool": "bold magenta"}


class BrowseError(Exception):
    """An expected failure of a read or an edit, as one line for the status bar."""


# --- filters --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """What the hits or sessions are narrowed to."""

    sources: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    since: str | None = None  # an AGE as the user gave it (validated), e.g. "7d"
    scope: str = "unarchived"

    def cutoff(self) -> float | None:
        """Return the moment `since` names, now."""
        from hermes_cli.shared.options import cutoff

        return cutoff(self.since)

    def search_options(self) -> dict[str, Any]:
        """Return the keyword filters of search_messages / count_matches."""
        return {
            "source_filter": list(self.sources) or None,
            "role_filter": list(self.roles) or None,
            "after": self.cutoff(),
            "archived": {"unarchived": False, "archived": True}.get(self.scope),
            "pinned": True if self.scope == "pinned" else None,
        }

    def list_options(self) -> dict[str, Any]:
        """Return the keyword filters of list_sessions / count_sessions."""
        return {
            "sources": list(self.sources) or None,
            "include_archived": self.scope != "unarchived",
            "archived_only": self.scope == "archived",
            "pinned_only": self.scope == "pinned",
            "active_since": self.cutoff(),
        }


def cycled(current: Any, choices: Sequence[Any]) -> Any:
    """Return the choice after current (the first when current is not among them)."""
    options = list(choices)
    if current not in options:
        return options[0] if options else current
    return options[(options.index(current) + 1) % len(options)]


def with_initial(initial: Any, choices: Sequence[Any]) -> list[Any]:
    """Return choices with the value given on the command line second, when it is not one."""
    options = list(choices)
    if initial not in options:
        options.insert(1, initial)
    return options


# --- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One read the screen asks for: a view of a query under filters, from an offset."""

    seq: int
    view: str
    query: str
    filters: Filters
    offset: int = 0

    @property
    def searching(self) -> bool:
        """Whether the query has text to search (else the session list is shown)."""
        return bool(self.query.strip())


@dataclass
class Row:
    """One line of the list: a hit (message) or a session, with its session's columns."""

    session_id: str
    session: dict[str, Any]
    hit: dict[str, Any] | None = None
    hits_in_session: int = 0  # sessions view of a query: how many of the fetched hits

    @property
    def vault(self) -> str | None:
        """Return the vault year of the row's session (None: it is in the live store)."""
        year = self.session.get("vault") or (self.hit or {}).get("vault")
        return str(year) if year else None


@dataclass
class Results:
    """What a Request found, ready to draw."""

    request: Request
    rows: list[Row] = field(default_factory=list)
    ordering: str = ""
    route: str = ""
    partial: bool = False
    examined: int = 0  # a partial search: candidates examined, of how many, back to when
    candidates: int = 0
    searched_back_to: float | None = None
    total: int | None = None  # sessions in the listing; None for searches (counted apart)
    more: bool = False  # another page can be fetched
    error: str | None = None
    elapsed_ms: float = 0.0
