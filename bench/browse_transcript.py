"""Time opening one big session's transcript in `hermes sessions browse` (F3 on a hit).

Usage: python bench/browse_transcript.py [--messages 4540] [--seed 7] [--reuse] [--repeat 5]
                                         [--size 120x40] [--terminal]

The store is the generator's single-session store (`generate.py --single-session`): one cli
session of N realistic messages (tool calls with JSON, reasoning, ~5 % CJK).

- in the app (Textual's pilot, headless): the transcript screen is opened on the session's last
  message that holds the generator's common term (a hit near the end: the worst case for
  scrolling to it), and timed from the push of the screen until its first screenful is drawn
  (the hit on it), until every message is read, and for End, PageUp and F6 once it is open.
  "read only" is the library reading the same transcript with no screen at all.
- --terminal (needs tmux): the real command on a tmux pane of --size, started on the selective
  term; F3 is sent and the pane polled until the transcript shows the hit and until the status
  line says every message is read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
for _p in (str(REPO_ROOT), str(BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import generate as gen  # noqa: E402


def _deep_hit(db: Path) -> tuple[Any, dict[str, Any]]:
    """Return the session's row for the screen and the hit: its last match of the common term."""
    from hermes_cli.apps.browse_model import Row
    from hermes_state.records import sessions
    from hermes_state.search import search
    from hermes_state.store.connection import open_store

    with open_store(db, read_only=True) as store:
        hits = search.search_messages(store, gen.COMMON_TERM, sort="newest", limit=1)
        hit = dict(hits[0])
        info = sessions.get_session(store, hit["session_id"]) or {}
    return Row(hit["session_id"], info, hit=hit), hit


async def _open_once(db: Path, size: tuple[int, int]) -> dict[str, float]:
    from hermes_cli.apps import browse_text
    from hermes_cli.apps.browse_app import BrowseApp
    from hermes_cli.apps.browse_model import Filters, Request
    from hermes_cli.apps.browse_store import Browser
    from hermes_cli.apps.browse_transcript import TranscriptScreen, TranscriptView
    from hermes_state.store.connection import open_store

    row, _hit = _deep_hit(db)
    store = open_store(db, read_only=True)
    browser = Browser(store)
    out: dict[str, float] = {}
    try:
        app = BrowseApp(browser, initial=browser.load(Request(0, "hits", "", Filters())))
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            pattern = browse_text.search_highlight(gen.COMMON_TERM)
            screen = TranscriptScreen(browser, row, expanded=False, pattern=pattern)
            started = time.perf_counter()
            await app.push_screen(screen)
            view = screen.query_one(TranscriptView)

            def hit_drawn() -> bool:
                shown = view.visible_range()
                return (
                    screen.first_shown_at is not None
                    and view.hit_index is not None
                    and shown is not None
                    and shown[0] <= view.hit_index <= shown[1]
                )

            while not (hit_drawn() and screen.loaded):
                await asyncio.sleep(0.001)
            await pilot.pause()  # the frame with the hit on it is painted
            out["hit_on_screen_s"] = time.perf_counter() - started
            out["all_read_s"] = (screen.loaded_at or started) - started
            out["messages"] = len(view.messages)
            out["wrapped_at_open"] = view.rendered
            for key, name in (("end", "end_s"), ("pageup", "pageup_s"), ("f6", "f6_s")):
                began = time.perf_counter()
                await pilot.press(key)  # returns once the app has handled it and is idle
                out[name] = time.perf_counter() - began
            out["wrapped_total"] = view.rendered
            await pilot.press("ctrl+q")
    finally:
        browser.close()
        store.close()
    return out


def read_only(db: Path) -> float:
    """Return seconds the library takes to read the transcript the screen reads (no screen)."""
    from hermes_cli.apps.browse_store import Browser
    from hermes_state.store.connection import open_store

    row, _hit = _deep_hit(db)
    with open_store(db, read_only=True) as store:
        browser = Browser(store)
        started = time.perf_counter()
        count = sum(1 for _ in browser.transcript(row.session_id))
        took = time.perf_counter() - started
        browser.close()
    assert count
    return took


