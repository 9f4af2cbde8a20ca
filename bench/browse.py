"""Time `hermes sessions browse`: keystroke-to-results through Textual's pilot, and start-up.

Usage: python bench/browse.py --messages 200000 [--seed 7] [--reuse] [--repeat 7]

- keystroke: the app runs headlessly (Textual's pilot, 120x40) on the generated store; queries
  are typed one character at a time, ~120 ms apart like a fast typist, and each keystroke is
  timed from just before the pilot posts the key until the list holds the results of the text
  typed so far (the app's own timestamp; the next frame paints them). The search runs in a
  worker thread; the preview and, once typing pauses, the match count follow it.
- startup: the real command in a pseudo-terminal (120x40), from process start until the first
  results are on the screen; then Ctrl+Q.
- --terminal (needs tmux): the real command in a tmux pane (80x24: the preview under the list),
  the same queries typed one character at a time with `tmux send-keys`; each keystroke is timed
  from just before send-keys until the pane (polled with capture-pane) shows its results: the
  first change of the list or the status line after the key. The screen is let settle (match
  count done) before every key, so that first change is the results' (the count comes 250 ms
  after them). A key whose screen did not change within a second is reported as unchanged.

bench/run.py runs the first two as the operations browse-keystroke and browse-startup.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import pty
import select
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
for _p in (str(REPO_ROOT), str(BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import generate as gen  # noqa: E402

# Typed one character at a time: the generator's common, selective, substring and CJK terms,
# a phrase and a prefix (every prefix of each is a query of its own, as when typing).
QUERIES = (
    gen.COMMON_TERM,
    gen.SELECTIVE_TERM,
    gen.SUBSTRING_QUERY,
    gen.CJK_QUERY,
    '"docker build"',
    "deploy*",
)
TYPING_GAP_S = 0.12
SIZE = (120, 40)
STARTUP_MARK = b"newest activity first"


async def _keystrokes(db: Path, queries: tuple[str, ...]) -> dict[str, Any]:
    from hermes_cli.apps.browse_app import BrowseApp
    from hermes_cli.apps.browse_model import Filters, Request
    from hermes_cli.apps.browse_store import Browser
    from hermes_state.store.connection import open_store

    store = open_store(db, read_only=True)
    browser = Browser(store)
    samples: list[float] = []
    per_query: dict[str, list[float]] = {}
    inside: list[float] = []
    try:
        app = BrowseApp(browser, initial=browser.load(Request(0, "hits", "", Filters())))
        async with app.run_test(size=SIZE) as pilot:
            screen = app.screen
            while screen.results is None:
                await pilot.pause(0.01)
            for query in queries:
                typed = ""
                for ch in query:
                    typed += ch
                    started = time.perf_counter()
                    await pilot.press(ch)  # returns once the app is idle again (not timed)
                    while screen.results.request.query != typed:
                        await asyncio.sleep(0.0005)
                    # From just before the key was posted to when the list took the results.
                    took = (screen.shown_at - started) * 1000
                    samples.append(took)
                    per_query.setdefault(query, []).append(took)
                    await asyncio.sleep(TYPING_GAP_S)
                inside += screen.latencies_ms
                screen.latencies_ms.clear()
                await pilot.press("escape")
                while screen.results.request.query != "":
                    await asyncio.sleep(0.001)
                await asyncio.sleep(0.3)
            await pilot.press("ctrl+q")
    finally:
        browser.close()
        store.close()
    return {"samples_ms": samples, "per_query_ms": per_query, "in_app_ms": inside}


def keystrokes(db: Path, queries: tuple[str, ...] = QUERIES) -> dict[str, Any]:
    """Type the queries into the app on db; return every keystroke-to-results time (ms)."""
    return asyncio.run(_keystrokes(db, queries))


def startup_once(home: Path, python: str = sys.executable, timeout: float = 30.0) -> float:
    """Start the real command on a 120x40 pseudo-terminal; return seconds until results show."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HERMES_HOME": str(home)}
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    env["TERM"] = "xterm-256color"
    started = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-m", "hermes_cli", "sessions", "browse"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    seen = b""
    took = None
    try:
        while time.perf_counter() - started < timeout:
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            seen += chunk
            if took is None and STARTUP_MARK in seen:
                took = time.perf_counter() - started
                os.write(master, b"\x11")  # Ctrl+Q
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    if took is None:
        raise RuntimeError(f"browse never showed its results: {seen[-400:]!r}")
    return took


