"""The Textual screen of `hermes watch` (imported only when that command runs).

The widgets only draw: each refresh is `refresh()`
(hermes_state.reports.watch_snapshot.take_snapshot
through the command's read-only opener), run in a worker thread so the screen stays responsive
while the store is busy, and every part is a rich renderable built by `watch_views` from
escaped stored text. A refresh is skipped while the previous one still runs, so a slow store
never queues refreshes behind each other.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from hermes_cli.apps import watch_views

if TYPE_CHECKING:
    from hermes_state.reports.watch_snapshot import Snapshot

PARTS = ("summary", "sessions", "locks", "ledger", "gateways")


class WatchApp(App[None]):
    """`hermes watch`: the live view; returns when the person quits."""

    TITLE = "hermes watch"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q,ctrl+c,ctrl+q", "quit", "Quit", priority=True),
        Binding("p", "pause", "Pause"),
        Binding("r", "refresh_now", "Refresh"),
    ]
    CSS = """
    #header { height: 1; padding: 0 1; background: $panel; }
    #body { height: 1fr; padding: 0 1; }
    #body Static { margin-bottom: 1; }
    #keys { height: 1; padding: 0 1; background: $panel; color: $text-muted; }
    """

    def __init__(
        self, refresh: Callable[[], Snapshot], *, interval: float = 1.0, profile: str = ""
    ) -> None:
        super().__init__()
        self.take = refresh
        self.interval = interval
        self.profile = profile
        self.snapshot: Snapshot | None = None
        self.refreshes = 0  # snapshots drawn so far
        self.paused = False
        self._in_flight = False

    def compose(self) -> ComposeResult:
        yield Static("hermes watch · reading the store…", id="header")
        with VerticalScroll(id="body"):
            for name in PARTS:
                yield Static("", id=name)
        yield Static("q quit · p pause · r refresh now", id="keys")

    def on_mount(self) -> None:
        self._tick()
        self.set_interval(self.interval, self._tick)

    def on_resize(self, event: Any) -> None:
        if self.snapshot is not None:
            self._draw(self.snapshot)

    def _tick(self) -> None:
        """Start a refresh unless one is running or the view is paused."""
        if self.paused or self._in_flight:
            return
        self._in_flight = True

        def job() -> None:
            snap = self.take()
            with contextlib.suppress(RuntimeError):  # the app closed meanwhile
                self.call_from_thread(self._show, snap)

        self.run_worker(job, thread=True, group="refresh")

    def _show(self, snap: Snapshot) -> None:
        self._in_flight = False
        if not self.is_running:
            return
        self.snapshot = snap
        self.refreshes += 1
        self._draw(snap)

    def _draw(self, snap: Snapshot) -> None:
        """Draw every part of the snapshot for the current width."""
        width = max(20, self.size.width - 2)  # the body's padding
        now = time.time()
        self.query_one("#header", Static).update(
            watch_views.header_text(snap, self.profile, paused=self.paused)
        )
        parts = {
            "summary": watch_views.summary_text(snap),
            "sessions": watch_views.sessions_table(snap, width, now=now),
            "locks": watch_views.locks_text(snap),
            "ledger": watch_views.ledger_text(snap),
            "gateways": watch_views.gateways_text(snap, now=now),
        }
        for name, part in parts.items():
            self.query_one(f"#{name}", Static).update(part)

    def action_pause(self) -> None:
        """Stop or restart refreshing (the last snapshot stays on screen)."""
        self.paused = not self.paused
        if self.snapshot is not None:
            self._draw(self.snapshot)

    def action_refresh_now(self) -> None:
        """Refresh at once (also while paused)."""
        was, self.paused = self.paused, False
        self._tick()
        self.paused = was
