"""The pieces of the upstream-suite harness that need no network: classifier, parser, score."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from interop.upstream_suite import (
    CaseResult,
    Outcome,
    build_report,
    foreign_imports,
    foreign_module,
    parse_junit,
    render_markdown,
    report_json,
    totals_line,
)

SOURCE = textwrap.dedent(
    """
    import pytest
    from hermes_state import SessionDB
    import cli  # module level: only imports inside a test's body count

    def test_store_only(tmp_path):
        import json, sqlite3
        from hermes_state import SCHEMA_VERSION
        import hermes_state.store.guard

    def test_uses_gateway():
        import os
        from gateway.routes import pick
        from cli import Shell

    class TestThings:
        def test_plain(self):
            import pytest as _pytest

        def test_agent(self):
            def helper():
                from agent.parts import make
            return helper

        class TestInner:
            async def test_relative(self):
                from .sibling import thing

    @pytest.mark.parametrize("n", [1, 2])
    def test_param(n):
        import run_agent

    @pytest.fixture
    def gateway_fixture():
        from tools import toolbox

    def test_takes_fixture(gateway_fixture, tmp_path):
        pass

    class TestHelpers:
        def _make(self):
            from cli import Shell

        def test_through_helper(self):
            self._make()

        def test_without_helper(self, db):
            pass
    """
)

PASS = Outcome("passed")
FAIL = Outcome("failed", "AssertionError: boom")


def test_foreign_imports_finds_non_store_modules_of_tests_helpers_and_fixtures() -> None:
    assert foreign_imports(SOURCE) == {
        "test_uses_gateway": "gateway",
        "TestThings::test_agent": "agent",
        "TestThings::TestInner::test_relative": ".sibling",
        "test_param": "run_agent",
        "gateway_fixture": "tools",
        "test_takes_fixture": "tools",
        "TestHelpers::_make": "cli",
        "TestHelpers::test_through_helper": "cli",
    }


def test_foreign_module_maps_parametrized_ids_to_their_function() -> None:
    foreign = {"test_x.py": foreign_imports(SOURCE)}
    assert foreign_module("test_x.py::test_param[1]", foreign) == "run_agent"
    assert foreign_module("test_x.py::TestThings::test_agent", foreign) == "agent"
    assert foreign_module("test_x.py::TestThings::test_plain", foreign) is None
    assert foreign_module("test_y.py::test_param[1]", foreign) is None


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="6">
<testcase classname="test_a.TestOne" name="test_ok" time="0.01"/>
<testcase classname="test_a.TestOne" name="test_bad[x-1]" time="0.01">
  <failure message="assert 1 == 2&#10;  where more">trace</failure></testcase>
<testcase classname="test_a" name="test_skip" time="0"><skipped message="no fts5"/></testcase>
<testcase classname="test_a.TestOne.TestNested" name="test_deep" time="0"/>
<testcase classname="test_a" name="test_teardown" time="0"/>
<testcase classname="test_a" name="test_teardown" time="0">
  <error message="failed on teardown with &quot;OSError&quot;">trace</error></testcase>
<testcase classname="" name="test_b" time="0">
  <error message="collection failure">ImportError while importing test module
Traceback:
E   ImportError: cannot import name 'X' from 'hermes_state'</error></testcase>
</testsuite></testsuites>
"""


def test_parse_junit_gives_node_ids_statuses_and_first_message_lines() -> None:
    assert parse_junit(JUNIT) == {
        "test_a.py::TestOne::test_ok": PASS,
        "test_a.py::TestOne::test_bad[x-1]": Outcome("failed", "assert 1 == 2"),
        "test_a.py::test_skip": Outcome("skipped", "no fts5"),
        "test_a.py::TestOne::TestNested::test_deep": PASS,
        "test_a.py::test_teardown": Outcome("error", 'failed on teardown with "OSError"'),
        "test_b.py": Outcome("error", "ImportError: cannot import name 'X' from 'hermes_state'"),
    }


