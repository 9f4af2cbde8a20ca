"""`hermes replicate`: stream the profile's stores to a replica with Litestream, push one
snapshot, or tell what a replica holds; and `hermes restore --from URL`, a store fetched back."""

from __future__ import annotations

import os
import time
from typing import Annotated, Any

import typer

from hermes_cli.rendering import render
from hermes_cli.shared.options import JSON_ONLY_HELP, command

EXAMPLES = [
    "hermes replicate --to file:///mnt/nas/hermes",
    "hermes replicate --to s3://my-bucket/hermes/laptop",
    "hermes replicate --to s3://hermes/laptop --endpoint http://127.0.0.1:9000",
    "hermes replicate --to sftp://me@nas/backups/hermes",
    "hermes replicate --to file:///mnt/nas/hermes --snapshot",
    "hermes replicate --to file:///mnt/nas/hermes --status --json",
    "hermes replicate --follow s3://my-bucket/hermes/desktop --as desktop",
]

EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        metavar="URL",
        help="An S3-compatible server for an s3:// target (MinIO, R2, a local one); "
        "credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.",
    ),
]


def register(root: Any) -> None:
    """Add `hermes replicate` to the app."""
    command(root, "replicate", examples=EXAMPLES)(replicate)


def replicate(
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="URL",
            help="Where the replica goes: file:///DIR, s3://BUCKET/PREFIX or "
            "sftp://USER@HOST/PATH. Each store goes under it by its path in the home "
            "(state.db, vault/<YYYY>.db; profiles/NAME/… with --all-profiles).",
        ),
    ] = None,
    endpoint: EndpointOption = None,
    all_profiles: Annotated[
        bool, typer.Option("--all-profiles", help="Replicate every profile's stores.")
    ] = False,
    snapshot: Annotated[
        bool,
        typer.Option(
            "--snapshot",
            help="Push one consistent snapshot and exit (for a timer): a private copy made "
            "with SQLite's backup API, never the live file; works on any journal mode.",
        ),
    ] = False,
    status: Annotated[
        bool,
        typer.Option(
            "--status", help="Tell what the replica holds (latest change, lag, snapshot)."
        ),
    ] = False,
    follow: Annotated[
        str | None,
        typer.Option(
            "--follow",
            metavar="URL",
            help="Keep a local read copy of another machine's replica (its state.db) under "
            "<home>/machines/NAME, 1-2 s behind, until stopped; `sessions search|list|show "
            "--machine NAME|all` read it.",
        ),
    ] = None,
    as_name: Annotated[
        str | None,
        typer.Option("--as", metavar="NAME", help="With --follow: the machine's name here."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_ONLY_HELP)] = False,
) -> None:
    """Stream this profile's store and its vault stores to a replica, until stopped.

    Runs Litestream in the foreground (so systemd, launchd or tmux can run it) until SIGINT or
    SIGTERM, which it forwards; the configuration is written for it under the home. A store
    must be in WAL mode: Litestream switches a store it replicates to WAL, so a store the agent
    keeps in DELETE mode is refused (nothing started, mode unchanged) and --snapshot pushes a
    consistent copy instead. Restore with `hermes restore --from URL [--at WHEN]`. Needs the
    replica extra: pip install 'hermes-state[replica]'.
    """
    from hermes_state.backups import replica as lib
    from hermes_state.store.home import get_hermes_home

    if (to is None) == (follow is None):
        raise typer.BadParameter("give --to URL (replicate here) or --follow URL --as NAME")
    if follow is not None:
        if as_name is None:
            raise typer.BadParameter("--follow needs --as NAME (what to call that machine)")
        if snapshot or status or all_profiles or as_json:
            raise typer.BadParameter("--follow takes only --as and --endpoint")
        _follow(follow, as_name, endpoint)
        return
    assert to is not None
    if as_name is not None:
        raise typer.BadParameter("--as goes with --follow")
    if snapshot and status:
        raise typer.BadParameter("--snapshot and --status: give one of them")
    if as_json and not (snapshot or status):
        raise typer.BadParameter("--json goes with --status or --snapshot")
    target = lib.parse_target(to, endpoint)
    home = get_hermes_home()
    stores = lib.stores_of(home, all_profiles=all_profiles)
    if status:
        _status(lib, home, target, stores, as_json)
        return
    if not stores:
        raise lib.ReplicaError(
            f"No store to replicate in {home}", hint="Nothing has been recorded here yet."
        )
    if snapshot:
        binary = lib.find_litestream()
        with render.progress("Pushing a snapshot (backup-API copy, then one sync)"):
            result = lib.push_snapshot(home, stores, target, binary)
        if as_json:
            render.emit_json({"url": target.url, **result.to_dict()})
            return
        render.echo(
            f"Pushed a snapshot of {render.plural(len(result.stores), 'store')} "
            f"({render.human_bytes(result.bytes)}) to {target.url}: copy "
            f"{result.copy_s:.2f} s, push {result.push_s:.2f} s."
        )
        return
    # Refuse before anything starts: the agent's journal mode is the agent's.
    streamed, snapshotted = lib.split_by_mode(stores)
    if not streamed:
        raise lib.ReplicaError(
            f"No store in WAL mode to stream in {home} (only vault stores)",
            hint="Push them with: hermes replicate --to URL --snapshot",
        )
    binary = lib.find_litestream()
    pusher = lib.SnapshotPusher(
        home,
        target,
        binary,
        find=lambda: [
            s
            for s in lib.stores_of(home, all_profiles=all_profiles)
            if lib.is_vault_store(s) and s.rel not in {w.rel for w in streamed}
        ],
    )
    if snapshotted:
        pushed = pusher.push_due()
        if pushed is not None:
            render.echo(
                f"Pushed snapshots of {', '.join(pushed.stores)} (vault stores stay in DELETE "
                "mode: each change is pushed as a snapshot).",
                err=True,
            )

    def push_changed_vault_stores() -> None:
        try:
            pushed = pusher.push_due()
        except lib.ReplicaError as exc:  # the next check tries again
            render.warn(f"vault snapshot not pushed: {exc}")
            return
        if pushed is not None:
            render.echo(f"Pushed snapshots of {', '.join(pushed.stores)}.", err=True)

    with lib.work_dir(home) as work:
        config = lib.write_config(work.path, [(s.path, s.rel) for s in streamed], target)
        names = ", ".join(s.rel for s in streamed)
        render.echo(f"Replicating {names} to {target.url} (Ctrl-C or SIGTERM stops).", err=True)
        done = lib.supervise(
            lib.replicate_argv(binary, config), tick=push_changed_vault_stores, tick_every_s=10.0
        )
    if done.clean:
        render.echo("Stopped.", err=True)
        return
    if done.signal is not None:
        raise lib.ReplicaError("litestream did not stop in time and was killed")
    raise lib.ReplicaError(
        f"litestream exited with code {done.returncode}",
        hint="Its log above says why; run `hermes replicate --to URL --status` to check the "
        "replica.",
    )