def startup(home: Path, repeat: int, python: str = sys.executable) -> list[float]:
    """Return repeat start-up times (s) after one untimed warm-up run."""
    startup_once(home, python)
    return [startup_once(home, python) for _ in range(repeat)]


TERMINAL_SIZE = (80, 24)
SETTLED_S = 3.0  # the longest a screen may take to settle (the count has a one-second budget)
UNCHANGED_S = 1.0


def _screen_parts(text: str) -> tuple[str, tuple[str, ...], str]:
    """Split a captured 80x24 pane: the search line, the list (up to the preview's rule), the
    status line (the line above the keys bar)."""
    lines = text.rstrip("\n").split("\n")
    rule = next((i for i, line in enumerate(lines) if line.startswith("─" * 20)), len(lines))
    return lines[0], tuple(lines[1:rule]), lines[-2] if len(lines) >= 2 else ""


def _sched(pid: int) -> tuple[float, float]:
    """Return the process's time on a CPU and waiting for one (ms), summed over its threads
    (the search runs in a worker thread), from /proc/PID/task/*/schedstat."""
    on_cpu = waiting = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:
            continue  # a worker thread that just ended
        on_cpu += int(fields[0])
        waiting += int(fields[1])
    return on_cpu / 1e6, waiting / 1e6


def in_terminal(home: Path, queries: tuple[str, ...] = QUERIES) -> dict[str, Any]:
    """Type the queries into the real command in a tmux pane; return each key's time (ms), and
    what the command spent of it on a CPU and waiting for one (a loaded machine's share)."""
    samples: list[float] = []
    cpu_ms: list[float] = []
    queued_ms: list[float] = []
    per_query: dict[str, list[float]] = {}
    unchanged: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-tmux-") as tmp:
        base = ["tmux", "-S", str(Path(tmp) / "sock"), "-f", "/dev/null"]
        command = (
            f"env HERMES_HOME={shlex.quote(str(home))} PYTHONPATH={shlex.quote(str(REPO_ROOT))}"
            f" TERM=xterm-256color {shlex.quote(sys.executable)} -m hermes_cli sessions browse"
        )

        def pane() -> str:
            done = subprocess.run(
                [*base, "capture-pane", "-p"], capture_output=True, text=True, check=False
            )
            return done.stdout

        def settle() -> str:
            deadline = time.monotonic() + SETTLED_S
            while True:
                text = pane()
                status = _screen_parts(text)[2]
                if "counting" not in status and "loading" not in status:
                    return text
                if time.monotonic() > deadline:
                    return text
                time.sleep(0.02)

        # Started outside the checkout: `python -m` imports from the current directory first.
        w, h = TERMINAL_SIZE
        start = [*base, "new-session", "-d", "-c", tmp, "-x", str(w), "-y", str(h), command]
        subprocess.run(start, check=True)
        shown = subprocess.run(
            [*base, "display-message", "-p", "#{pane_pid}"], capture_output=True, text=True
        )
        pid = int(shown.stdout.strip())  # env execs python: the pane's process is the command
        try:
            deadline = time.monotonic() + 120
            while " shown" not in pane():
                assert time.monotonic() < deadline, pane()
                time.sleep(0.05)
            time.sleep(1.0)
            for query in queries:
                typed = ""
                for ch in query:
                    typed += ch
                    before = _screen_parts(settle())[1:]
                    time.sleep(0.05)
                    cpu0, queued0 = _sched(pid)
                    started = time.perf_counter()
                    subprocess.run([*base, "send-keys", "-l", ch], check=True)
                    while True:
                        search, *rest = _screen_parts(pane())
                        took = time.perf_counter() - started
                        if tuple(rest) != before and search.rstrip().endswith(typed):
                            cpu1, queued1 = _sched(pid)
                            cpu_ms.append(cpu1 - cpu0)
                            queued_ms.append(queued1 - queued0)
                            samples.append(took * 1000)
                            per_query.setdefault(query, []).append(took * 1000)
                            break
                        if took > UNCHANGED_S:
                            unchanged.append(typed)
                            break
                        time.sleep(0.002)
                subprocess.run([*base, "send-keys", "Escape"], check=True)
                deadline = time.monotonic() + 30
                while typed and _screen_parts(pane())[0].rstrip().endswith(typed):
                    assert time.monotonic() < deadline, pane()
                    time.sleep(0.02)
                time.sleep(0.5)
        finally:
            subprocess.run([*base, "kill-server"], capture_output=True, check=False)
    return {
        "samples_ms": samples,
        "per_query_ms": per_query,
        "unchanged": unchanged,
        "cpu_ms": cpu_ms,
        "queued_ms": queued_ms,
    }


