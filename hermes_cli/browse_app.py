"""The Textual screens of `hermes sessions browse` (imported only when that command runs).

The widgets only draw and dispatch: every read and edit is a method of `browse.Browser`, and
every row and message is a rich `Text` built by `hermes_cli.browse` from escaped stored text.
Reads run in worker threads, newest request first: a keystroke made while a search runs
replaces any search still waiting, so typing never queues stale work.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.geometry import Size
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Button, Input, RichLog, Static

from hermes_cli import browse, render
from hermes_cli.browse import BrowseError, Browser, Request, Results, Row

if TYPE_CHECKING:
    from hermes_state.search import MatchCount

NARROW_COLUMNS = 100  # below this the preview goes under the list instead of beside it
LOAD_MORE_MARGIN = 5  # fetch the next page when the cursor is this close to the end
CHANGE_POLL_S = 2.0
COUNT_DELAY_S = 0.25  # count matches once the results have stood this long (not mid-typing)


class _Lane:
    """Runs the newest job of one kind in a worker thread; jobs asked for meanwhile replace
    each other, and only the newest job's result is handed over."""

    def __init__(self, owner: Widget, name: str) -> None:
        self.owner = owner  # the screen whose widgets the results are drawn on
        self.app: App[Any] = owner.app
        self.name = name
        self.running = False
        self.pending: tuple[Callable[[], Any], Callable[[Any], Any]] | None = None

    def submit(self, work: Callable[[], Any], done: Callable[[Any], Any]) -> None:
        """Run work() in a thread, then done(result) on the app's loop (unless superseded)."""
        self.pending = (work, done)
        if not self.running:
            self._start()

    def _start(self) -> None:
        assert self.pending is not None
        work, done = self.pending
        self.pending = None
        self.running = True

        def job() -> None:
            result = work()
            with contextlib.suppress(RuntimeError):  # the app closed meanwhile
                self.app.call_from_thread(self._finish, done, result)  # type: ignore[arg-type]

        self.app.run_worker(job, thread=True, group=self.name)

    async def _finish(self, done: Callable[[Any], Any], result: Any) -> None:
        self.running = False
        if not (self.app.is_running and self.owner.is_attached):
            return  # the app is closing (its widgets are going): the result has no place
        if self.pending is not None:
            self._start()  # a newer job is waiting: this result is already stale
            return
        outcome = done(result)
        if hasattr(outcome, "__await__"):
            await outcome


# --- the list -------------------------------------------------------------------------------


