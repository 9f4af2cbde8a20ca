"""Views of sessions for people: the session list, search hits and transcripts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from types import NoneType
from typing import Any

from hermes_cli.rendering import output, sanitize
from hermes_cli.rendering.layout import (
    Column,
    display_width,
    paint_pieces,
    truncate,
    wrap_pieces,
    wrap_text,
)
from hermes_cli.rendering.render import (
    MISSING,
    TOOL_ARGS_WIDTH,
    count,
    echo,
    exact_count,
    key_values,
    local_time,
    message_counts,
    snippet_pieces,
    table_fitting,
    when,
    write,
)
from hermes_state.shapes.content import content_text

# --- sessions -------------------------------------------------------------------------------

# `sessions list`: the title shrinks (to 16 cells) and the model (to 10) before anything is
# dropped; then whole columns go in this order: Model, Source, Tokens, Msgs, Profile, Last active.
# The ID and the title are never dropped, and the ID is never cut.
LIST_DROP_ORDER = ("Model", "Source", "Tokens", "Msgs", "Profile", "Last active")


def session_label(row: Mapping[str, Any]) -> str:
    """Return a session's title, else its preview, else a dash."""
    return row.get("title") or row.get("preview") or MISSING


def _tokens(row: Mapping[str, Any]) -> int:
    try:
        return int(row.get("input_tokens") or 0) + int(row.get("output_tokens") or 0)
    except (TypeError, ValueError):
        return 0


def list_columns(*, with_profile: bool) -> list[Column]:
    """Return the columns of `sessions list` with their shrink widths and drop ranks."""
    rank = {name: i + 1 for i, name in enumerate(LIST_DROP_ORDER)}
    columns = [Column("ID", style="id")]
    if with_profile:
        columns.append(Column("Profile", drop=rank["Profile"]))
    columns += [
        Column("Title / preview", shrink_to=16, prefer=40),
        Column("Source", shrink_to=10, drop=rank["Source"]),
        Column("Model", shrink_to=10, prefer=24, drop=rank["Model"]),
        Column("Msgs", "right", drop=rank["Msgs"]),
        Column("Tokens", "right", drop=rank["Tokens"]),
        Column("Last active", "right", drop=rank["Last active"]),
    ]
    return columns


def session_list(rows: Sequence[Mapping[str, Any]], *, with_profile: bool = False) -> None:
    """Print listed sessions: ID, title or preview, source, model, messages, tokens, last active."""
    settings = output.current()
    now = time.time()

    def body(exact: bool) -> list[list[Any]]:
        out = []
        for r in rows:
            cells: list[Any] = [r.get("id")]
            if with_profile:
                cells.append(r.get("profile") or "default")
            n = exact_count if exact else (lambda v: count(v, settings))
            cells += [
                session_label(r),
                r.get("source") or MISSING,
                r.get("model") or MISSING,
                n(r.get("message_count")),
                n(_tokens(r)),
                when(r.get("last_active"), settings, now=now),
            ]
            out.append(cells)
        return out

    # On a terminal, exact counts (34,090) when no column has to go for them, else 34.1k.
    variants = [body(True), body(False)] if settings.terminal else [body(False)]
    table_fitting(list_columns(with_profile=with_profile), variants, settings=settings)


def more_rows_hint(shown: int, offset: int, total: int, limit: int) -> None:
    """Tell on stderr that a listing has more rows than it printed, and how to see them."""
    if offset + shown < total:
        echo(
            f"Showing {offset + 1}-{offset + shown} of {total} sessions; "
            f"see more with --offset {offset + shown}, --limit {limit * 2}, or --limit 0 for all.",
            err=True,
        )


def _role_label(row: Mapping[str, Any]) -> str:
    key = (row.get("role") or "?", row.get("tool_name"))
    label = (
        _ROLE_LABELS.get(key) if type(key[0]) is str and type(key[1]) in (str, NoneType) else None
    )
    if label is None:
        role = sanitize.one_line(key[0])
        label = f"{role} ({sanitize.one_line(key[1])})" if key[1] else role
        if len(_ROLE_LABELS) < 1024:
            _ROLE_LABELS[key] = label
    return label


_ROLE_LABELS: dict[tuple[Any, Any], str] = {}  # (role, tool name) -> label: a few hundred at most


