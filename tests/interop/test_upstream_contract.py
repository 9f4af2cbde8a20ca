"""The upstream agent's own store tests: this package passes what r22 and r31 both pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from interop.releases import ReleaseUnavailable
from interop.upstream_suite import (
    ContractReport,
    SuiteUnavailable,
    run_contract,
    suite_root,
    totals_line,
    write_report,
)

REQUIRED_SCORE = 0.95
LISTED_FAILURES = 60  # the rest are in the report file


@pytest.fixture(scope="module")
def contract(tmp_path_factory: pytest.TempPathFactory) -> tuple[ContractReport, Path]:
    """The three runs of the upstream suite (made once), and where the report was written."""
    try:
        report = run_contract(tmp_path_factory.mktemp("upstream-suite"))
    except (SuiteUnavailable, ReleaseUnavailable) as exc:
        pytest.skip(str(exc))
    markdown = suite_root() / "report.md"
    write_report(report, markdown, markdown.with_suffix(".json"))
    return report, markdown


def test_ours_passes_the_stable_upstream_contract(contract: tuple[ContractReport, Path]) -> None:
    report, markdown = contract
    totals = report.totals()
    print(f"\nupstream contract report: {markdown}\n{totals_line(report)}")
    assert totals.judged > 0, "no upstream test passes on both r22 and r31: the harness is broken"
    failing = report.failing()
    listed = [f"  {c.nodeid}: {c.ours.status}: {c.ours.message}" for c in failing]
    more = len(listed) - LISTED_FAILURES
    assert totals.score >= REQUIRED_SCORE, "\n".join(
        [
            f"ours passes {totals.ours_pass}/{totals.judged} of the stable applicable upstream "
            f"tests ({100 * totals.score:.1f} %, need {100 * REQUIRED_SCORE:.0f} %); "
            f"full report: {markdown}",
            *listed[:LISTED_FAILURES],
            *([f"  … and {more} more"] if more > 0 else []),
        ]
    )