def in_app(db: Path, repeat: int, size: tuple[int, int]) -> list[dict[str, float]]:
    """Open the transcript repeat times (after one untimed warm-up); return each run's times."""
    asyncio.run(_open_once(db, size))
    return [asyncio.run(_open_once(db, size)) for _ in range(repeat)]


def in_terminal(home: Path, repeat: int, size: tuple[int, int]) -> list[float]:
    """Return seconds from F3 until the transcript shows the hit, in a real tmux pane."""
    took = []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-tmux-") as tmp:
        command = (
            f"env HERMES_HOME={shlex.quote(str(home))} PYTHONPATH={shlex.quote(str(REPO_ROOT))}"
            f" {shlex.quote(sys.executable)} -m hermes_cli sessions browse {gen.SELECTIVE_TERM}"
        )

        for run in range(repeat + 1):
            # A server of its own each run: a new one on a socket whose server is still
            # shutting down fails ("server exited unexpectedly").
            base = ["tmux", "-S", str(Path(tmp) / f"sock-{run}"), "-f", "/dev/null"]

            def pane(base: list[str] = base) -> str:
                done = subprocess.run(
                    [*base, "capture-pane", "-p"], capture_output=True, text=True, check=False
                )
                return done.stdout

            # Started outside the checkout: `python -m` imports from the current directory first.
            start = [*base, "new-session", "-d", "-c", tmp, "-x", str(size[0]), "-y", str(size[1])]
            subprocess.run([*start, command], check=True)
            try:
                deadline = time.monotonic() + 60
                while " shown" not in pane():
                    assert time.monotonic() < deadline, pane()
                    time.sleep(0.05)
                time.sleep(1.0)  # the preview and the match count have settled
                started = time.perf_counter()
                subprocess.run([*base, "send-keys", "F3"], check=True)
                while True:
                    text = pane()
                    if not text.startswith("Search") and "← hit" in text:
                        break
                    assert time.perf_counter() - started < 60, text
                    time.sleep(0.005)
                took.append(time.perf_counter() - started)
            finally:
                subprocess.run([*base, "kill-server"], capture_output=True, check=False)
    return took[1:]  # the first run warms the caches


def _ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    """Generate (or reuse) the store and print the measurements."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=4540)
    p.add_argument("--seed", type=int, default=gen.DEFAULT_SEED)
    p.add_argument("--reuse", action="store_true")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--size", default="120x40", help="COLUMNSxLINES")
    p.add_argument("--terminal", action="store_true", help="also time the real command (tmux)")
    args = p.parse_args(argv)
    width, height = (int(n) for n in args.size.lower().split("x"))
    home = gen.default_out(args.messages, single_session=True)
    gen.ensure_store(home, args.messages, args.seed, single_session=True, reuse=args.reuse)
    db = home / "state.db"
    print(
        f"store: {db} (one session of {args.messages:,} messages); size {width}x{height}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    runs = in_app(db, args.repeat, (width, height))
    first = runs[0]
    print(
        f"in the app, hit near the end ({first['messages']:,.0f} messages, "
        f"{first['wrapped_at_open']:,.0f} wrapped to draw the first screen):"
    )
    for key, what in (
        ("hit_on_screen_s", "open to the hit on screen"),
        ("all_read_s", "open to every message read"),
        ("end_s", "End"),
        ("pageup_s", "PageUp"),
        ("f6_s", "F6 (expand)"),
    ):
        print(f"  {what}: {_ms([r[key] for r in runs])} over {len(runs)} runs")
    print(f"  messages wrapped after End, PageUp, F6: {runs[-1]['wrapped_total']:,.0f}")
    reads = [read_only(db) for _ in range(args.repeat)]
    print(f"read only (the library, no screen): {_ms(reads)}")
    if args.terminal:
        if shutil.which("tmux") is None:
            print("terminal: tmux is not installed")
        else:
            times = in_terminal(home, args.repeat, (width, height))
            print(f"real command, F3 to the hit on screen: {_ms(times)} over {len(times)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
