"""The upstream agent's own store tests, run against r22, r31 and this package, and judged.

The tests ship in the source distribution of ``hermes-agent==0.19.0``. They are fetched at test
time from the package registry, checked against a pinned sha256 and cached under
``cache_dir()/upstream-suite``; they are never copied into this repository. Each implementation
runs them in its own interpreter. The stable contract is what passes both on r22 (plain imports)
and on r31 (with ``upstream_tolerant``, so a name r31 dropped fails only the tests using it); a
test that imports an agent module outside the store is not applicable to a store library.

Run as a script from the repository root: ``.venv/bin/python tests/interop/upstream_suite.py
[--report PATH.md] [--json PATH.json]`` prints the markdown report.
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

if __name__ == "__main__":  # as a script: make `interop` importable, as tests/conftest.py does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interop.releases import BY_KEY, ReleaseUnavailable, cache_dir, python_for

UPSTREAM_REQUIREMENT = "hermes-agent==0.19.0"
SDIST_SHA256 = "ac986bede64a2785436676c0ea084ec586574f8cb00a9d047e095b435d3e21c0"
SUITE_FILES = (
    "test_hermes_state.py",
    "test_hermes_state_compression_locks.py",
    "test_empty_session_hygiene.py",
    "test_state_db_malformed_repair.py",
)
TOLERANT_PLUGIN = Path(__file__).with_name("upstream_tolerant.py")
# Top-level modules a test may import and still be about the store (besides the stdlib).
STORE_MODULES = frozenset({"hermes_state", "pytest"})
FETCH_TIMEOUT_S = 600
INSTALL_TIMEOUT_S = 600
SUITE_TIMEOUT_S = 900

Status = Literal["passed", "failed", "error", "skipped"]
# When a run reports a test twice (a teardown error after a pass), the worse outcome counts.
SEVERITY: dict[str, int] = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
JUNIT_TAGS: tuple[tuple[str, Status], ...] = (
    ("error", "error"),
    ("failure", "failed"),
    ("skipped", "skipped"),
)


class SuiteUnavailable(RuntimeError):
    """The upstream suite, or pytest for an interpreter, could not be had from the registry."""


class SuiteTampered(RuntimeError):
    """The downloaded source distribution is not the one pinned by its sha256."""


@dataclass(frozen=True)
class Outcome:
    """One test's result in one run, with the first line of its message."""

    status: Status
    message: str = ""

    @property
    def passed(self) -> bool:
        """Whether the test passed."""
        return self.status == "passed"


@dataclass(frozen=True)
class RunInfo:
    """How one implementation's run was made and how long it took."""

    label: str
    python: str
    tolerant: bool
    seconds: float


@dataclass(frozen=True)
class CaseResult:
    """One upstream test: its outcome per implementation and whether it applies to a store."""

    nodeid: str
    r22: Outcome
    r31: Outcome
    ours: Outcome
    foreign: str | None = None  # the non-store module the test imports (not applicable)

    @property
    def group(self) -> str:
        """Return ``file::Class`` for a method, ``file`` for a module-level test."""
        return self.nodeid.split("[", 1)[0].rsplit("::", 1)[0]

    @property
    def stable(self) -> bool:
        """Whether the test is in the stable contract (passes on r22 and on r31)."""
        return self.r22.passed and self.r31.passed

    @property
    def applicable(self) -> bool:
        """Whether the test is about the store alone."""
        return self.foreign is None


@dataclass(frozen=True)
class Totals:
    """Counts of one group of tests (or of all of them)."""

    name: str
    tests: int
    r22_pass: int
    r31_pass: int
    stable: int
    not_applicable: int  # of the stable tests
    ours_pass: int  # of the stable applicable tests

    @property
    def judged(self) -> int:
        """Return how many stable applicable tests the score is taken over."""
        return self.stable - self.not_applicable

    @property
    def score(self) -> float:
        """Return the share of stable applicable tests that pass on ours (0 when none)."""
        return self.ours_pass / self.judged if self.judged else 0.0


