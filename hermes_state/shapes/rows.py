"""The shapes the library hands out: session rows, messages, search hits and statistics.

Rows are plain dicts at run time; these TypedDicts name their keys for type checkers. Session
and message rows carry every column of the store (older layouts: missing columns are None), so
their TypedDicts are not total: a key listed here is one the library documents.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

Ordering = Literal["rank", "rank_recent", "newest", "oldest"]
Route = Literal["word", "trigram", "cjk", "scan", "none"]
Sort = Literal["rank", "newest", "oldest"]
Role = Literal["user", "assistant", "tool", "system"]
ListOrder = Literal["started", "active"]
OnConflict = Literal["skip", "replace"]


class SessionRow(TypedDict, total=False):
    """One row of ``sessions`` (every column of schema 31; listings add preview/last_active)."""

    id: str
    source: str
    user_id: str | None
    model: str | None
    model_config: str | None
    system_prompt: str | None
    parent_session_id: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int
    tool_call_count: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    estimated_cost_usd: float | None
    actual_cost_usd: float | None
    title: str | None
    title_source: str | None
    archived: int
    pinned: int
    hidden: int
    last_activity_at: float | None
    profile_name: str | None
    preview: str
    last_active: float


class MessageRow(TypedDict, total=False):
    """One row of ``messages``, JSON columns decoded (tool_calls a list, metadata a dict)."""

    id: int
    session_id: str
    role: str
    content: Any
    tool_call_id: str | None
    tool_calls: list[Any] | None
    tool_name: str | None
    timestamp: float
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    reasoning_content: str | None
    reasoning_details: Any
    active: int
    compacted: int
    api_content: str | None
    display_kind: str | None
    display_metadata: dict[str, Any] | None
    message_uid: str | None
    absorbed_message_uids: list[str] | None
    tool_call_uids: dict[str, Any] | None
    tool_call_uid: str | None


class ConversationMessage(TypedDict, total=False):
    """An OpenAI-style message, uid fields restored (the provider layer drops the private ones)."""

    role: str
    content: Any
    tool_calls: list[Any]
    tool_call_id: str
    name: str
    reasoning: str
    reasoning_content: str
    api_content: str
    timestamp: float
    message_uid: str
    _db_persisted: bool


class ContextMessage(TypedDict):
    """A neighbour of a search hit (content cut to 200 characters)."""

    id: int
    role: str
    content: str


class SearchHit(TypedDict):
    """One search hit (the keys of search.HIT_KEYS)."""

    id: int
    session_id: str
    role: str
    snippet: str
    timestamp: float
    tool_name: str | None
    source: str | None
    model: str | None
    session_started: float | None
    context: list[ContextMessage]


class ModelUsage(TypedDict):
    """Sessions, tokens and cost of one model."""

    model: str
    session_count: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


class SourceCount(TypedDict):
    """Sessions and messages of one source."""

    source: str
    sessions: int
    messages: int


class StoreStats(TypedDict):
    """File sizes, pages and per-table row counts of a store."""

    path: str
    schema_version: int | None
    files: dict[str, int]
    total_bytes: int
    page_size: int
    page_count: int
    freelist_count: int
    journal_mode: str
    tables: dict[str, int]


class UsageTotals(TypedDict):
    """Tokens and spend over the store's root sessions."""

    tokens: int
    cost_usd: float


class ImportSummary(TypedDict):
    """What import_sessions did (the agent's dict shape)."""

    imported: int
    skipped: int
    replaced: int
    messages: int
    errors: list[dict[str, Any]]
    warnings: list[str]
