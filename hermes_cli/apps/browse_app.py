"""The Textual screens of `hermes sessions browse` (imported only when that command runs).

The widgets only draw and dispatch: every read and edit is a method of `browse_store.Browser`, and
every row and message is a rich `Text` built by `browse_text` from escaped stored text. The
widgets and dialogs are in `browse_widgets`, the transcript screen in `browse_transcript`.
Reads run in worker threads, newest request first: a keystroke made while a search runs
replaces any search still waiting, so typing never queues stale work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input, RichLog, Static

from hermes_cli.apps import browse_model, browse_store, browse_text
from hermes_cli.apps.browse_model import BrowseError, Request, Results, Row
from hermes_cli.apps.browse_store import Browser
from hermes_cli.apps.browse_transcript import TranscriptScreen
from hermes_cli.apps.browse_widgets import (
    CHOOSE_HELP,
    AskScreen,
    ConfirmScreen,
    FittedLine,
    HelpScreen,
    HitList,
    Lane,
    binding_help,
    key_parts,
)
from hermes_cli.rendering import render

if TYPE_CHECKING:
    from hermes_state.search.search import MatchCount

NARROW_COLUMNS = 100  # below this the preview goes under the list instead of beside it
LOAD_MORE_MARGIN = 5  # fetch the next page when the cursor is this close to the end
CHANGE_POLL_S = 2.0
COUNT_DELAY_S = 0.25  # count matches once the results have stood this long (not mid-typing)


# --- the main screen ------------------------------------------------------------------------


class BrowseScreen(Screen[None]):
    """Search box, filter bar, hits or sessions, the preview, a status line and the keys."""

    # In the keys bar in this order; a narrow bar keeps the first ones (and Help and Quit).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help", priority=True, tooltip="show these keys"),
        Binding("enter", "choose", "Choose", priority=True, tooltip=CHOOSE_HELP["id"]),
        Binding(
            "escape",
            "escape",
            "Clear",
            priority=True,
            tooltip="clear the query; with an empty query, leave without choosing",
        ),
        Binding("f3,ctrl+o", "open", "Open", priority=True, tooltip="open the whole transcript"),
        Binding(
            "tab", "toggle_view", "View", priority=True, tooltip="one row per hit / per session"
        ),
        Binding("f2", "rename", "Rename", priority=True, tooltip="rename the session"),
        Binding("f4", "export", "Export", priority=True, tooltip="export the session to a file"),
        Binding("f7", "pin", "Pin", priority=True, tooltip="pin or unpin the session"),
        Binding("f8", "delete", "Delete", priority=True, tooltip="delete the session"),
        Binding(
            "f9", "archive", "Archive", priority=True, tooltip="archive or unarchive the session"
        ),
        Binding(
            "f5,ctrl+l",
            "refresh",
            "Refresh",
            priority=True,
            tooltip="read the store again (new messages of a running gateway)",
        ),
        Binding(
            "f6",
            "expand",
            "Expand",
            priority=True,
            tooltip="expand tool calls and reasoning in the preview, or collapse",
        ),
        Binding(
            "ctrl+q,ctrl+c", "app.quit", "Quit", priority=True, tooltip="quit without choosing"
        ),
        Binding("up,ctrl+p", "move(-1)", "Up", show=False, priority=True, tooltip="previous row"),
        Binding("down,ctrl+n", "move(1)", "Down", show=False, priority=True, tooltip="next row"),
        Binding("pageup", "page(-1)", "Page up", show=False, priority=True, tooltip="a page up"),
        Binding(
            "pagedown", "page(1)", "Page down", show=False, priority=True, tooltip="a page down"
        ),
        Binding(
            "ctrl+s",
            "cycle('source')",
            "Source",
            show=False,
            priority=True,
            tooltip="next source filter",
        ),
        Binding(
            "ctrl+r", "cycle('role')", "Role", show=False, priority=True, tooltip="next role filter"
        ),
        Binding(
            "ctrl+t",
            "cycle('since')",
            "Since",
            show=False,
            priority=True,
            tooltip="next time filter (messages and sessions active since)",
        ),
        Binding(
            "ctrl+g",
            "cycle('scope')",
            "Archived/pinned",
            show=False,
            priority=True,
            tooltip="not archived / all, archived too / archived only / pinned only",
        ),
    ]

    def __init__(self, browser: Browser, initial: Results) -> None:
        super().__init__()
        self.browser = browser
        first = initial.request
        self.view = first.view
        self.query_text = first.query
        self.filters = first.filters
        self.initial_filters = first.filters
        self.results: Results | None = None
        self.rows: list[Row] = []
        self.count: MatchCount | None = None
        self.counting = False
        self.expanded = False
        self.preview_row: Row | None = None
        self.preview_messages: list[dict[str, Any]] = []
        self.preview_texts: list[Text] = []  # each previewed message as drawn
        self.preview_hit: int | None = None  # which of them is the hit
        self.shown_at: float | None = None
        self.busy = ""
        self.changed = False
        self.keystroke_at: float | None = None
        self.latencies_ms: list[float] = []  # keystroke to results shown, for bench/
        self.notices: list[str] = []  # what each finished edit reported
        self._seq = first.seq
        self._count_seq = 0
        self._keep: str | None = None
        self._loading_more = False
        self._count_timer: Any = None
        self._initial = initial
        self._marker = browser.changed_marker()
        self._pattern: Any = None
        self._search = Lane(self, "search")
        self._more = Lane(self, "more")
        self._preview = Lane(self, "preview")
        self._count = Lane(self, "count")
        self._edit = Lane(self, "edit")

    # layout

    def compose(self) -> ComposeResult:
        with Horizontal(id="searchbar"):
            yield Static(Text("Search ", style="bold"), id="prompt")
            yield Input(
                value=self.query_text,
                placeholder='words, "a phrase", prefix*, part of a word, CJK — empty: sessions',
                id="query",
            )
        yield Static(id="filters")
        with Horizontal(id="panes"):
            yield HitList(id="list")
            with Vertical(id="side"):
                yield Static(id="preview-head")
                yield RichLog(
                    id="preview",
                    wrap=True,
                    markup=False,
                    highlight=False,
                    min_width=1,
                    auto_scroll=False,
                )
        yield FittedLine(browse_text.status_parts(None), id="status")
        yield FittedLine(key_parts(self.BINDINGS), sep=" ", classes="keys")

    def on_mount(self) -> None:
        self.query_one("#preview", RichLog).can_focus = False
        self.query_one("#query", Input).focus()
        self._draw_filters()
        self._show(self._initial)
        self.set_interval(CHANGE_POLL_S, self._poll_changes)

    def on_resize(self, event: Any) -> None:
        self.set_class(self.size.width < NARROW_COLUMNS, "narrow")
        # The preview's lines were wrapped at the old width: draw it again at the new one.
        self.call_after_refresh(lambda: self._preview_of(self.preview_row))

    # reading

    def _request(self, *, keep: str | None = None) -> None:
        """Ask for the current view of the query under the filters (newest request wins)."""
        self._seq += 1
        self._keep = keep
        request = Request(self._seq, self.view, self.query_text, self.filters)
        self._search.submit(lambda: self.browser.fetch(request), self._show)

    def _show(self, results: Results) -> None:
        if results.request.seq != self._seq:
            return  # a newer request is on its way
        self.results = results
        self.rows = list(results.rows)
        self._pattern = (
            browse_text.search_highlight(results.request.query)
            if results.request.searching
            else None
        )
        keep = self._keep
        index = next((i for i, r in enumerate(self.rows) if r.session_id == keep), 0)
        self.query_one("#list", HitList).set_rows(self.rows, index)
        if self.keystroke_at is not None:
            self.shown_at = time.perf_counter()
            self.latencies_ms.append((self.shown_at - self.keystroke_at) * 1000)
            self.keystroke_at = None
        self._schedule_count(results)
        self._draw_status()

    def _schedule_count(self, results: Results) -> None:
        """Count the matches once these results have stood for a moment (not mid-typing)."""
        self._count_seq += 1
        self.count = None
        if self._count_timer is not None:
            self._count_timer.stop()
            self._count_timer = None
        request = results.request
        self.counting = bool(not results.error and request.searching and request.view == "hits")
        if self.counting:
            seq = self._count_seq
            self._count_timer = self.set_timer(
                COUNT_DELAY_S, lambda: self._start_count(request, seq)
            )

    def _start_count(self, request: Request, seq: int) -> None:
        self._count_timer = None

        def work() -> Any:
            return self.browser.count(request, lambda: self._count_seq != seq)

        def done(count: Any) -> None:
            if seq == self._count_seq:
                self.count = count
                self.counting = False
                self._draw_status()

        self._count.submit(work, done)

    def _more_rows(self) -> None:
        results = self.results
        if results is None or not results.more or self._loading_more:
            return
        self._loading_more = True
        request = browse_store.request_after(results)

        def done(page: Results) -> None:
            self._loading_more = False
            if page.request.seq != self._seq or page.error or self.results is None:
                return
            self.rows.extend(page.rows)
            self.results.rows = self.rows
            self.results.more = page.more
            listing = self.query_one("#list", HitList)
            listing.add_rows(page.rows)
            self._draw_status()
            if (listing.cursor or 0) >= len(self.rows) - LOAD_MORE_MARGIN:
                self._more_rows()  # the cursor is still near the end: keep going

        self._more.submit(lambda: self.browser.fetch(request), done)

    # preview

    def on_hit_list_highlighted(self, event: HitList.Highlighted) -> None:
        index = event.index
        if index is None or not 0 <= index < len(self.rows):
            self._preview_of(None)
            return
        self._preview_of(self.rows[index])
        if index >= len(self.rows) - LOAD_MORE_MARGIN:
            self._more_rows()

    def _preview_of(self, row: Row | None) -> None:
        self.preview_row = row
        if row is None:
            self._draw_preview(None, [])
            return

        def work() -> Any:
            try:
                return self.browser.window(row)
            except BrowseError as exc:
                return exc

        self._preview.submit(work, lambda found: self._draw_preview(row, found))

    def _draw_preview(self, row: Row | None, found: Any) -> None:
        if row is not self.preview_row:
            return
        pane = self.query_one("#preview", RichLog)
        pane.clear()
        self.preview_messages = []
        self.preview_texts = []
        self.preview_hit = None
        head = browse_text.session_header(row.session) if row is not None else Text("")
        self.query_one("#preview-head", Static).update(head, layout=False)
        if row is None:
            return
        if isinstance(found, BrowseError):
            pane.write(Text("Error: " + render.visible(str(found), newlines=False)))
            return
        hit_id = row.hit["id"] if row.hit else None
        hit_line = None
        for msg in found:
            is_hit = msg.get("id") == hit_id
            text = browse_text.message_text(
                msg, expanded=self.expanded, is_hit=is_hit, pattern=self._pattern
            )
            if is_hit:
                hit_line = len(pane.lines)
                self.preview_hit = len(self.preview_messages)
            self.preview_messages.append(msg)
            self.preview_texts.append(text)
            pane.write(text)
            pane.write(Text(""))
        if not found:
            pane.write(Text("(no messages)", style="dim"))
        # The hit a third of the way down: the messages before it stay in view.
        third = pane.scrollable_content_region.height // 3
        top = 0 if hit_line is None else max(0, hit_line - third)
        pane.scroll_to(y=top, animate=False, immediate=True)

    # status

    def _draw_filters(self) -> None:
        self.query_one("#filters", Static).update(browse_text.filters_text(self.filters, self.view))

    def _draw_status(self) -> None:
        parts = browse_text.status_parts(
            self.results,
            count=self.count,
            counting=self.counting,
            changed=self.changed,
            busy=self.busy,
        )
        self.query_one("#status", FittedLine).update(parts)

    def _poll_changes(self) -> None:
        marker = self.browser.changed_marker()
        if marker != self._marker:
            self._marker = marker
            self.changed = True
            self._draw_status()

    # typing and keys

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "query" or event.value == self.query_text:
            return
        self.query_text = event.value
        self.keystroke_at = time.perf_counter()
        self._request()

    def current_row(self) -> Row | None:
        """Return the highlighted row, if any."""
        index = self.query_one("#list", HitList).cursor
        if index is None or not 0 <= index < len(self.rows):
            return None
        return self.rows[index]

    def action_move(self, step: int) -> None:
        """Move the cursor up or down the list."""
        listing = self.query_one("#list", HitList)
        if self.rows:
            listing.move_to((listing.cursor or 0) + step)

    def action_page(self, direction: int) -> None:
        """Move the cursor a page up or down."""
        listing = self.query_one("#list", HitList)
        rows_per_page = max(1, listing.scrollable_content_region.height // HitList.ROW_LINES)
        self.action_move(direction * rows_per_page)

    def help_entries(self) -> list[tuple[str, str]]:
        """Return the keys of this screen and what each does, as the help screen lists them."""
        prints = getattr(self.app, "prints", "id")
        return binding_help(self.BINDINGS, {"choose": CHOOSE_HELP.get(prints, "")})

    def action_help(self) -> None:
        """List every key and what it does."""
        self.app.push_screen(HelpScreen("Keys", self.help_entries()))

    def action_choose(self) -> None:
        """Leave, printing the highlighted session's id."""
        row = self.current_row()
        if row is None:
            self.app.bell()
            return
        self.app.exit(row.session_id)

    def action_escape(self) -> None:
        """Clear the query; with an empty query, leave without choosing."""
        box = self.query_one("#query", Input)
        if box.value:
            box.value = ""
        else:
            self.app.exit(None)

    def action_toggle_view(self) -> None:
        """Switch between one row per hit and one row per session."""
        self.view = browse_model.cycled(self.view, browse_model.VIEWS)
        self._draw_filters()
        row = self.current_row()
        self._request(keep=row.session_id if row else None)

    def action_cycle(self, which: str) -> None:
        """Change one filter to its next value."""
        f = self.filters
        first = self.initial_filters
        if which == "source":
            choices = [(), *((s,) for s in self._sources())]
            value = browse_model.cycled(
                f.sources, browse_model.with_initial(first.sources, choices)
            )
            self.filters = replace(f, sources=value)
        elif which == "role":
            choices = [(), *((r,) for r in browse_model.ROLES)]
            value = browse_model.cycled(f.roles, browse_model.with_initial(first.roles, choices))
            self.filters = replace(f, roles=value)
        elif which == "since":
            choices = browse_model.with_initial(first.since, browse_model.SINCE_CHOICES)
            self.filters = replace(f, since=browse_model.cycled(f.since, choices))
        else:
            self.filters = replace(f, scope=browse_model.cycled(f.scope, browse_model.SCOPES))
        self._draw_filters()
        self._request()

    def _sources(self) -> list[str]:
        try:
            return self.browser.sources()
        except BrowseError as exc:
            self.notify(render.visible(str(exc), newlines=False), severity="error", markup=False)
            return []

    def action_refresh(self) -> None:
        """Read the store again (new messages from a running gateway appear)."""
        self.changed = False
        self._marker = self.browser.changed_marker()
        row = self.current_row()
        self._request(keep=row.session_id if row else None)

    def action_expand(self) -> None:
        """Show tool calls and reasoning in full in the preview, or collapse them."""
        self.expanded = not self.expanded
        self._preview_of(self.current_row())

    def action_open(self) -> None:
        """Open the highlighted session's whole transcript."""
        row = self.current_row()
        if row is None:
            self.app.bell()
            return
        self.app.push_screen(
            TranscriptScreen(self.browser, row, expanded=self.expanded, pattern=self._pattern)
        )

    # edits: each is confirmed, then runs through the library in a worker

    def _naming(self, verb: str, row: Row, tail: str = "?") -> Text:
        text = Text(f"{verb} session ")
        text.append(browse_text.flat(row.session_id), style="bold")
        text.append(" (" + browse_text.session_label(row.session) + ")")
        text.append(tail)
        return text

    def _refused(self, row: Row) -> bool:
        """Say on the screen that a vaulted session is not changed here; True when refused."""
        notice = browse_text.vault_refusal(row)
        if notice is None:
            return False
        self.notices.append(notice)
        self.notify(notice, severity="warning", timeout=8, markup=False)
        return True

    def _run_edit(self, row: Row, work: Callable[[], Any], success: Callable[[Any], str]) -> None:
        self.busy = "waiting for the store…"
        self._draw_status()

        def attempt() -> Any:
            try:
                return work()
            except BrowseError as exc:
                return exc

        def done(outcome: Any) -> None:
            self.busy = ""
            if isinstance(outcome, BrowseError):
                notice = "Error: " + render.visible(str(outcome), newlines=False)
                self.notices.append(notice)
                self.notify(notice, severity="error", timeout=8, markup=False)
                self._draw_status()
                return
            notice = success(outcome)
            self.notices.append(notice)
            self.notify(notice, markup=False)  # stored titles are data, not markup
            self._marker = self.browser.changed_marker()  # our own write is no news
            self._request(keep=row.session_id)

        self._edit.submit(attempt, done)

    def action_rename(self) -> None:
        """Give the highlighted session a new title."""
        row = self.current_row()
        if row is None or self._refused(row):
            return
        current = row.session.get("title") or ""

        def answered(title: str | None) -> None:
            if title is None:
                return
            self._run_edit(
                row,
                lambda: self.browser.rename(row.session_id, title),
                lambda stored: (
                    f"Renamed to: {browse_text.flat(stored)}" if stored else "Title cleared."
                ),
            )

        question = self._naming("New title for", row, ":")
        self.app.push_screen(AskScreen(question, render.visible(current)), answered)

    def action_export(self) -> None:
        """Write the highlighted session to a new .jsonl or .md file."""
        row = self.current_row()
        if row is None:
            return
        safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in row.session_id)
        suggestion = str(Path.cwd() / f"{safe_name or 'session'}.jsonl")

        def answered(path: str | None) -> None:
            if not path:
                return
            self._run_edit(
                row,
                lambda: self.browser.export(row.session_id, path, row.vault),
                lambda done: f"Exported {done[1]} messages to {browse_text.flat(str(done[0]))}",
            )

        question = self._naming("Export", row, " to (.jsonl, or .md for Markdown):")
        self.app.push_screen(AskScreen(question, suggestion), answered)

    def action_pin(self) -> None:
        """Pin the highlighted session (prune keeps it), or unpin it."""
        row = self.current_row()
        if row is None or self._refused(row):
            return
        pinned = bool(row.session.get("pinned"))
        verb = "Unpin" if pinned else "Pin"

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_edit(
                    row,
                    lambda: self.browser.set_pinned(row.session_id, not pinned),
                    lambda ok: f"{verb}ned {browse_text.flat(row.session_id)}" if ok else "Gone.",
                )

        self.app.push_screen(ConfirmScreen(self._naming(verb, row)), answered)

    def action_archive(self) -> None:
        """Archive the highlighted session (hidden from listings), or unarchive it."""
        row = self.current_row()
        if row is None or self._refused(row):
            return
        archived = bool(row.session.get("archived"))
        verb = "Unarchive" if archived else "Archive"

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_edit(
                    row,
                    lambda: self.browser.set_archived(row.session_id, not archived),
                    lambda ok: f"{verb}d {browse_text.flat(row.session_id)}" if ok else "Gone.",
                )

        self.app.push_screen(ConfirmScreen(self._naming(verb, row)), answered)

    def action_delete(self) -> None:
        """Delete the highlighted session, exactly that id, after a confirmation naming it."""
        row = self.current_row()
        if row is None or self._refused(row):
            return
        msgs = row.session.get("message_count") or 0
        pinned = " It is PINNED." if row.session.get("pinned") else ""
        question = self._naming(
            "Delete", row, f" and its {msgs} messages?{pinned} This cannot be undone."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_edit(
                    row,
                    lambda: self.browser.delete(row.session_id),
                    lambda n: f"Deleted {browse_text.flat(row.session_id)} ({n} messages)",
                )

        self.app.push_screen(ConfirmScreen(question, danger=True), answered)


class BrowseApp(App[str | None]):
    """`hermes sessions browse`: returns the chosen session id, or None when quit."""

    TITLE = "hermes sessions browse"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+q,ctrl+c", "quit", "Quit", show=False, priority=True),
    ]
    CSS = """
    #searchbar { height: 1; }
    #prompt { width: auto; }
    #query { border: none; height: 1; padding: 0 1; width: 1fr; }
    #filters { height: auto; padding: 0 1; }
    #panes { height: 1fr; }
    #list { width: 1fr; height: 1fr; border: none; padding: 0; scrollbar-size-vertical: 1; }
    #side { width: 1fr; height: 1fr; border-left: solid $primary-darken-2; }
    #preview-head {
        height: 2; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis;
    }
    #preview {
        height: 1fr; padding: 0 0 0 1; scrollbar-size-vertical: 1; background: $surface;
    }
    .narrow #panes { layout: vertical; }
    .narrow #list { width: 1fr; height: 1fr; }
    .narrow #side {
        width: 1fr; height: 1fr; border-left: none; border-top: solid $primary-darken-2;
    }
    #status { height: 1; padding: 0 1; background: $panel; }
    .keys { height: 1; }
    #transcript { height: 1fr; padding: 0 0 0 1; }
    #transcript-head, #transcript-status { padding: 0 1; }
    #transcript-head { height: 2; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; }
    #transcript-status { height: 1; background: $panel; }
    ConfirmScreen, AskScreen, HelpScreen { align: center middle; }
    .dialog.help { width: 90%; max-width: 100; height: auto; max-height: 90%; padding: 0 1; }
    #help-keys { height: auto; margin-top: 1; }
    #help-more { height: 1; }
    .dialog {
        width: 80%; max-width: 90; height: auto; padding: 1 2;
        border: thick $primary; background: $surface;
    }
    .dialog .buttons { height: auto; margin-top: 1; }
    .dialog Button { margin-right: 2; }
    .dialog Input { margin-top: 1; }
    """

    def __init__(self, browser: Browser, *, initial: Results, prints: str = "id") -> None:
        super().__init__()
        self.browser = browser
        self.initial = initial
        self.prints = prints  # what Enter prints: "id", or "resume" (Hermes Agent's line)

    def get_default_screen(self) -> Screen[Any]:
        return BrowseScreen(self.browser, self.initial)
