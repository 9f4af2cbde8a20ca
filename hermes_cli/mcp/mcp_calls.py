"""`hermes mcp`: what every tool call shares: its limits, its refusal (ToolError), what it knows
of the server (Call), its arguments, cursors and size bounds, and the store it reads."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

MAX_RESULT_BYTES = 64 * 1024  # of one answer on the wire: its data and the text copy of it
# What the items of a page may take of it; the rest is for the JSON-RPC envelope, the fixed
# fields and the cursor.
ITEMS_BUDGET = MAX_RESULT_BYTES - 2048
DEFAULT_MAX_CHARS = 4000  # of one message field in get_session
MAX_CHARS = 16_000
TOOL_CALL_CHARS = 2000  # of one tool call's arguments
MAX_TOOL_CALLS = 20  # listed per message; the rest are counted
SCAN_ROWS = 5000  # rows one get_session page examines at most (a role filter may skip many)
ROLES = ("user", "assistant", "tool", "system")


class ToolError(Exception):
    """A call the server refuses or cannot answer: a kind, a message and what to do instead."""

    def __init__(self, kind: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Call:
    """What every tool call knows about the server it runs in."""

    redact: bool


# --- arguments, cursors, bounds --------------------------------------------------------------


def normalized(args: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Return the arguments with the schema's defaults filled in (the cursor left out)."""
    out = {}
    for key, prop in schema["properties"].items():
        if key == "cursor":
            continue
        value = args.get(key, prop.get("default"))
        if value is not None:
            out[key] = value
    return out


def _fingerprint(tool: str, args: Mapping[str, Any]) -> str:
    """Return a short digest of a call's arguments (a cursor belongs to one set of them)."""
    import hashlib

    text = json.dumps([tool, args], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def make_cursor(tool: str, args: Mapping[str, Any], position: int) -> str:
    """Return the opaque cursor of the page that starts at position."""
    import base64

    payload = json.dumps({"k": _fingerprint(tool, args), "at": position}, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def read_cursor(tool: str, args: Mapping[str, Any], cursor: str | None) -> int | None:
    """Return the position a cursor holds (None without one); refuse one of other arguments."""
    import base64
    import binascii

    if cursor is None:
        return None
    bad = ToolError(
        "bad_cursor",
        "cursor: not a cursor this tool gave",
        "Give next_cursor exactly as the previous answer had it, or leave it out.",
    )
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad from None
    if not isinstance(payload, dict) or not isinstance(payload.get("at"), int):
        raise bad
    if payload.get("k") != _fingerprint(tool, args) or payload["at"] < 0:
        raise ToolError(
            "bad_cursor",
            "cursor: it belongs to a call with other arguments",
            "Repeat the arguments of the call that gave it, unchanged, with the cursor.",
        )
    return int(payload["at"])


def cutoff_of(args: Mapping[str, Any], key: str) -> float | None:
    """Return the epoch moment the argument names, or refuse it."""
    from hermes_cli.shared.durations import ACCEPTED_FORMS, DurationError, parse_cutoff

    text = args.get(key)
    if text is None:
        return None
    try:
        return parse_cutoff(text)
    except DurationError:
        raise ToolError(
            "bad_argument", f"{key}: {text!r} is not an age or a date", f"Use {ACCEPTED_FORMS}."
        ) from None


def wire_size(value: Any) -> int:
    """Return the bytes value takes in an answer on the wire: once as data, once inside the
    text copy (a JSON string, where every quote, backslash and control character grows)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    as_string = json.dumps(text, ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass")) + len(
        as_string.encode("utf-8", "surrogatepass")
    )


def within_budget(items: list[dict[str, Any]], budget: int = ITEMS_BUDGET) -> int:
    """Return how many of items fit in budget bytes (at least one, so a page always moves)."""
    used = 0
    for n, item in enumerate(items):
        used += wire_size(item) + 2  # the comma, in the data and in its text copy
        if used > budget and n:
            return n
    return len(items)


def scrubbed(value: Any) -> Any:
    """Return a JSON value whose strings are all valid UTF-8 (lone surrogates replaced)."""
    from hermes_state.shapes.text import scrub_surrogates

    if isinstance(value, str):
        return scrub_surrogates(value)
    if isinstance(value, list):
        return [scrubbed(v) for v in value]
    if isinstance(value, dict):
        return {k: scrubbed(v) for k, v in value.items()}
    return value


# --- the store ------------------------------------------------------------------------------


@contextlib.contextmanager
def open_store() -> Iterator[Store]:
    """Open the profile's live store read-only, as every read command does.

    The vault's stores (``store.path.parent / "vault"``) are opened by the calls that read them,
    read-only, through the library's spanning reads (``vault_search``) and, for get_session,
    ``hermes_cli.commands.vault.session_store``; a session the live store has is invisible there.
    """
    from hermes_cli.shared import stores

    with stores.read_store() as store:
        yield store


def check_sources(store: Store, sources: list[str] | None, *, vaulted: bool = False) -> None:
    """Refuse a source no session of this store (or, vaulted, of its vault) has, naming the
    sources it does have."""
    from hermes_state.records import session_list
    from hermes_state.vault import vault_search

    if not sources:
        return
    known = session_list.distinct_sources(store)
    unknown = [s for s in sources if s not in known]
    if unknown and vaulted:
        # A source only vaulted sessions have is a fine filter of a search spanning the vault.
        known += sorted(vault_search.vault_sources(store, store.path.parent) - set(known))
        unknown = [s for s in sources if s not in known]
    if unknown:
        have = ", ".join(known) if known else "no sessions yet"
        raise ToolError(
            "bad_argument",
            f"sources: no session comes from {unknown[0]!r}",
            f"This store has: {have}.",
        )


def profile_name() -> str:
    """Return the name of the profile the server reads."""
    from hermes_cli.shared import stores

    return stores.profile_name()