def _report() -> tuple[dict[str, Outcome], ...]:
    r22 = {"f.py::T::a": PASS, "f.py::T::b": PASS, "f.py::T::c": PASS, "f.py::d": PASS}
    r31 = {"f.py::T::a": PASS, "f.py::T::b": PASS, "f.py::T::c": FAIL, "f.py::d": PASS}
    ours = {"f.py::T::a": PASS, "f.py::T::b": FAIL, "f.py::T::c": PASS}
    return r22, r31, ours


def test_stable_contract_is_what_passes_on_r22_and_r31_and_scores_applicable_ones() -> None:
    r22, r31, ours = _report()
    report = build_report(r22, r31, ours, {"f.py": {"d": "cli"}})
    totals = report.totals()
    assert (totals.tests, totals.r22_pass, totals.r31_pass) == (4, 4, 3)
    assert (totals.stable, totals.not_applicable, totals.judged) == (3, 1, 2)
    assert totals.ours_pass == 1 and totals.score == 0.5
    assert [c.nodeid for c in report.failing()] == ["f.py::T::b"]
    assert [(c.nodeid, c.foreign) for c in report.not_applicable()] == [("f.py::d", "cli")]
    assert [(g.name, g.tests, g.judged) for g in report.groups()] == [
        ("f.py::T", 3, 2),
        ("f.py", 1, 0),
    ]
    assert "ours 1/2 (50.0 %)" in totals_line(report)


def test_tests_of_a_module_that_failed_to_collect_take_its_error() -> None:
    r22, r31, _ = _report()
    broken = Outcome("error", "ImportError: cannot import name 'X'")
    report = build_report(r22, r31, {"f.py": broken}, {})
    assert {c.nodeid: c.ours for c in report.cases} == dict.fromkeys(r22, broken)
    assert report.totals().ours_pass == 0


def test_report_renders_as_markdown_and_json_from_the_same_data() -> None:
    r22, r31, ours = _report()
    report = build_report(r22, r31, ours, {"f.py": {"d": "cli"}})
    text = render_markdown(report)
    assert "| `f.py::T` | 3 | 3 | 2 | 2 | 0 | 1 / 2 |" in text
    assert "| **total** | 4 | 4 | 3 | 3 | 1 | 1 / 2 |" in text
    assert "- `f.py::T::b` — failed: AssertionError: boom" in text
    assert "- `f.py::d` — imports `cli`" in text
    data = report_json(report)
    assert data["totals"]["score"] == 0.5
    assert data["tests"][3] == {
        "nodeid": "f.py::d",
        "group": "f.py",
        "r22": {"status": "passed", "message": ""},
        "r31": {"status": "passed", "message": ""},
        "ours": {"status": "error", "message": "not reported by this run"},
        "stable": True,
        "not_applicable": "cli",
    }


def test_case_group_is_file_and_class_without_parameters() -> None:
    case = CaseResult("f.py::T::test_x[a::b]", PASS, PASS, PASS)
    assert case.group == "f.py::T"


TOLERANT = Path(__file__).parent / "interop" / "upstream_tolerant.py"


def test_tolerant_plugin_turns_missing_names_into_failing_placeholders(tmp_path: Path) -> None:
    pkg = tmp_path / "hermes_state"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "def __getattr__(name):\n"
        "    if name == 'lazy':\n"
        "        return 42\n"
        "    raise AttributeError(name)\n"
    )
    (pkg / "guard.py").write_text("REAL = True\n")
    code = textwrap.dedent(
        """
        import upstream_tolerant
        from hermes_state import lazy, guard, nothing_here
        assert lazy == 42 and guard.REAL
        for use in (lambda: nothing_here(), lambda: nothing_here.attr, lambda: nothing_here == 1):
            try:
                use()
            except AttributeError as exc:
                assert "nothing_here" in str(exc)
            else:
                raise SystemExit("placeholder did not fail")
        import hermes_state
        assert not hasattr(hermes_state, "__wrapped__")
        print("ok")
        """
    )
    env = {"PYTHONPATH": f"{tmp_path}:{TOLERANT.parent}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.stdout.strip() == "ok", done.stderr
