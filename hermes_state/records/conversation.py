"""A session replayed as the conversation the agent sends a provider: OpenAI-style message
dicts, with the fields the agent restores and without what must never reach a provider.

What the replay does to stored rows: ownership markers are removed from display metadata;
complete ``<memory-context>`` blocks (recalled memory the agent fences into a prompt, which a
model sometimes echoes) are cut from user and assistant text; an empty ``reasoning`` counts as
none; a platform message id travels as ``message_id``. With ``repair_alternation`` the sequence
is made acceptable to a provider (see :func:`repaired`); the stored rows never change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from hermes_state.records.messages import OWNER_KEY, get_messages
from hermes_state.shapes.lineage import ancestors_in, chain_in
from hermes_state.store.connection import Store

_MEMORY_BLOCK_RE = re.compile(r"<\s*memory-context\s*>.*?<\s*/\s*memory-context\s*>", re.I | re.S)
_MEMORY_TAG_RE = re.compile(r"<\s*/?\s*memory-context\s*>", re.I)

# Assistant fields restored when stored (None means not stored); reasoning only when non-empty.
_ASSISTANT_EXTRAS = (
    "finish_reason",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
)


def strip_owner(metadata: Any) -> Any:
    """Return display metadata without the ownership marker (never sent to providers)."""
    if isinstance(metadata, dict) and OWNER_KEY in metadata:
        metadata = {k: v for k, v in metadata.items() if k != OWNER_KEY}
        return metadata or None
    return metadata


def strip_memory_context(text: str) -> str:
    """Cut recalled-memory blocks (and stray fence tags) out of a message's text."""
    if "memory-context" not in text.lower():
        return text
    return _MEMORY_TAG_RE.sub("", _MEMORY_BLOCK_RE.sub("", text)).strip()


def to_conversation_message(r: Mapping[str, Any]) -> dict[str, Any]:
    """Shape one decoded row as an OpenAI-style message with its uid fields."""
    content = r["content"] if r["content"] is not None else ""
    if r["role"] in ("user", "assistant") and isinstance(content, str):
        content = strip_memory_context(content)
    msg: dict[str, Any] = {"role": r["role"], "content": content}
    if r.get("tool_calls"):
        msg["tool_calls"] = r["tool_calls"]
    if r.get("tool_call_id"):
        msg["tool_call_id"] = r["tool_call_id"]
    if r.get("tool_name"):
        msg["name"] = r["tool_name"]
        msg["tool_name"] = r["tool_name"]  # the agent's own key for it
    if r.get("effect_disposition"):
        msg["effect_disposition"] = r["effect_disposition"]
    if r.get("api_content") is not None:
        msg["api_content"] = r["api_content"]  # replayed byte for byte: never cleaned
    if r["role"] == "assistant":
        if r.get("reasoning"):
            msg["reasoning"] = r["reasoning"]
        for f in _ASSISTANT_EXTRAS:
            if r.get(f) is not None:
                msg[f] = r[f]
    if r.get("display_kind"):
        msg["display_kind"] = r["display_kind"]
    md = strip_owner(r.get("display_metadata"))
    if md:
        msg["display_metadata"] = md
    if r.get("platform_message_id"):
        msg["message_id"] = r["platform_message_id"]
    if r.get("observed"):
        msg["observed"] = True
    msg["timestamp"] = r["timestamp"]
    # uid fields travel with the message for context engines; the provider layer drops them.
    if r.get("message_uid"):
        msg["message_uid"] = r["message_uid"]
    if r.get("absorbed_message_uids"):
        msg["_absorbed_message_uids"] = r["absorbed_message_uids"]
    if r.get("tool_call_uids"):
        msg["_tool_call_uids"] = r["tool_call_uids"]
    if r.get("tool_call_uid"):
        msg["_tool_call_uid"] = r["tool_call_uid"]
    # Read back from the store: already persisted (the agent must not write it a second time).
    msg["_db_persisted"] = True
    return msg


def _call_ids(msg: Mapping[str, Any]) -> list[str]:
    out = []
    for call in msg.get("tool_calls") or []:
        if isinstance(call, Mapping) and call.get("id"):
            out.append(str(call["id"]))
    return out


def _with_calls(msg: dict[str, Any], ids: set[str]) -> dict[str, Any]:
    """Return a copy of an assistant message that keeps only the tool calls named."""
    calls = [
        c
        for c in msg.get("tool_calls") or []
        if isinstance(c, Mapping) and str(c.get("id") or "") in ids
    ]
    out = {k: v for k, v in msg.items() if k != "tool_calls"}
    if calls:
        out["tool_calls"] = calls
    return out