def _role_style(role: str) -> str | None:
    return role if role in ("user", "assistant", "tool", "system") else None


SEP = " · "
SNIPPET_INDENT = "    "
HIT_TITLE_MIN = 20  # cells a hit header keeps for the title before it cuts the role
HIT_ROLE_MIN = 6  # a cut role keeps at least `assi…`


def search_hits(hits: Sequence[Mapping[str, Any]], titles: Mapping[str, str | None]) -> None:
    """Print hits as blocks: `id · title · role · when`, then the snippet wrapped to the width.

    On a narrow terminal the title is cut (then left out); the id is never cut. Piped, every
    header and snippet is whole, one line each, with absolute times.
    """
    settings = output.current()
    now = time.time()
    for i, h in enumerate(hits):
        if i:
            write("\n")
        sid = sanitize.one_line(h.get("session_id"))
        role = _role_label(h)
        stamp = when(h.get("timestamp"), settings, now=now)
        title = sanitize.one_line(titles.get(str(h.get("session_id"))) or "")
        if title and settings.width is not None:
            # A long role (a tool's name) is cut before the title is: the title (or its
            # [vault 2025] mark) keeps at least HIT_TITLE_MIN cells when the line has them.
            frame = display_width(sid) + display_width(SEP * 3 + stamp)
            keep = min(display_width(title), HIT_TITLE_MIN)
            if settings.width - frame - display_width(role) < keep:
                role = truncate(role, max(HIT_ROLE_MIN, settings.width - frame - keep))
            room = settings.width - frame - display_width(role)
            title = truncate(title, room) if room >= 8 else ""
        head: list[tuple[str, str | None]] = [(sid, "id")]
        if title:
            head += [(SEP, "dim"), (title, "title")]
        head += [(SEP, "dim"), (role, _role_style(str(h.get("role")))), (SEP, "dim")]
        head += [(stamp, "dim")]
        write(paint_pieces(head, settings) + "\n")
        pieces = snippet_pieces(h.get("snippet"), settings)
        if settings.width is None:
            lines = [pieces]
        else:
            lines = wrap_pieces(pieces, settings.width - len(SNIPPET_INDENT))
        for line in lines:
            write(SNIPPET_INDENT + paint_pieces(line, settings) + "\n")


def title_hits(rows: Sequence[Mapping[str, Any]]) -> None:
    """Print sessions whose title matched a search: `id · title · source · when`, one a line,
    under a heading that says they are title matches. The id is never cut; the title is cut
    (keeping its end, where `#2` tells continuations apart) before the source is left out."""
    settings = output.current()
    now = time.time()
    write(output.paint("Title matches:", "heading", settings) + "\n")
    for r in rows:
        sid = sanitize.one_line(r.get("id"))
        title = sanitize.one_line(r.get("title") or "")
        source = sanitize.one_line(r.get("source") or MISSING)
        stamp = when(r.get("last_active"), settings, now=now)
        if settings.width is not None:
            fixed = display_width(sid + SEP + SEP + stamp)
            if settings.width - fixed - display_width(SEP + source) < 12:
                source = ""
            room = settings.width - fixed - (display_width(SEP + source) if source else 0)
            title = truncate(title, max(room, 8))
        head: list[tuple[str, str | None]] = [(sid, "id"), (SEP, "dim"), (title, "title")]
        if source:
            head += [(SEP, "dim"), (source, None)]
        head += [(SEP, "dim"), (stamp, "dim")]
        write(paint_pieces(head, settings) + "\n")


def search_notes(result: Any, *, sort: str) -> None:
    """Say on stderr when hits are not the whole answer: budget cut, or ranked among the newest."""
    if result.partial:
        back = (
            f" (back to {local_time(result.searched_back_to)})" if result.searched_back_to else ""
        )
        echo(
            f"Note: partial result: the search stopped at its work budget after examining "
            f"{result.examined or 0:,} of {result.candidates or 0:,} candidate messages{back}; "
            "--all examines them all.",
            err=True,
        )
    elif result.ordering == "rank_recent":
        echo(
            f"Note: ranked among the newest {result.ranked:,} matches; older matches were not "
            "ranked (--all ranks every match).",
            err=True,
        )
    elif result and sort == "rank" and result.ordering == "newest":
        kind = "substring" if result.route == "trigram" else "scanned"
        echo(f"Note: newest first: {kind} matches have no relevance rank.", err=True)