class HitList(ScrollView, can_focus=False):
    """The hits or sessions, two lines a row; only the rows on screen are ever drawn (Textual's
    line API), so showing 50 or 5,000 rows costs the same."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"hitlist--cursor"}
    DEFAULT_CSS = """
    HitList > .hitlist--cursor { background: $accent 35%; text-style: bold; }
    """
    ROW_LINES = 2
    MARKER = "› "

    class Highlighted(Message):
        """The cursor moved to another row (index None: the list is empty)."""

        def __init__(self, index: int | None) -> None:
            super().__init__()
            self.index = index

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[Row] = []
        self.cursor: int | None = None
        self._strips: dict[tuple[int, int], tuple[Strip, Strip]] = {}
        self._now = time.time()

    def set_rows(self, rows: list[Row], cursor: int = 0) -> None:
        """Show these rows, with the cursor on one of them."""
        self.rows = list(rows)
        self._strips.clear()
        self._now = time.time()
        self.cursor = None
        self._resize()
        self.scroll_to(y=0, animate=False, immediate=True)
        self.move_to(cursor)

    def add_rows(self, rows: list[Row]) -> None:
        """Append a further page of rows."""
        self.rows.extend(rows)
        self._resize()

    def _resize(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.rows) * 2)
        self.refresh()

    def move_to(self, index: int | None) -> None:
        """Put the cursor on row index (clamped), keep it in view and announce it."""
        if not self.rows or index is None:
            changed = self.cursor is not None
            self.cursor = None
            if changed or not self.rows:
                self.post_message(self.Highlighted(None))
            self.refresh()
            return
        index = max(0, min(len(self.rows) - 1, index))
        if index == self.cursor:
            return
        self.cursor = index
        top = index * self.ROW_LINES
        height = self.scrollable_content_region.height
        if top < self.scroll_y:
            self.scroll_to(y=top, animate=False, immediate=True)
        elif height and top + self.ROW_LINES > self.scroll_y + height:
            self.scroll_to(y=top + self.ROW_LINES - height, animate=False, immediate=True)
        self.refresh()
        self.post_message(self.Highlighted(index))

    def on_resize(self, event: events.Resize) -> None:
        self._strips.clear()
        self._resize()

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is not None:
            self.move_to((offset.y + int(self.scroll_y)) // self.ROW_LINES)

    def drawn(self, index: int) -> str:
        """Return the text row index shows (both lines), as drawn at the current width."""
        width = self.scrollable_content_region.width
        return "\n".join(strip.text for strip in self._row(index, width))

    def _row(self, index: int, width: int) -> tuple[Strip, Strip]:
        key = (index, width)
        strips = self._strips.get(key)
        if strips is None:
            inner = max(1, width - len(self.MARKER))
            lines = browse.row_lines(self.rows[index], inner, now=self._now)
            console = self.app.console
            first, second = (
                Strip(list(text.render(console))).crop_extend(0, inner, None) for text in lines
            )
            strips = (first, second)
            self._strips[key] = strips
        return strips

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        line = int(self.scroll_y) + y
        index, part = divmod(line, self.ROW_LINES)
        if index >= len(self.rows):
            return Strip.blank(width, self.rich_style)
        strip = self._row(index, width)[part]
        mark = self.MARKER if (index == self.cursor and part == 0) else " " * len(self.MARKER)
        strip = Strip.join([Strip([Segment(mark)]), strip])
        if index == self.cursor:
            strip = strip.apply_style(self.get_component_rich_style("hitlist--cursor"))
        return strip.apply_style(self.rich_style)


# --- dialogs --------------------------------------------------------------------------------


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; y or the Yes button confirms, n, Esc or the No button declines."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: Text, *, danger: bool = False) -> None:
        super().__init__()
        self.question = question
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question")
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", id="yes", variant="error" if self.danger else "primary")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        """Close the dialog with the answer."""
        self.dismiss(yes)


class AskScreen(ModalScreen[str | None]):
    """Ask for one line of text (a title, a path); Enter accepts it, Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: Text, value: str = "") -> None:
        super().__init__()
        self.question = question
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question")
            yield Input(value=self.value, id="answer")
            yield Static(Text("Enter: OK · Esc: cancel", style="dim"))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        """Close the dialog without an answer."""
        self.dismiss(None)


# --- the full transcript --------------------------------------------------------------------


