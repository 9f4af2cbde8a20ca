"""Recover's row-by-row salvage (the path a damaged store takes) on stores the real Hermes Agent
releases wrote: every row comes through, in the release's own layout, and the release keeps
working on the result (SPEC §19.7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_state.recover.recover import recover
from interop.harness import LEDGER, dump, lost_rows
from interop.releases import Release
from interop.test_coexistence import _agent_still_works


def test_release_opens_our_row_by_row_salvage_with_every_row(
    built: Path, release: Release, baseline: dict[str, Any], scratch: Path
) -> None:
    target = scratch / "salvaged.db"
    report = recover(built / "state.db", target, copy_whole=False)
    assert report.method == "salvage" and report.layout == "source"
    assert report.accepted, report.summary()
    assert report.verification.schema_version == release.schema
    assert report.search_indexes == "rebuilt" and not report.lost_and_found
    lost = lost_rows(dump(built / "state.db"), dump(target), skip_tables=LEDGER)
    assert not lost, "\n".join(lost)
    home = scratch / "salvaged-home"
    home.mkdir()
    (home / "state.db").write_bytes(target.read_bytes())  # closed: no process has it open
    _agent_still_works(release, home, baseline, "salvaged")
