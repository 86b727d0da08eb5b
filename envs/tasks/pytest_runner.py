"""The program the grader runs inside the sandbox: pytest plus a watchdog plugin. Standalone on purpose.

Usage (the grader writes this file into a fresh folder outside /testbed and runs it with ``python -I``)::

    python -I -B pytest_runner.py NONCE WORKDIR ARGS_JSON   # {"options": [...], "files": [...]}

The code under test runs in this very process, so it could patch pytest to report passes. The plugin
captures pytest's critical functions when this program starts (before any project code is imported) and,
when the session ends, reports every one that was replaced and every hook implemented outside pytest,
installed packages, ``conftest.py`` files or this file. It also keeps its own per-test record in this
process's memory, so a JUnit file rewritten by a forked child cannot agree with it. The record and the
JUnit file's digests are printed on one line tagged with the nonce; then the process leaves with
``os._exit`` so no ``atexit`` handler of the project can run after the files were read.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

CRITICAL_HOOKS = (
    "pytest_runtest_protocol",
    "pytest_runtest_makereport",
    "pytest_runtest_logreport",
    "pytest_report_teststatus",
    "pytest_pyfunc_call",
    "pytest_runtest_call",
    "pytest_runtestloop",
    "pytest_sessionfinish",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
)
_RANK = {"error": 4, "failed": 3, "skipped": 2, "xfailed": 1, "passed": 0}


def _critical_objects() -> dict[str, object]:
    """name -> the object pytest, pluggy and unittest grade with, as they are right now."""
    import unittest

    import _pytest.junitxml as junitxml
    import _pytest.main as main
    import _pytest.outcomes as outcomes
    import _pytest.python as python
    import _pytest.reports as reports
    import _pytest.runner as runner
    import _pytest.unittest as pt_unittest
    import pluggy._callers as callers
    import pluggy._hooks as hooks
    import pytest

    found: dict[str, object] = {}
    for mod in (runner, python, main, junitxml, outcomes, callers, pytest):
        for name, value in vars(mod).items():
            if callable(value) and not name.startswith("__"):
                found[f"{mod.__name__}.{name}"] = value
    for cls in (
        reports.TestReport,
        reports.BaseReport,
        reports.CollectReport,
        runner.CallInfo,
        python.Function,
        pt_unittest.TestCaseFunction,
        junitxml.LogXML,
        junitxml._NodeReporter,
        getattr(hooks, "HookCaller", None) or hooks._HookCaller,  # pluggy < 1.1 (pinned by older recipes)
        unittest.TestCase,
        unittest.TestResult,
    ):
        for name, value in vars(cls).items():
            found[f"{cls.__module__}.{cls.__qualname__}.{name}"] = value
    return found


class Watchdog:
    """Records outcomes and checks that pytest itself was left alone."""

    def __init__(self, runner_file: str) -> None:
        self.before = _critical_objects()
        self.runner_file = os.path.realpath(runner_file)
        self.record: dict[str, str] = {}
        self.early: list[str] = []
        self.config = None
        self.hookexec = None

    def pytest_configure(self, config) -> None:
        self.config = config
        self.hookexec = config.pluginmanager._inner_hookexec

    def pytest_collection_finish(self, session) -> None:
        # Collection imported the project: a patch made at import and undone before the end shows here.
        self.early = self.check()

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                status = "xfailed" if report.skipped else "passed"
            else:
                status = report.outcome
        elif report.failed:
            status = "error"
        elif report.skipped:
            status = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        else:
            status = "passed"
        old = self.record.get(report.nodeid)
        if old is None or _RANK[status] > _RANK[old]:
            self.record[report.nodeid] = status

    def _allowed_origin(self, filename: str) -> bool:
        real = os.path.realpath(filename)
        if real == self.runner_file or os.path.basename(real) == "conftest.py":
            return True
        # installed packages (pytest, pluggy, plugins from the venv) and the standard library
        return (
            "/site-packages/" in real and not real.startswith("/testbed/") or real.startswith(sys.base_prefix)
        )

    def check(self) -> list[str]:
        after = _critical_objects()
        problems = [
            f"replaced: {name}" for name, value in self.before.items() if after.get(name) is not value
        ]
        problems += [f"added: {name}" for name in after if name not in self.before and ".TestCase." in name]
        if self.config is not None:
            pm = self.config.pluginmanager
            if pm._inner_hookexec is not self.hookexec:
                problems.append("replaced: the plugin manager's hook executor")
            for hook_name in CRITICAL_HOOKS:
                caller = getattr(pm.hook, hook_name, None)
                for impl in caller.get_hookimpls() if caller is not None else []:
                    code = getattr(impl.function, "__code__", None)
                    filename = code.co_filename if code is not None else "<no code>"
                    if not self._allowed_origin(filename):
                        problems.append(f"hook {hook_name} implemented in {filename}")
        return problems


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return ""


def main(argv: list[str]) -> None:
    nonce, workdir, args_file = argv[1], argv[2], argv[3]
    import pytest  # before any project code: the watchdog captures the originals

    with open(args_file, encoding="utf-8") as fh:
        spec = json.load(fh)
    # A missing file would make pytest run nothing at all; run the rest and report it instead.
    missing = [f for f in spec["files"] if not os.path.exists(f)]
    present = [f for f in spec["files"] if f not in missing]
    args = spec["options"] + (present or spec["files"])
    watchdog = Watchdog(__file__)
    code: object = None
    try:
        code = pytest.main(args, plugins=[watchdog])
    except BaseException as exc:  # SystemExit or worse from the project's code
        code = f"{type(exc).__name__}: {exc}"[:300]
    problems = list(dict.fromkeys(watchdog.early + watchdog.check()))
    record_path = os.path.join(workdir, "record.json")
    with open(record_path, "w", encoding="utf-8") as fh:
        json.dump(
            {"record": watchdog.record, "tampered": problems, "exit": str(code), "missing_files": missing}, fh
        )
    junit = os.path.join(workdir, "junit.xml")
    line = f"\nSWEBOX-GRADE {nonce} {_digest(junit) or '-'} {_digest(record_path)}\n"
    sys.stdout.flush()
    os.write(1, line.encode())
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