class TranscriptScreen(Screen[None]):
    """One session's whole transcript (up to TRANSCRIPT_MAX messages), scrolled to the hit."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "back", "Back"),
        Binding("f6", "expand", "Tool calls/reasoning"),
    ]

    def __init__(self, browser: Browser, row: Row, *, expanded: bool, pattern: Any) -> None:
        super().__init__()
        self.browser = browser
        self.row = row
        self.expanded = expanded
        self.pattern = pattern
        self.messages: list[dict[str, Any]] = []
        self.hit_line: int | None = None
        self.loaded = False
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(browse.session_header(self.row.session), id="transcript-head")
        yield RichLog(
            id="transcript",
            wrap=True,
            markup=False,
            highlight=False,
            auto_scroll=False,
            min_width=1,
        )
        yield Static(Text("loading…"), id="transcript-status")
        yield Static(_keys_line(self.BINDINGS), classes="keys")

    def on_mount(self) -> None:
        self.query_one(RichLog).focus()
        self.run_worker(self._load, thread=True, group="transcript")

    def _load(self) -> None:
        batch: list[dict[str, Any]] = []
        try:
            for msg in self.browser.transcript(self.row.session_id):
                batch.append(msg)
                if len(batch) >= browse.TRANSCRIPT_CHUNK:
                    self.app.call_from_thread(self._append, batch)
                    batch = []
        except BrowseError as exc:
            self.error = str(exc)
        self.app.call_from_thread(self._append, batch, True)

    def _append(self, batch: list[dict[str, Any]], last: bool = False) -> None:
        log = self.query_one(RichLog)
        hit_id = self.row.hit["id"] if self.row.hit else None
        for msg in batch:
            if msg.get("id") == hit_id:
                self.hit_line = len(log.lines)
            self.messages.append(msg)
            log.write(self._text(msg, msg.get("id") == hit_id))
            log.write(Text(""))
        if not last:
            return
        self.loaded = True
        if self.hit_line is not None:
            log.scroll_to(y=self.hit_line, animate=False)
        self._status()

    def _text(self, msg: dict[str, Any], is_hit: bool) -> Text:
        return browse.message_text(
            msg, expanded=self.expanded, is_hit=is_hit, pattern=self.pattern, limit=None
        )

    def _status(self) -> None:
        n = len(self.messages)
        text = Text(f"{n:,} message{'s' if n != 1 else ''}")
        if n >= browse.TRANSCRIPT_MAX:
            text.append(
                f" (the first {browse.TRANSCRIPT_MAX:,}; export the session to read them all)"
            )
        if self.error:
            text.append(" · Error: " + render.visible(self.error, newlines=False))

        self.query_one("#transcript-status", Static).update(text)

    def action_back(self) -> None:
        """Return to the list."""
        self.app.pop_screen()

    def action_expand(self) -> None:
        """Show tool calls and reasoning in full, or collapse them again."""
        if not self.loaded:
            return
        self.expanded = not self.expanded
        log = self.query_one(RichLog)
        log.clear()
        hit_id = self.row.hit["id"] if self.row.hit else None
        self.hit_line = None
        for msg in self.messages:
            if msg.get("id") == hit_id:
                self.hit_line = len(log.lines)
            log.write(self._text(msg, msg.get("id") == hit_id))
            log.write(Text(""))
        if self.hit_line is not None:
            log.scroll_to(y=self.hit_line, animate=False)


# --- the main screen ------------------------------------------------------------------------


class BrowseScreen(Screen[None]):
    """Search box, filter bar, hits or sessions, the preview, a status line and the keys."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "choose", "Choose", priority=True),
        Binding("escape", "escape", "Clear", priority=True),
        Binding("tab", "toggle_view", "View", priority=True),
        Binding("f3,ctrl+o", "open", "Open", priority=True),
        Binding("f2", "rename", "Rename", priority=True),
        Binding("f4", "export", "Export", priority=True),
        Binding("f7", "pin", "Pin", priority=True),
        Binding("f8", "delete", "Delete", priority=True),
        Binding("f9", "archive", "Archive", priority=True),
        Binding("f5,ctrl+l", "refresh", "Refresh", priority=True),
        Binding("f6", "expand", "Expand", priority=True),
        Binding("ctrl+q", "app.quit", "Quit", priority=True),
        Binding("up,ctrl+p", "move(-1)", "Up", show=False, priority=True),
        Binding("down,ctrl+n", "move(1)", "Down", show=False, priority=True),
        Binding("pageup", "page(-1)", "Page up", show=False, priority=True),
        Binding("pagedown", "page(1)", "Page down", show=False, priority=True),
        Binding("ctrl+s", "cycle('source')", "Source", show=False, priority=True),
        Binding("ctrl+r", "cycle('role')", "Role", show=False, priority=True),
        Binding("ctrl+t", "cycle('since')", "Since", show=False, priority=True),
        Binding("ctrl+g", "cycle('scope')", "Archived/pinned", show=False, priority=True),
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
        self._search = _Lane(self, "search")
        self._more = _Lane(self, "more")
        self._preview = _Lane(self, "preview")
        self._count = _Lane(self, "count")
        self._edit = _Lane(self, "edit")

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
        yield Static(Text("loading…"), id="status")
        yield Static(_keys_line(self.BINDINGS), classes="keys")

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
            browse.search_highlight(results.request.query) if results.request.searching else None
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
        request = browse.request_after(results)

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
        head = browse.session_header(row.session) if row is not None else Text("")
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
            text = browse.message_text(
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
        self.query_one("#filters", Static).update(browse.filters_text(self.filters, self.view))

    def _draw_status(self) -> None:
        text = browse.status_text(
            self.results,
            count=self.count,
            counting=self.counting,
            changed=self.changed,
            busy=self.busy,
        )
        self.query_one("#status", Static).update(text, layout=False)

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
        self.view = browse.cycled(self.view, browse.VIEWS)
        self._draw_filters()
        row = self.current_row()
        self._request(keep=row.session_id if row else None)

    def action_cycle(self, which: str) -> None:
        """Change one filter to its next value."""
        f = self.filters
        first = self.initial_filters
        if which == "source":
            choices = [(), *((s,) for s in self._sources())]
            value = browse.cycled(f.sources, browse.with_initial(first.sources, choices))
            self.filters = replace(f, sources=value)
        elif which == "role":
            choices = [(), *((r,) for r in browse.ROLES)]
            value = browse.cycled(f.roles, browse.with_initial(first.roles, choices))
            self.filters = replace(f, roles=value)
        elif which == "since":
            choices = browse.with_initial(first.since, browse.SINCE_CHOICES)
            self.filters = replace(f, since=browse.cycled(f.since, choices))
        else:
            self.filters = replace(f, scope=browse.cycled(f.scope, browse.SCOPES))
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
        text.append(browse.flat(row.session_id), style="bold")
        text.append(" (" + browse.session_label(row.session) + ")")
        text.append(tail)
        return text

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
        if row is None:
            return
        current = row.session.get("title") or ""

        def answered(title: str | None) -> None:
            if title is None:
                return
            self._run_edit(
                row,
                lambda: self.browser.rename(row.session_id, title),
                lambda stored: f"Renamed to: {browse.flat(stored)}" if stored else "Title cleared.",
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
                lambda: self.browser.export(row.session_id, path),
                lambda done: f"Exported {done[1]} messages to {browse.flat(str(done[0]))}",
            )

        question = self._naming("Export", row, " to (.jsonl, or .md for Markdown):")
        self.app.push_screen(AskScreen(question, suggestion), answered)

    def action_pin(self) -> None:
        """Pin the highlighted session (prune keeps it), or unpin it."""
        row = self.current_row()
        if row is None:
            return
        pinned = bool(row.session.get("pinned"))
        verb = "Unpin" if pinned else "Pin"

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_edit(
                    row,
                    lambda: self.browser.set_pinned(row.session_id, not pinned),
                    lambda ok: f"{verb}ned {browse.flat(row.session_id)}" if ok else "Gone.",
                )

        self.app.push_screen(ConfirmScreen(self._naming(verb, row)), answered)

    def action_archive(self) -> None:
        """Archive the highlighted session (hidden from listings), or unarchive it."""
        row = self.current_row()
        if row is None:
            return
        archived = bool(row.session.get("archived"))
        verb = "Unarchive" if archived else "Archive"

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_edit(
                    row,
                    lambda: self.browser.set_archived(row.session_id, not archived),
                    lambda ok: f"{verb}d {browse.flat(row.session_id)}" if ok else "Gone.",
                )

        self.app.push_screen(ConfirmScreen(self._naming(verb, row)), answered)

    def action_delete(self) -> None:
        """Delete the highlighted session, exactly that id, after a confirmation naming it."""
        row = self.current_row()
        if row is None:
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
                    lambda n: f"Deleted {browse.flat(row.session_id)} ({n} messages)",
                )

        self.app.push_screen(ConfirmScreen(question, danger=True), answered)


