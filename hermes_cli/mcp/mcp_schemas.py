"""`hermes mcp`: the JSON schemas of the tools' arguments and answers."""

from __future__ import annotations

from typing import Any

from hermes_cli.mcp.mcp_calls import DEFAULT_MAX_CHARS, MAX_CHARS, ROLES

# --- schemas --------------------------------------------------------------------------------

_TEXTS = {
    "type": "array",
    "items": {"type": "string", "minLength": 1, "maxLength": 200},
    "maxItems": 20,
}
WHEN_TEXT = (
    "A duration back from now (7d, 12h, 2w, '2 weeks ago'), today, yesterday, 'last monday', "
    "or an ISO date (2026-01-31)."
)
_WHEN = {"type": "string", "minLength": 1, "maxLength": 100, "description": WHEN_TEXT}
_CURSOR = {
    "type": "string",
    "minLength": 1,
    "maxLength": 1000,
    "description": "next_cursor of the previous answer; give the other arguments unchanged.",
}
_NULLABLE_TEXT = {"type": ["string", "null"]}
_NULLABLE_INT = {"type": ["integer", "null"]}
_VAULT_OUT = {
    "type": ["string", "null"],
    "description": 'The vault year of the store holding the session ("2025": read-only in '
    "vault/2025.db), or null for the live store.",
}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """Return the JSON schema of an object with these properties (no others)."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def _loose(properties: dict[str, Any]) -> dict[str, Any]:
    """Return the schema of a result object: these keys required, others allowed (later)."""
    return {"type": "object", "properties": properties, "required": list(properties)}


_SESSION_OUT = _loose(
    {
        "id": {"type": "string"},
        "title": _NULLABLE_TEXT,
        "source": _NULLABLE_TEXT,
        "model": _NULLABLE_TEXT,
        "started_at": _NULLABLE_TEXT,
        "last_active_at": _NULLABLE_TEXT,
        "message_count": {"type": "integer"},
        "vault": _VAULT_OUT,
    }
)
_PAGE_OUT = {
    "profile": {"type": "string"},
    "redacted": {"type": "boolean"},
    "next_cursor": _NULLABLE_TEXT,
}

SEARCH_INPUT = _object(
    {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 2048,
            "description": 'Words (all must match), "a phrase", prefix*, a OR b, -word (leave '
            "out messages with it), or CJK text.",
        },
        "sources": {**_TEXTS, "description": "Only sessions from these sources (cli, telegram…)."},
        "exclude_sources": {**_TEXTS, "description": "Leave out sessions from these sources."},
        "roles": {
            "type": "array",
            "items": {"enum": list(ROLES)},
            "maxItems": len(ROLES),
            "description": "Only messages of these roles.",
        },
        "since": {
            **_WHEN,
            "description": "Only messages sent at or after this. " + WHEN_TEXT,
        },
        "until": {
            **_WHEN,
            "description": "Only messages sent before this. " + WHEN_TEXT,
        },
        "sort": {
            "enum": ["rank", "newest", "oldest"],
            "description": "Best match first (default; substring matches come newest first), "
            "newest or oldest. An explicit rank is refused for matches that cannot be ranked.",
        },
        "archived": {
            "type": "boolean",
            "default": False,
            "description": "Include archived sessions (left out by default, as in list).",
        },
        "live_only": {
            "type": "boolean",
            "default": False,
            "description": "Search the live store only (leave out the vault's sessions, which "
            "are searched by default).",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
        "complete": {
            "type": "boolean",
            "default": False,
            "description": "Examine every message and rank every match (slower on large "
            "stores); by default a search stops at a work budget and says so (partial).",
        },
        "cursor": _CURSOR,
    },
    ("query",),
)
SEARCH_OUTPUT = _loose(
    {
        **_PAGE_OUT,
        "query": {"type": "string"},
        "ordering": {"type": "string"},
        "route": {"type": "string"},
        "partial": {"type": "boolean"},
        "ranked": _NULLABLE_INT,
        "examined": _NULLABLE_INT,
        "candidates": _NULLABLE_INT,
        "searched_back_to": _NULLABLE_TEXT,
        "matches": {"type": "integer"},
        "sessions": {"type": "integer"},
        "complete": {"type": "boolean"},
        "notes": {"type": "array", "items": {"type": "string"}},
        "hits": {
            "type": "array",
            "items": _loose(
                {
                    "id": {"type": "integer"},
                    "session_id": {"type": "string"},
                    "session_title": _NULLABLE_TEXT,
                    "role": _NULLABLE_TEXT,
                    "snippet": _NULLABLE_TEXT,
                    "created_at": _NULLABLE_TEXT,
                    "source": _NULLABLE_TEXT,
                    "context": {"type": "array"},
                    "vault": _VAULT_OUT,
                }
            ),
        },
    }
)
LIST_INPUT = _object(
    {
        "sources": {**_TEXTS, "description": "Only sessions from these sources."},
        "exclude_sources": {**_TEXTS, "description": "Leave out sessions from these sources."},
        "since": {
            **_WHEN,
            "description": "Only sessions active at or after this. " + WHEN_TEXT,
        },
        "until": {
            **_WHEN,
            "description": "Only sessions last active before this. " + WHEN_TEXT,
        },
        "archived": {
            "type": "boolean",
            "default": False,
            "description": "Include archived sessions.",
        },
        "vault": {
            "type": "boolean",
            "default": False,
            "description": "Include vaulted sessions too (the live store's only by default).",
        },
        "sort": {
            "enum": ["started", "active"],
            "default": "started",
            "description": "Newest start first, or most recently active first.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
        "cursor": _CURSOR,
    }
)
LIST_OUTPUT = _loose(
    {
        **_PAGE_OUT,
        "total": {"type": "integer"},
        "offset": {"type": "integer"},
        "sessions": {"type": "array", "items": _SESSION_OUT},
    }
)
GET_INPUT = _object(
    {
        "session": {
            "type": "string",
            "minLength": 1,
            "maxLength": 500,
            "description": "Session id, unique id prefix, or exact title.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "default": 20,
            "description": "Messages in this page (oldest first).",
        },
        "roles": {"type": "array", "items": {"enum": list(ROLES)}, "maxItems": len(ROLES)},
        "include_inactive": {
            "type": "boolean",
            "default": False,
            "description": "Also rewound/superseded messages (every stored generation).",
        },
        "reasoning": {
            "type": "boolean",
            "default": False,
            "description": "Also the model's reasoning text.",
        },
        "max_chars": {
            "type": "integer",
            "minimum": 100,
            "maximum": MAX_CHARS,
            "default": DEFAULT_MAX_CHARS,
            "description": "Longest text of one message field; longer ones are cut (truncated "
            "names the field and its full length).",
        },
        "cursor": _CURSOR,
    },
    ("session",),
)
GET_OUTPUT = _loose(
    {
        **_PAGE_OUT,
        "session": _SESSION_OUT,
        "messages": {
            "type": "array",
            "items": _loose(
                {
                    "id": {"type": "integer"},
                    "role": _NULLABLE_TEXT,
                    "created_at": _NULLABLE_TEXT,
                    "content": {"type": "string"},
                    "tool_calls": {"type": "array"},
                    "active": {"type": "boolean"},
                    "truncated": {"type": "object"},
                }
            ),
        },
    }
)
# The groupings of hermes_state.reports.usage_report (written out: the schemas are built without
# importing the library, for start-up time; a test checks they agree).
USAGE_GROUPINGS = ("day", "week", "month", "model", "provider", "task", "source", "session")
USAGE_INPUT = _object(
    {
        "by": {
            "enum": list(USAGE_GROUPINGS),
            "default": "model",
            "description": "Sum per day, week (from Monday), month (local time), model, "
            "provider, task (the conversation, or a side task such as title generation), "
            "source or session.",
        },
        "since": {**_WHEN, "description": "Only usage recorded at or after this. " + WHEN_TEXT},
        "until": {**_WHEN, "description": "Only usage recorded before this. " + WHEN_TEXT},
        "sources": {**_TEXTS, "description": "Only usage of sessions from these sources."},
        "models": {**_TEXTS, "description": "Only usage of these models, as recorded."},
        "live_only": {
            "type": "boolean",
            "default": False,
            "description": "Count the live store only (leave out the vault's sessions, which "
            "count by default).",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
        "cursor": _CURSOR,
    }
)
USAGE_OUTPUT = _loose(
    {
        **_PAGE_OUT,
        "by": {"type": "string"},
        "basis": _NULLABLE_TEXT,
        "totals": {"type": "object"},
        "vault": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "description": "The vault years counted in; null when live_only.",
        },
        "groups": {"type": "array", "items": {"type": "object"}},
        "group_count": {"type": "integer"},
    }
)