def _tool_call_lines(tool_calls: Any, settings: output.Settings) -> list[str]:
    lines = []
    width = TOOL_ARGS_WIDTH if settings.terminal else None
    for call in tool_calls or []:
        if not isinstance(call, Mapping):
            continue
        fn: Mapping[str, Any] = (
            call["function"] if isinstance(call.get("function"), Mapping) else {}
        )
        name = fn.get("name") or call.get("name") or "?"
        args = fn.get("arguments", call.get("arguments", ""))
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        lines.append(f"→ {sanitize.one_line(name)}({truncate(sanitize.one_line(args), width)})")
    return lines


def _flags(msg: Mapping[str, Any]) -> str:
    if msg.get("compacted"):
        return " [compacted]"
    if not msg.get("active", 1):
        return " [inactive]"
    return ""


def session_header(
    session: Mapping[str, Any], counts: Any = None, *, include_all: bool = False
) -> None:
    """Print the summary lines of one session (counts: its MessageCounts, when known)."""
    messages: Any = session.get("message_count")
    if counts is not None:
        messages = message_counts(counts.live, counts.stored)
        if counts.shown != counts.live and not include_all:
            messages += f"; shown below: {counts.shown:,} (live and compacted history)"
        if counts.shown < counts.stored and not include_all:
            messages += "; --all shows every stored one"
    pairs = [
        ("Session", session.get("id")),
        ("Title", session.get("title")),
        ("Source", session.get("source")),
        ("Model", session.get("model")),
        ("Started", local_time(session.get("started_at"))),
        ("Ended", local_time(session.get("ended_at")) if session.get("ended_at") else None),
        ("Messages", messages),
    ]
    if session.get("parent_session_id"):
        pairs.append(("Parent", session["parent_session_id"]))
    key_values(pairs)


def _rule(head: list[tuple[str, str | None]], settings: output.Settings) -> str:
    """Return a message header line: `── user · 09:15 ─────` filled to the terminal width."""
    if settings.width is None and not settings.color:
        return "── " + "".join([t for t, _ in head])  # piped: no fill, no colour
    text = "── " + "".join(t for t, _ in head) + " "
    fill = ""
    if settings.width is not None:
        fill = "─" * max(0, settings.width - display_width(text))
    return paint_pieces([("── ", "dim"), *head, (" " + fill if fill else "", "dim")], settings)


TRANSCRIPT_FLUSH = 256  # messages whose lines are written at once (a session can hold 100,000)


def transcript(
    messages: Iterable[Mapping[str, Any]], *, reasoning: bool = False, skipped: int = 0
) -> int:
    """Print messages one by one (streamed, so huge sessions stay cheap); return how many."""
    settings = output.current()
    if skipped:
        write(output.paint(f"… {skipped} earlier message(s) not shown", "dim", settings) + "\n")
    out: list[str] = []  # written every TRANSCRIPT_FLUSH messages: one write a line cost more
    n = 0
    for msg in messages:
        n += 1
        role = str(msg.get("role") or "?")
        head: list[tuple[str, str | None]] = [(_role_label(msg), _role_style(role))]
        head.append((f" · {local_time(msg.get('timestamp'))}{_flags(msg)}", None))
        thought = msg.get("reasoning") or msg.get("reasoning_content")
        if thought and not reasoning:
            head.append((" · reasoning hidden", "dim"))
        out.append(_rule(head, settings) + "\n")
        if thought and reasoning:
            text = sanitize.multiline(content_text(thought))
            out.extend(
                output.paint("│ " + line, "dim", settings) + "\n" for line in text.split("\n")
            )
        body = content_text(msg.get("content"))
        if body:
            safe = sanitize.multiline(body)
            if settings.width is None:
                out.append(safe + "\n")  # piped: lines stay raw
            else:  # on a terminal a long line is wrapped at its width
                out.extend(
                    part + "\n"
                    for line in safe.split("\n")
                    for part in wrap_text(line, settings.width)
                )
        out.extend(
            output.paint(line, "dim", settings) + "\n"
            for line in _tool_call_lines(msg.get("tool_calls"), settings)
        )
        if n % TRANSCRIPT_FLUSH == 0:
            write("".join(out))
            out.clear()
    write("".join(out))
    return n