def totals_of(name: str, cases: Iterable[CaseResult]) -> Totals:
    """Count the cases."""
    items = list(cases)
    stable = [c for c in items if c.stable]
    judged = [c for c in stable if c.applicable]
    return Totals(
        name=name,
        tests=len(items),
        r22_pass=sum(c.r22.passed for c in items),
        r31_pass=sum(c.r31.passed for c in items),
        stable=len(stable),
        not_applicable=len(stable) - len(judged),
        ours_pass=sum(c.ours.passed for c in judged),
    )


@dataclass(frozen=True)
class ContractReport:
    """The three runs of the upstream suite, test by test."""

    cases: tuple[CaseResult, ...]
    runs: tuple[RunInfo, ...] = ()

    def groups(self) -> list[Totals]:
        """Return the totals of each ``file::Class`` (or ``file``), in the suite's order."""
        by_group: dict[str, list[CaseResult]] = {}
        for case in self.cases:
            by_group.setdefault(case.group, []).append(case)
        return [totals_of(name, cases) for name, cases in by_group.items()]

    def totals(self) -> Totals:
        """Return the totals over every test."""
        return totals_of("total", self.cases)

    def failing(self) -> list[CaseResult]:
        """Return the stable applicable tests that do not pass on ours."""
        return [c for c in self.cases if c.stable and c.applicable and not c.ours.passed]

    def not_applicable(self) -> list[CaseResult]:
        """Return the tests that import an agent module outside the store."""
        return [c for c in self.cases if not c.applicable]


# --- fetching the suite ---------------------------------------------------------------------


def suite_root() -> Path:
    """Return the cache directory of this harness."""
    return cache_dir() / "upstream-suite"


def suite_dir() -> Path:
    """Return where the four extracted test files are kept."""
    return suite_root() / UPSTREAM_REQUIREMENT.replace("==", "-")


def sha256_of(data: bytes) -> str:
    """Return the hex sha256 of data."""
    return hashlib.sha256(data).hexdigest()


def _cached(directory: Path) -> bool:
    manifest = directory / "manifest.json"
    if not manifest.is_file():
        return False
    try:
        recorded = json.loads(manifest.read_text())
    except ValueError:
        return False
    if recorded.get("sdist_sha256") != SDIST_SHA256:
        return False
    files = recorded.get("files", {})
    # The files are re-hashed too: a cache edited by hand must not pass for upstream's tests.
    return all(
        (directory / name).is_file()
        and files.get(name) == sha256_of((directory / name).read_bytes())
        for name in SUITE_FILES
    )


def _pip_reason(done: subprocess.CompletedProcess[str]) -> str:
    lines = (done.stderr or done.stdout).strip().splitlines()
    # pip warns about every configured index it skips; the reason is in what follows.
    return " ".join([ln for ln in lines if not ln.startswith("WARNING:")][-3:] or lines[-3:])


