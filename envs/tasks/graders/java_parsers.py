"""Java log rules of the datasets that keep their own rather than SWE-bench's: Multi-SWE-bench's (its Maven
repositories' ``parse_log``: surefire's line per test class; its Gradle repositories': ``Class > method`` lines
and tasks) and SWE-rebench-V2's ``parse_java_mvn`` (surefire's class lines, failing methods, inline JUnit XML,
and SWE-bench's ``-Dtest=`` rule as fallbacks). Each takes the log text and returns {test id: status}.

SWE-rebench-V2's other Java names (``parse_java_mvn_v2``: Maven's reactor lines per module;
``parse_log_gradlew_v1``: JUnit XML printed into the log) are not here: a row naming one fails to load with
the name (:func:`.log_parsers.check_parser_name`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from swebox.envs.tasks.graders import swebench_harness

_SUREFIRE_CLASS = re.compile(
    r"Tests run: (\d+), Failures: (\d+), Errors: (\d+), Skipped: (\d+), Time elapsed: [\d.]+ .+? in (.+)"
)


def parse_multi_swe_bench_maven(log: str) -> dict[str, str]:
    """Multi-SWE-bench's reading of ``mvn test`` (its Maven repositories' ``parse_log``: fastjson2, dubbo, gson,
    jackson-*): each test class's surefire line (``Tests run: 3, Failures: 0, Errors: 0, Skipped: 0, Time
    elapsed: 0.1 s - in org.Foo``; surefire 3 writes ``--``) makes the class a test: failed when a test
    failed or erred, skipped when every test was skipped, passed when some ran and none failed. The ids are
    class names; the run's totals (no ``Time elapsed``) are not read. A failure is kept over a pass of the
    same class (a class run twice, e.g. in two modules)."""
    found: dict[str, str] = {}
    for line in log.splitlines():
        match = _SUREFIRE_CLASS.search(line)
        if not match:
            continue
        run, failures, errors, skipped = (int(match[i]) for i in range(1, 5))
        name = match[5].strip()
        if failures or errors:
            found[name] = "FAILED"
        elif run and skipped == run:
            found.setdefault(name, "SKIPPED")
        elif run and found.get(name) != "FAILED":
            found[name] = "PASSED"
    return found


_GRADLE_LINE = re.compile(r"^(?:> Task :(\S+)|(.+ > .+?))(?: (PASSED|FAILED|SKIPPED|UP-TO-DATE|NO-SOURCE))?$")
_GRADLE_STATUS = {None: "PASSED", "PASSED": "PASSED", "UP-TO-DATE": "PASSED", "FAILED": "FAILED"}


def parse_multi_swe_bench_gradle(log: str) -> dict[str, str]:
    """Multi-SWE-bench's reading of ``./gradlew test`` (its Gradle repositories' ``parse_log``: mockito,
    logstash): ``Class > method PASSED|FAILED|SKIPPED`` lines (the build's test logging) and ``> Task :name``
    lines (a task is a test too: plain or ``UP-TO-DATE`` passes, ``FAILED`` fails, ``SKIPPED`` /
    ``NO-SOURCE`` skips). A failure is never turned back into a pass. A ``Class > method`` line without a
    status (Gradle's progress line) is not a result."""
    found: dict[str, str] = {}
    for line in log.splitlines():
        match = _GRADLE_LINE.match(line)
        if not match or (match[2] and not match[3]):
            continue
        name, status = match[1] or match[2], _GRADLE_STATUS.get(match[3], "SKIPPED")
        if found.get(name) != "FAILED":
            found[name] = status
    return found


_RUNNING = re.compile(r"^(?:\[INFO\]\s+)?Running\s+([A-Za-z0-9_$.]+)$")
_FAILED_METHOD = re.compile(r"^\[ERROR\]\s+([A-Za-z0-9_$.]+)\.([A-Za-z0-9_$.]+?)(?::\d+)?\b")
_SUMMARY = re.compile(r"Tests run:\s*(\d+),\s*Failures:\s*(\d+),\s*Errors:\s*(\d+),\s*Skipped:\s*(\d+)")
_TESTCASE = re.compile(r"<testcase\b([^>]*)>", re.DOTALL)
_ATTR = re.compile(r'(\w+)="([^"]*)"')


def parse_rebench_java_mvn(log: str) -> dict[str, str]:
    """SWE-rebench-V2's ``parse_java_mvn``. In order, each keeping what an earlier source set:

    - an ``[ERROR] pkg.Class.method:line ...`` line fails ``pkg.Class.method`` (ERROR when it names an
      exception other than an AssertionError) and its class;
    - a ``Tests run: R, Failures: F, Errors: E, Skipped: S`` line gives the class it names after `` in ``
      (else the one of the ``Running`` line before it): PASSED with no failure, error or skip, SKIPPED with
      skips only, else FAILED; a totals line after another summary names no class and is not read;
    - ``<testcase classname name>`` elements printed into the log (``classname name``);
    - SWE-bench's ``-Dtest=`` / ``BUILD SUCCESS|FAILURE`` rule;
    - when nothing else was found, every class of a ``Running`` line passes.
    """
    found: dict[str, str] = {}
    running: set[str] = set()
    current: str | None = None
    for raw in log.splitlines():
        line = raw.strip()
        if match := _RUNNING.match(line):
            current = match[1]
            running.add(current)
        elif match := _FAILED_METHOD.match(line):
            error = "Exception" in line and "AssertionError" not in line
            found[f"{match[1]}.{match[2]}"] = "ERROR" if error else "FAILED"
            found.setdefault(match[1], "FAILED")
        elif match := _SUMMARY.search(line):
            failures, errors, skipped = int(match[2]), int(match[3]), int(match[4])
            name = line.rsplit(" in ", 1)[-1].strip().rstrip(".:;") if " in " in line else current
            if name:
                status = "FAILED" if failures or errors else "SKIPPED" if skipped else "PASSED"
                found.setdefault(name, status)
            current = None
    for fallback in (_testcases(log), _dtest_builds(log)):
        for name, status in fallback.items():
            found.setdefault(name, status)
    if not found:
        found = dict.fromkeys(running, "PASSED")
    return found


def _testcases(log: str) -> dict[str, str]:
    """``<testcase>`` elements in the text: ``classname name`` -> status by the first child it holds."""
    found: dict[str, str] = {}
    pos = 0
    while match := _TESTCASE.search(log, pos):
        attrs = dict(_ATTR.findall(match[1] or ""))
        pos = match.end()
        if not attrs.get("name"):
            continue
        content = ""
        if not (match[1] or "").strip().endswith("/"):
            close = log.find("</testcase>", match.end())
            content = log[match.end() : close] if close != -1 else log[match.end() : match.end() + 4096]
            pos = close + len("</testcase>") if close != -1 else pos
        name = f"{attrs.get('classname', '')} {attrs['name']}".strip()
        kinds = (("<failure", "FAILED"), ("<error", "ERROR"), ("<skipped", "SKIPPED"))
        found[name] = next((status for tag, status in kinds if tag in content), "PASSED")
    return found


def _dtest_builds(log: str) -> dict[str, str]:
    """SWE-bench's own ``parse_log_maven`` (the status of the ``BUILD`` line after each traced ``-Dtest=``)."""
    return swebench_harness.module("harness.log_parsers.java").parse_log_maven(log, None)


REBENCH: dict[str, Callable[[str], dict[str, str]]] = {
    "parse_java_mvn": parse_rebench_java_mvn,
    "parse_log_java_mvn": parse_rebench_java_mvn,
}
"""SWE-rebench-V2's Java parser names (``install_config.log_parser``) that swebox reads."""
