"""Values for shell completion: `hermes __complete KIND [PREFIX]`, one candidate per line.

KIND is `ids` (session ids, most recently started first, each with its title after a tab),
`titles`, `sources` (from the store), `roles` or `profiles`. It runs without the Typer app and
opens the store read-only (never creating or migrating it), so a completion costs one short
process. Any failure prints nothing: a completion must never break the shell line.
Stored text is untrusted: a candidate holding a control character is left out (it could not be
typed back anyway), and descriptions are sanitised.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from hermes_cli.rendering import sanitize

LIMIT = 50
KINDS = ("ids", "titles", "sources", "roles", "profiles")
ROLES = ("user", "assistant", "tool", "system")


def _usable(value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(value)
        and not sanitize.has_unsafe(value)
        and ("\t" not in value and "\n" not in value)
    )


def _with_store(fn: Callable[[Any], list[str]]) -> list[str]:
    from hermes_state.store.connection import open_store
    from hermes_state.store.home import default_db_path

    path = default_db_path()
    if not path.is_file():
        return []
    store = open_store(path, read_only=True)
    try:
        return fn(store)
    finally:
        store.close()


def candidates(kind: str, prefix: str = "") -> list[str]:
    """Return the completion lines for kind (ids carry `\\ttitle` descriptions)."""
    if kind == "roles":
        return [r for r in ROLES if r.startswith(prefix)]
    if kind == "profiles":
        from hermes_state.store.home import list_profiles

        return [p.name for p in list_profiles() if p.name.startswith(prefix)]
    from hermes_state.records import session_list

    if kind == "ids":
        return _with_store(
            lambda store: [
                sid + (f"\t{sanitize.one_line(title)}" if title else "")
                for sid, title in session_list.recent_session_ids(store, prefix, LIMIT)
                if _usable(sid)
            ]
        )
    if kind == "titles":
        return _with_store(
            lambda store: [
                t for t in session_list.titles_with_prefix(store, prefix, LIMIT) if _usable(t)
            ]
        )
    if kind == "sources":
        return _with_store(
            lambda store: [
                s
                for s in session_list.distinct_sources(store)
                if _usable(s) and s.startswith(prefix)
            ]
        )
    return []


def main(argv: list[str]) -> int:
    """Print the candidates for `KIND [PREFIX]`; always exit 0."""
    if not argv or argv[0] not in KINDS:
        return 0
    try:
        found = candidates(argv[0], argv[1] if len(argv) > 1 else "")
    except Exception:  # a broken store must not break the shell's line
        return 0
    if found:
        sys.stdout.write("\n".join(found) + "\n")
    return 0