def _download_sdist(dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--disable-pip-version-check",
        "--no-deps",
        "--no-binary",
        ":all:",
        UPSTREAM_REQUIREMENT,
        "-d",
        str(dest),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SuiteUnavailable(f"{UPSTREAM_REQUIREMENT}: {exc}") from exc
    if done.returncode != 0:
        tail = _pip_reason(done)
        raise SuiteUnavailable(
            f"cannot download the sdist of {UPSTREAM_REQUIREMENT} from the package registry: {tail}"
        )
    found = sorted(dest.glob("*.tar.gz"))
    if len(found) != 1:
        raise SuiteUnavailable(f"pip download left {[p.name for p in found]} in {dest}")
    return found[0]


def extract_suite(sdist: Path, directory: Path) -> dict[str, str]:
    """Write only the suite's files of the sdist into directory; return their sha256s."""
    wanted: dict[str, bytes] = {}
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts
            # Only <top>/tests/<file>: the sdist holds other tests/ dirs (e.g. of skills).
            if len(parts) == 3 and parts[1] == "tests" and parts[2] in SUITE_FILES:
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is not None:
                    wanted[parts[2]] = handle.read()
    missing = [name for name in SUITE_FILES if name not in wanted]
    if missing:
        raise RuntimeError(f"{sdist.name} has no tests/{', tests/'.join(missing)}")
    directory.mkdir(parents=True, exist_ok=True)
    for name in SUITE_FILES:
        (directory / name).write_bytes(wanted[name])
    return {name: sha256_of(wanted[name]) for name in SUITE_FILES}


def fetch_suite() -> Path:
    """Return the directory of the verified upstream test files, fetching them on first use."""
    root = suite_root()
    root.mkdir(parents=True, exist_ok=True)
    directory = suite_dir()
    with open(root / "fetch.lock", "w") as lock:  # an ordinary lock file of the harness
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _cached(directory):
            return directory
        shutil.rmtree(directory, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=root, prefix="download-") as tmp:
            sdist = _download_sdist(Path(tmp))
            digest = sha256_of(sdist.read_bytes())
            if digest != SDIST_SHA256:
                raise SuiteTampered(
                    f"{sdist.name} has sha256 {digest}, expected {SDIST_SHA256}: not the pinned "
                    f"{UPSTREAM_REQUIREMENT}"
                )
            files = extract_suite(sdist, directory)
        # Written last, so an interrupted fetch is redone instead of reused.
        manifest = {"requirement": UPSTREAM_REQUIREMENT, "sdist_sha256": digest, "files": files}
        (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return directory


def ensure_pytest(python: Path) -> None:
    """Make sure the interpreter can run pytest, installing it from the registry if not."""
    probe = [str(python), "-m", "pytest", "--version"]
    if subprocess.run(probe, capture_output=True, timeout=120).returncode == 0:
        return
    root = suite_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "pytest-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if subprocess.run(probe, capture_output=True, timeout=120).returncode == 0:
            return
        cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "pytest"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SuiteUnavailable(f"pytest for {python}: {exc}") from exc
        if done.returncode != 0:
            tail = _pip_reason(done)
            raise SuiteUnavailable(f"cannot install pytest into {python}: {tail}")


# --- running it -----------------------------------------------------------------------------


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _message(element: ET.Element) -> str:
    message = _first_line(element.get("message"))
    if message and message != "collection failure":
        return message
    # A collection failure's message attribute says only that; its text holds the cause.
    for line in (element.text or "").splitlines():
        if line.startswith("E "):
            return line[1:].strip()
    return message or _first_line(element.text)


def parse_junit(xml_text: str) -> dict[str, Outcome]:
    """Map each test's node id (``file.py::Class::name[param]``) to its outcome.

    A module that failed to collect appears under its file name alone (``file.py``). The suite
    runs from one flat directory, so the first dotted part of a class name is the module.
    """
    results: dict[str, Outcome] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        classname = case.get("classname") or ""
        name = case.get("name") or ""
        if classname:
            module, *classes = classname.split(".")
            nodeid = "::".join([f"{module}.py", *classes, name])
        else:
            nodeid = name.replace(".", "/") + ".py"
        outcome = Outcome("passed")
        for tag, status in JUNIT_TAGS:
            element = case.find(tag)
            if element is not None:
                outcome = Outcome(status, _message(element))
                break
        seen = results.get(nodeid)
        if seen is None or SEVERITY[outcome.status] > SEVERITY[seen.status]:
            results[nodeid] = outcome
    return results


def suite_env(home: Path, plugin_dir: Path | None) -> dict[str, str]:
    """Environment for a suite run: nothing of the caller's store, home or test isolation."""
    # Built from scratch: a caller under our own pytest plugin exports HERMES_HOME and
    # HERMES_TEST_ISOLATION, which would change how the implementation under test behaves.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if "TMPDIR" in os.environ:
        env["TMPDIR"] = os.environ["TMPDIR"]
    if plugin_dir is not None:
        env["PYTHONPATH"] = str(plugin_dir)
    return env


def run_suite(python: Path | str, *, tolerant: bool, workdir: Path) -> dict[str, Outcome]:
    """Run the upstream suite under the interpreter; return each test's outcome by node id."""
    source = fetch_suite()
    ensure_pytest(Path(python))
    workdir.mkdir(parents=True, exist_ok=True)
    run = Path(tempfile.mkdtemp(prefix="run-", dir=workdir))
    tests = run / "tests"
    tests.mkdir()
    for name in SUITE_FILES:
        shutil.copyfile(source / name, tests / name)
    # An empty ini pins the rootdir here, so no configuration of an ancestor directory applies.
    (tests / "pytest.ini").write_text("[pytest]\n")
    home = run / "home"
    home.mkdir()
    plugin_dir: Path | None = None
    if tolerant:
        # A directory of its own: tests/interop on PYTHONPATH would expose its other modules.
        plugin_dir = run / "plugins"
        plugin_dir.mkdir()
        shutil.copyfile(TOLERANT_PLUGIN, plugin_dir / TOLERANT_PLUGIN.name)
    junit = run / "junit.xml"
    cmd = [
        str(python),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        # Otherwise one module that fails to import stops the whole run.
        "--continue-on-collection-errors",
        f"--junitxml={junit}",
        f"--basetemp={run / 'tmp'}",
        *(["-p", TOLERANT_PLUGIN.stem] if tolerant else []),
        *SUITE_FILES,
    ]
    try:
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            cwd=str(tests),
            env=suite_env(home, plugin_dir),
            timeout=SUITE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(
            f"the upstream suite under {python} ran over {SUITE_TIMEOUT_S} s"
        ) from exc
    if not junit.is_file():
        raise RuntimeError(
            f"the upstream suite under {python} wrote no report (exit {done.returncode}):\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    results = parse_junit(junit.read_text(encoding="utf-8"))
    if not results:
        raise RuntimeError(
            f"the upstream suite under {python} ran no test (exit {done.returncode}):\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return results


# --- judging it -----------------------------------------------------------------------------


def _import_roots(function: ast.AST) -> list[str]:
    nodes = [n for n in ast.walk(function) if isinstance(n, ast.Import | ast.ImportFrom)]
    roots: list[str] = []
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(node, ast.Import):
            roots.extend(alias.name.split(".")[0] for alias in node.names)
        elif node.level:
            roots.append("." * node.level + (node.module or ""))  # relative: never the store
        else:
            roots.append((node.module or "").split(".")[0])
    return roots


def is_store_module(root: str) -> bool:
    """Whether a top-level module name is the store, pytest or the standard library."""
    return root in STORE_MODULES or root in sys.stdlib_module_names


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _is_fixture(function: Function) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "fixture":
            return True
    return False


def _callees(key: str, function: Function, functions: Mapping[str, Function]) -> list[str]:
    """Return the same-file helpers and fixtures the function uses, in source order."""
    scope = key.rsplit("::", 1)[0] + "::" if "::" in key else ""
    found: list[str] = []
    for arg in function.args.args + function.args.kwonlyargs:
        for candidate in (scope + arg.arg, arg.arg):
            if candidate in functions and _is_fixture(functions[candidate]):
                found.append(candidate)
                break
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        call = node.func
        if isinstance(call, ast.Name) and call.id in functions:
            found.append(call.id)
        elif (
            isinstance(call, ast.Attribute)
            and isinstance(call.value, ast.Name)
            and call.value.id in ("self", "cls")
            and scope + call.attr in functions
        ):
            found.append(scope + call.attr)
    return found


def foreign_imports(source: str) -> dict[str, str]:
    """Map each function (``Class::name`` or ``name``) importing a non-store module to it.

    Imports inside the function's body count, and those of the same-file helpers it calls
    (``self._helper()``, ``helper()``) and fixtures it takes, transitively; the first such
    module, the function's own imports first, is the one recorded.
    """
    functions: dict[str, Function] = {}

    def visit(body: list[ast.stmt], prefix: tuple[str, ...]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, (*prefix, node.name))
            elif isinstance(node, Function):
                functions["::".join((*prefix, node.name))] = node

    visit(ast.parse(source).body, ())
    found: dict[str, str] = {}
    for key in functions:
        # Upstream reaches the agent through helpers too (a class's `_make_cli()` imports `cli`).
        seen, queue = {key}, [key]
        while queue:
            current = queue.pop(0)
            roots = [r for r in _import_roots(functions[current]) if not is_store_module(r)]
            if roots:
                found[key] = roots[0]
                break
            for callee in _callees(current, functions[current], functions):
                if callee not in seen:
                    seen.add(callee)
                    queue.append(callee)
    return found


def foreign_module(nodeid: str, foreign: Mapping[str, Mapping[str, str]]) -> str | None:
    """Return the non-store module a test imports, given ``foreign_imports`` per file."""
    path, _, function = nodeid.split("[", 1)[0].partition("::")
    return foreign.get(path, {}).get(function)


def _outcome(results: Mapping[str, Outcome], nodeid: str) -> Outcome:
    if nodeid in results:
        return results[nodeid]
    # Not reported: its module failed to collect (that error is its outcome), or it vanished.
    module = results.get(nodeid.split("::", 1)[0])
    return module if module is not None else Outcome("error", "not reported by this run")


def build_report(
    r22: Mapping[str, Outcome],
    r31: Mapping[str, Outcome],
    ours: Mapping[str, Outcome],
    foreign: Mapping[str, Mapping[str, str]],
    runs: Iterable[RunInfo] = (),
) -> ContractReport:
    """Combine three runs' outcomes and the applicability of each test into the report."""
    nodeids: dict[str, None] = {}  # ordered set: the suite's order, r22 first
    for results in (r22, r31, ours):
        nodeids.update((n, None) for n in results if "::" in n)
    cases = tuple(
        CaseResult(
            nodeid=n,
            r22=_outcome(r22, n),
            r31=_outcome(r31, n),
            ours=_outcome(ours, n),
            foreign=foreign_module(n, foreign),
        )
        for n in nodeids
    )
    return ContractReport(cases=cases, runs=tuple(runs))


def run_contract(workdir: Path) -> ContractReport:
    """Run the upstream suite on r22 (plain), r31 (tolerant) and ours (plain); judge it."""
    source = fetch_suite()
    foreign = {name: foreign_imports((source / name).read_text()) for name in SUITE_FILES}
    plan: list[tuple[str, Path | str, bool]] = [
        ("r22", python_for(BY_KEY["r22"]), False),
        ("r31", python_for(BY_KEY["r31"]), True),
        ("ours", sys.executable, False),
    ]
    outcomes: dict[str, dict[str, Outcome]] = {}
    runs: list[RunInfo] = []
    for label, python, tolerant in plan:  # one after another: some tests are timing-sensitive
        start = time.monotonic()
        outcomes[label] = run_suite(python, tolerant=tolerant, workdir=workdir / label)
        runs.append(RunInfo(label, str(python), tolerant, round(time.monotonic() - start, 1)))
    return build_report(outcomes["r22"], outcomes["r31"], outcomes["ours"], foreign, runs)


# --- rendering it ---------------------------------------------------------------------------


def _percent(totals: Totals) -> str:
    return f"{100 * totals.score:.1f} %"


def totals_line(report: ContractReport) -> str:
    """Return the one-line summary of the report's totals."""
    t = report.totals()
    return (
        f"tests {t.tests} | r22 pass {t.r22_pass} | r31 pass {t.r31_pass} | stable {t.stable} | "
        f"not applicable {t.not_applicable} | ours {t.ours_pass}/{t.judged} ({_percent(t)})"
    )


def _row(t: Totals, *, bold: bool = False) -> str:
    name = f"**{t.name}**" if bold else f"`{t.name}`"
    cells = [name, t.tests, t.r22_pass, t.r31_pass, t.stable, t.not_applicable]
    ours = f"{t.ours_pass} / {t.judged}"
    return "| " + " | ".join(str(c) for c in [*cells, ours]) + " |"


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_markdown(report: ContractReport) -> str:
    """Render the report as markdown: totals per class, failing tests, non-applicable tests."""
    t = report.totals()
    r22, r31 = BY_KEY["r22"], BY_KEY["r31"]
    lines = [
        f"## The upstream store tests of `{UPSTREAM_REQUIREMENT}`",
        "",
        f"Files: {', '.join(f'`tests/{n}`' for n in SUITE_FILES)} "
        f"(sdist sha256 `{SDIST_SHA256[:16]}…`).",
        f"Runs: r22 = `{r22.requirement}` (plain imports), r31 = `{r31.requirement}` "
        "(tolerant imports: a missing name fails only the tests using it), "
        "ours = this checkout (plain imports).",
        "Stable contract: the tests passing on r22 and on r31. Not applicable: tests importing "
        "an agent module outside the store.",
        "",
        f"**Score: ours passes {t.ours_pass} of {t.judged} applicable stable tests "
        f"({_percent(t)}).**",
        "",
        "| tests of | tests | r22 pass | r31 pass | stable | not applicable (of stable) "
        "| ours pass (of stable applicable) |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(_row(g) for g in report.groups()),
        _row(t, bold=True),
        "",
    ]
    if report.runs:
        timing = ", ".join(f"{r.label} {r.seconds:.1f} s" for r in report.runs)
        lines += [f"Run times: {timing}.", ""]
    failing = report.failing()
    lines += [f"### Stable applicable tests failing on ours ({len(failing)})", ""]
    lines += [f"- `{c.nodeid}` — {c.ours.status}: {_clip(c.ours.message)}" for c in failing]
    lines += ["" if failing else "None.", ""]
    na = report.not_applicable()
    lines += [f"### Not applicable ({len(na)})", ""]
    lines += [
        f"- `{c.nodeid}` — imports `{c.foreign}`" + ("" if c.stable else " (not stable)")
        for c in na
    ]
    lines += [] if na else ["None."]
    return "\n".join(lines).rstrip() + "\n"


def _outcome_json(outcome: Outcome) -> dict[str, str]:
    return {"status": outcome.status, "message": outcome.message}


def report_json(report: ContractReport) -> dict[str, Any]:
    """Return the report as JSON-ready data."""
    t = report.totals()

    def counts(x: Totals) -> dict[str, Any]:
        return {
            "name": x.name,
            "tests": x.tests,
            "r22_pass": x.r22_pass,
            "r31_pass": x.r31_pass,
            "stable": x.stable,
            "not_applicable": x.not_applicable,
            "judged": x.judged,
            "ours_pass": x.ours_pass,
            "score": round(x.score, 4),
        }

    return {
        "requirement": UPSTREAM_REQUIREMENT,
        "sdist_sha256": SDIST_SHA256,
        "files": list(SUITE_FILES),
        "runs": [
            {"label": r.label, "python": r.python, "tolerant": r.tolerant, "seconds": r.seconds}
            for r in report.runs
        ],
        "totals": counts(t),
        "groups": [counts(g) for g in report.groups()],
        "tests": [
            {
                "nodeid": c.nodeid,
                "group": c.group,
                "r22": _outcome_json(c.r22),
                "r31": _outcome_json(c.r31),
                "ours": _outcome_json(c.ours),
                "stable": c.stable,
                "not_applicable": c.foreign,
            }
            for c in report.cases
        ],
    }


def write_report(report: ContractReport, markdown: Path, json_path: Path) -> None:
    """Write the markdown and JSON renderings of the report."""
    markdown.parent.mkdir(parents=True, exist_ok=True)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    markdown.write_text(render_markdown(report), encoding="utf-8")
    json_path.write_text(json.dumps(report_json(report), indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Run the three suites, print the markdown report and optionally write both renderings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--report", type=Path, help="write the markdown report here")
    parser.add_argument("--json", type=Path, help="write the JSON report here")
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="upstream-suite-") as tmp:
            report = run_contract(Path(tmp))
    except (SuiteUnavailable, ReleaseUnavailable) as exc:
        print(f"unavailable: {exc}", file=sys.stderr)
        return 2
    text = render_markdown(report)
    print(text, end="")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text, encoding="utf-8")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report_json(report), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