def repaired(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the conversation without the pieces a provider rejects; the rest keeps its order.

    A tool result whose call no earlier assistant message made is dropped; an assistant
    message loses the tool calls that got no result (a turn cut off before its tools answered)
    and goes altogether when nothing else is left of it; a user message repeated right after
    itself (a turn retried after a failure that stored no reply) appears once.
    """
    answered: set[str] = set()
    called: set[str] = set()
    for msg in messages:
        if msg.get("role") == "tool" and msg.get("tool_call_id"):
            answered.add(str(msg["tool_call_id"]))
    out: list[dict[str, Any]] = []
    for msg in messages:
        role = msg.get("role")
        if role == "assistant":
            ids = _call_ids(msg)
            kept = [i for i in ids if i in answered]
            if len(kept) < len(ids):
                if not kept and not msg.get("content"):
                    continue
                msg = _with_calls(msg, set(kept))
            called.update(kept)
        elif role == "tool":
            if str(msg.get("tool_call_id") or "") not in called:
                continue
        elif (
            role == "user"
            and out
            and out[-1].get("role") == "user"
            and out[-1].get("content") == msg.get("content")
        ):
            continue
        out.append(msg)
    return out


def _is_replayed_prompt(earlier: list[dict[str, Any]], msg: Mapping[str, Any]) -> bool:
    """Tell whether a user prompt repeats one that is still awaiting its answer."""
    content = msg.get("content")
    if msg.get("role") != "user" or not isinstance(content, str) or not content:
        return False
    for prev in reversed(earlier):
        if prev.get("role") == "user" and prev.get("content") == content:
            return True
        if prev.get("role") == "assistant" and (prev.get("content") or prev.get("tool_calls")):
            return False
    return False


def _without_replayed_prompts(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop user prompts a resumed turn replayed (each appears once, where first asked)."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        if not _is_replayed_prompt(out, msg):
            out.append(msg)
    return out


def get_messages_as_conversation(
    store: Store,
    session_id: str,
    include_ancestors: bool = False,
    include_inactive: bool = False,
    repair_alternation: bool = False,
    include_row_ids: bool = False,
    include_compacted: bool = False,
) -> list[dict[str, Any]]:
    """Return a session's live messages as OpenAI-style dicts (see the module docstring).

    ``include_ancestors`` puts the sessions this one continues first (a prompt replayed at the
    start of a continuation appears once); ``include_row_ids`` adds each row's id as
    ``_row_id`` (never sent to a provider).
    """
    out = []
    for r in get_messages(
        store,
        session_id,
        include_inactive=include_inactive,
        include_compacted=include_compacted,
        include_ancestors=include_ancestors,
    ):
        msg = to_conversation_message(r)
        if include_row_ids:
            msg["_row_id"] = r["id"]
        out.append(msg)
    if include_ancestors:
        out = _without_replayed_prompts(out)
    return repaired(out) if repair_alternation else out


def resume_conversations(
    store: Store, session_id: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return (what the model is sent, what the user is shown) for resuming a session.

    The first is the session's own live messages, repaired for a provider; the second the
    whole conversation through its compression ancestors, as stored.
    """
    model = get_messages_as_conversation(store, session_id, repair_alternation=True)
    display = get_messages_as_conversation(store, session_id, include_ancestors=True)
    return model, display


def ancestor_display_prefix(store: Store, session_id: str) -> list[dict[str, Any]]:
    """Return only the messages of the sessions this one continues (oldest first)."""
    ancestors = ancestors_in(store.conn, session_id)
    if not ancestors:
        return []
    out = []
    for sid in reversed(ancestors):
        out += [to_conversation_message(r) for r in get_messages(store, sid)]
    return _without_replayed_prompts(out)


def resolve_resume_session_id(store: Store, session_id: str) -> str:
    """Return the session to resume for an id: where its conversation's latest messages are.

    The compression chain is followed to its live tip, then to the last continuation that holds
    messages (a continuation made just before the process stopped may still be empty); without
    any messages anywhere the id itself is returned.
    """
    if not session_id:
        return session_id
    chain = chain_in(store.conn, session_id)
    for sid in reversed(chain):
        if store.conn.execute(
            "SELECT 1 FROM messages WHERE session_id = ? LIMIT 1", (sid,)
        ).fetchone():
            return sid
    return session_id


def conversation_root(store: Store, session_id: str) -> str:
    """Return the first session of a session's conversation (its compression root)."""
    ancestors = ancestors_in(store.conn, session_id)
    return ancestors[-1] if ancestors else session_id