def _follow(url: str, name: str, endpoint: str | None) -> None:
    """Keep <home>/machines/NAME/state.db a read copy of another machine's replica."""
    from hermes_state.backups import replica as lib
    from hermes_state.store.home import get_hermes_home

    target = lib.parse_target(url, endpoint)
    home = get_hermes_home()
    lib.machine_home(home, name)  # a bad name is refused before anything is made
    binary = lib.find_litestream()
    with lib.follow_config(home, target, name) as (config, dest):
        render.echo(
            f"Following {target.store_url('state.db')} into {dest} (Ctrl-C or SIGTERM stops).",
            err=True,
        )
        done = lib.supervise(lib.follow_argv(binary, config, dest))
    if done.clean:
        render.echo("Stopped.", err=True)
        return
    raise lib.ReplicaError(
        f"litestream exited with code {done.returncode}",
        hint="Its log above says why; check the replica with: hermes replicate --to URL --status",
    )


def _status(lib: Any, home: Any, target: Any, stores: list[Any], as_json: bool) -> None:
    """Print what the replica holds for each store, loudly when a restore would fail."""
    if not stores:
        stores = [lib.ReplicatedStore("state.db", home / "state.db")]
    binary = lib.find_litestream()
    from hermes_state.backups.replica_status import replica_status

    found = replica_status(stores, target, binary, home)
    if as_json:
        render.emit_json({"url": target.url, "stores": [s.to_dict() for s in found]})
    else:
        now = time.time()
        for s in found:
            ago = render.relative_time(s.latest_time, now=now) if s.latest_time else None
            lag = None if s.lag_s is None else f"{s.lag_s:.1f} s ({s.behind} transactions)"
            render.key_values(
                [
                    ("replica", s.url),
                    ("snapshot", "yes" if s.snapshot else "NO"),
                    ("latest", None if s.latest_txid is None else f"txid {s.latest_txid:x}, {ago}"),
                    ("lag", lag or "- (not replicated from here)"),
                    ("holds", f"{s.files} files, {render.human_bytes(s.bytes)}"),
                ],
                title=s.rel,
            )
    bad = [s for s in found if s.problem()]
    for s in bad:
        render.warn(f"{s.url}: {s.problem()}.")
    if bad:
        render.echo(
            "Hint: restart `hermes replicate --to URL` (it writes a fresh snapshot when it "
            "starts), or push one now with --snapshot.",
            err=True,
        )
        raise typer.Exit(1)


def restore_from(
    url: str, *, at: str | None, endpoint: str | None, yes: bool, force: bool, as_json: bool
) -> None:
    """Fetch the profile's store from a replica (as of --at) and install it like a restore."""
    from hermes_cli.rendering import store_views
    from hermes_cli.shared.durations import DurationError, parse_cutoff
    from hermes_state.backups import replica as lib, restore as restore_lib
    from hermes_state.store.home import get_hermes_home

    moment = None
    if at is not None:
        try:
            moment = parse_cutoff(at)
        except DurationError:
            raise typer.BadParameter(
                f"--at {at!r}: give a date (2026-12-01T14:30), an age (2h) or a phrase "
                "(yesterday, 3 days ago)"
            ) from None
    target = lib.parse_target(url, endpoint)
    home = get_hermes_home()
    binary = lib.find_litestream()
    started = time.monotonic()
    with (
        render.progress("Fetching from the replica, then checking (integrity, search indexes)"),
        lib.fetched(home, target, binary, at=moment) as copy,
    ):
        fetch_s = time.monotonic() - started
        size = os.stat(copy).st_size
        prepared = restore_lib.prepare_restore(copy, home, force=force)
    # The plan names the scratch copy; say what it is a copy of.
    when = "its latest" if moment is None else lib.timestamp_arg(moment)
    prepared.plan.created_at = f"{when} from the replica {target.store_url('state.db')}"
    # The fetched copy is gone; the prepared restore holds its own checked copy.
    with prepared:
        store_views.restore_plan(prepared.plan, err=as_json)
        render.confirm("Replace it with the replica's?", assume_yes=yes)
        with render.progress("Restoring (copy of the current store, then the new one)"):
            result = prepared.apply()
    if as_json:
        render.emit_json(
            {
                **result.to_dict(),
                "plan": prepared.plan.to_dict(),
                "replica": target.store_url("state.db"),
                "at": moment,
                "fetch_s": round(fetch_s, 3),
                "fetched_bytes": size,
            }
        )
        return
    store_views.restore_result(result)