def _print_terminal(home: Path, messages: int) -> None:
    if shutil.which("tmux") is None:
        print("terminal: tmux is not installed")
        return
    found = in_terminal(home)
    samples = found["samples_ms"]
    print(
        f"store: {home} ({messages:,} messages); load average {os.getloadavg()[0]:.2f}\n"
        f"terminal (tmux {TERMINAL_SIZE[0]}x{TERMINAL_SIZE[1]}), key to results on screen: "
        f"median {statistics.median(samples):.1f} ms, "
        f"p90 {statistics.quantiles(samples, n=10)[-1]:.1f} ms, max {max(samples):.1f} ms "
        f"over {len(samples)} keystrokes; screen unchanged after {len(found['unchanged'])}: "
        f"{found['unchanged']}"
    )
    print(
        f"  of which the command on a CPU: median {statistics.median(found['cpu_ms']):.1f} ms, "
        f"p90 {statistics.quantiles(found['cpu_ms'], n=10)[-1]:.1f} ms, max "
        f"{max(found['cpu_ms']):.1f} ms; waiting for a CPU: median "
        f"{statistics.median(found['queued_ms']):.1f} ms"
    )
    for query, times in found["per_query_ms"].items():
        print(f"  {query!r}: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms")


def main(argv: list[str] | None = None) -> int:
    """Generate (or reuse) the store and print both measurements."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, required=True)
    p.add_argument("--home", type=Path, help="HERMES_HOME of the store (default bench/out/store-N)")
    p.add_argument("--seed", type=int, default=gen.DEFAULT_SEED)
    p.add_argument("--reuse", action="store_true")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--terminal", action="store_true", help="also type into a tmux pane")
    p.add_argument("--terminal-only", action="store_true", help="only the tmux measurement")
    args = p.parse_args(argv)
    home = args.home or gen.default_out(args.messages)
    gen.ensure_store(home, args.messages, args.seed, reuse=args.reuse)
    if args.terminal or args.terminal_only:
        _print_terminal(home, args.messages)
        if args.terminal_only:
            return 0
    keys = keystrokes(home / "state.db")
    samples = keys["samples_ms"]
    print(f"store: {home} ({args.messages:,} messages); load average {os.getloadavg()[0]:.2f}")
    print(
        f"keystroke to results: median {statistics.median(samples):.1f} ms, "
        f"p90 {statistics.quantiles(samples, n=10)[-1]:.1f} ms, max {max(samples):.1f} ms "
        f"over {len(samples)} keystrokes"
    )
    for query, times in keys["per_query_ms"].items():
        print(f"  {query!r}: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms")
    inside = keys["in_app_ms"]
    if inside:
        inner = statistics.median(inside)
        print(f"  inside the app (input changed to list drawn): median {inner:.1f} ms")
    times = startup(home, args.repeat)
    print(
        f"start-up to first results: median {statistics.median(times) * 1000:.0f} ms "
        f"over {len(times)} runs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