def _keys_line(bindings: list[BindingType]) -> Text:
    """Return the footer: each shown binding's first key and what it does."""
    text = Text()
    for binding in bindings:
        if not isinstance(binding, Binding) or not binding.show:
            continue
        key = binding.key.split(",")[0]
        label = {"enter": "Enter", "escape": "Esc", "tab": "Tab"}.get(key, key)
        label = label.replace("ctrl+", "^").upper() if label.startswith(("f", "ctrl+")) else label
        if text:
            text.append(" ")
        text.append(label, style="bold reverse")
        text.append(" " + binding.description)
    return text


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
    #transcript { height: 1fr; }
    #transcript-head, #transcript-status { padding: 0 1; }
    #transcript-status { height: 1; background: $panel; }
    ConfirmScreen, AskScreen { align: center middle; }
    .dialog {
        width: 80%; max-width: 90; height: auto; padding: 1 2;
        border: thick $primary; background: $surface;
    }
    .dialog .buttons { height: auto; margin-top: 1; }
    .dialog Button { margin-right: 2; }
    .dialog Input { margin-top: 1; }
    """

    def __init__(self, browser: Browser, *, initial: Results) -> None:
        super().__init__()
        self.browser = browser
        self.initial = initial

    def get_default_screen(self) -> Screen[Any]:
        return BrowseScreen(self.browser, self.initial)
