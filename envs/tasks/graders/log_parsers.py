"""Log parsers by name, test ids in each parser's format, and SWE-bench's test directives.

A log-graded task (``Task.grader == 'log'``) names its parser in ``Task.log_parser``: a repository key of
SWE-bench's ``MAP_REPO_TO_PARSER_PY`` ('django/django', 'sympy/sympy', 'sphinx-doc/sphinx', ...; that
repository's parser) or ``'pytest'`` (SWE-bench's plain ``pytest -rA`` parser); for JavaScript/TypeScript a
repository key of ``MAP_REPO_TO_PARSER_JS`` (SWE-bench Multilingual's: 'axios/axios', 'vuejs/core', ...) or
one of the generic names of :data:`JS_PARSERS` ('tap', 'jest', 'vitest', ...: the same functions those
repositories use, for any project whose runner prints that format). The parsers are swebench's own
(:mod:`swebox.envs.tasks.graders.swebench_harness`), so a status map is exactly what the official harness computes.

Ids follow each parser's format. SWE-bench's ids *are* parser output (a pytest-family parser keeps the text
up to the first space, so ``test_x[a b]`` is recorded as ``test_x[a``; Django's parser records a test with a
docstring under the docstring's first line), and the official harness matches them verbatim. A task id is
therefore looked up verbatim first; an id written in another form (a full pytest node id with a space, from
a dataset that did not go through the parser) is then looked up under the key the parser itself gives it,
obtained by feeding the parser a one-line log that reports that id (:func:`parser_key`).

Go, Rust, Java and C/C++ logs have parsers of their own names (:mod:`.lang_parsers`: SWE-bench Multilingual's
repository keys, SWE-bench's function names as SWE-rebench-V2 rows give them, and 'go_test', 'cargo', ...).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from swebox.envs.tasks.graders import lang_parsers, swebench_harness

PYTEST = "pytest"
"""The parser name for plain ``pytest -rA`` logs (SWE-bench's ``parse_log_pytest``)."""

JS_PARSERS = {
    "tap": "parse_log_tap",
    "jest": "parse_log_jest",
    "jest-json": "parse_log_jest_json",
    "vitest": "parse_log_vitest",
    "karma": "parse_log_karma",
}
"""Generic parser names -> the function of ``swebench.harness.log_parsers.javascript`` they name: SWE-bench's
parsers of one output format each (TAP from node --test/tape/node-tap, jest's verbose, vitest's, karma's)."""
NEEDS_INSTANCE = {"immutable-js/immutable-js": "its SWE-bench parser picks a log format by the instance id"}
"""JavaScript repository keys left out: their parser reads SWE-bench's TestSpec, which a Task does not carry."""
PYTEST_FAMILY = frozenset(
    {
        PYTEST,
        "astropy/astropy",
        "marshmallow-code/marshmallow",
        "matplotlib/matplotlib",
        "mwaskom/seaborn",
        "pallets/flask",
        "psf/requests",
        "pvlib/pvlib-python",
        "pydata/xarray",
        "pydicom/pydicom",
        "pylint-dev/astroid",
        "pylint-dev/pylint",
        "pytest-dev/pytest",
        "pyvista/pyvista",
        "scikit-learn/scikit-learn",
        "sphinx-doc/sphinx",
        "sqlfluff/sqlfluff",
    }
)
"""Parser names whose logs are pytest's ``-rA`` output: 'pytest' and every repository key of SWE-bench's
``MAP_REPO_TO_PARSER_PY`` but Django's and sympy's (their own runners). Written out, not read from swebench, so
that a task's ``Task.confirm_mode`` is fixed by the record alone (tests/envs/tasks/graders/test_log_confirm.py
checks it against the installed swebench)."""
RUNNER_UNFIT = {
    "pytest-dev/pytest": "the repository under test is pytest itself, which swebox's runner hosts and watches"
}
"""Pytest-family parsers whose repositories swebox's pytest runner cannot run, with the reason: their tasks'
``confirm`` defaults to 'off' (the log grader's targeted gap stays open for them; docs/tasks.md)."""
STATUS_NAMES = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped", "XFAIL": "xfailed"}
"""SWE-bench's TestStatus values -> swebox's statuses (grading.TestOutcome.status)."""
_REPO = re.compile(r"^[\w.-]+/[\w.-]+$")
# One-line logs that report `{id}` as passed in the formats of the parsers: pytest -rA's short summary
# (pytest, matplotlib, seaborn, sphinx, ...), unittest verbosity 2 (Django), sympy's bin/test, go test -v,
# cargo test and TAP.
_PROBES = ("PASSED {id}", "{id} ... ok", "{id} ok", "--- PASS: {id} (0.00s)", "test {id} ... ok", "ok 1 {id}")


def default_confirm(log_parser: str) -> str:
    """``Task.confirm``'s rule for a log-graded task: 'runner' for a pytest-family parser whose repository the
    runner can run, else 'off' (Django's, sympy's, the JavaScript, Go, Rust and C parsers: no pytest to rerun)."""
    return "runner" if log_parser in PYTEST_FAMILY and log_parser not in RUNNER_UNFIT else "off"


class UnparsableLog(ValueError):
    """The log parser raised on the text it read. Test output is text the code under test prints to (a bare
    ``FAIL:`` line crashes Django's parser, a bare ``PASSED`` line seaborn's), so this is the run's doing:
    a verdict of 0 ("unparsable"), never an environment failure."""


def normal_status(status: object) -> str | None:
    """swebox's name for a status written either way ('PASSED' or 'passed'); None when it is neither."""
    if not isinstance(status, str):
        return None
    if status in STATUS_NAMES:
        return STATUS_NAMES[status]
    return status if status in STATUS_NAMES.values() else None


def parser_names() -> list[str]:
    """Every name Task.log_parser accepts ('pytest', the generic JavaScript names, SWE-bench's repository keys
    and :mod:`.lang_parsers`'s names); needs swebench."""
    js_repos = [r for r in swebench_harness.javascript_parsers() if r not in NEEDS_INSTANCE]
    return [PYTEST, *JS_PARSERS, *sorted({*swebench_harness.python_parsers(), *js_repos, *lang_parsers.parsers()})]


def check_parser_name(name: str) -> str:
    """'' when ``name`` can be a parser; otherwise how to fix it.

    Without swebench installed only the form is checked here ('pytest' or 'owner/name'): grading then fails
    with the install command. With it, the name must be one of its parsers.
    """
    if name == PYTEST or name in JS_PARSERS or name in lang_parsers.offline_names():
        return ""
    if name in NEEDS_INSTANCE:
        return f"{name!r} is not supported: {NEEDS_INSTANCE[name]}; name its format instead ('jest', 'jest-json')."
    if not _REPO.match(name or ""):
        return (
            f"Use 'pytest' for pytest -rA logs, one of {sorted(JS_PARSERS)} for JavaScript runners, a "
            "SWE-bench repository key such as 'django/django' or 'axios/axios', or a parser name such as "
            "'go_test', 'cargo' or 'parse_log_gotest' (docs/tasks.md, 'Log graders')."
        )
    try:
        known = parser_names()
    except swebench_harness.HarnessUnavailable:
        return ""
    if name not in known:
        return f"SWE-bench has no log parser for {name!r}; known: {', '.join(known)}."
    return ""


@functools.cache
def get_parser(name: str) -> Callable[[str], dict[str, str]]:
    """The parser function for ``name``: log text -> {test id: SWE-bench status}."""
    problem = check_parser_name(name)
    if problem:
        raise ValueError(f"log parser: expected a parser name; found {name!r}. {problem}")
    if name == PYTEST:
        parse = swebench_harness.module("harness.log_parsers.python").parse_log_pytest
    elif (native := lang_parsers.parser(name)) is not None:
        return native
    elif name in JS_PARSERS:
        parse = getattr(swebench_harness.module("harness.log_parsers.javascript"), JS_PARSERS[name])
    elif name in swebench_harness.python_parsers():
        parse = swebench_harness.python_parsers()[name]
    else:
        parse = swebench_harness.javascript_parsers()[name]
    # The parsers take a TestSpec to share one signature; only NEEDS_INSTANCE's (not offered) read it.
    return lambda log: parse(log, None)


def parse_log(name: str, log: str) -> dict[str, str]:
    """SWE-bench's status map of ``log`` read by parser ``name``.

    Raises :class:`UnparsableLog` for anything the parser raises on ``log`` (a bad ``name`` stays the
    caller's ValueError)."""
    parse = get_parser(name)
    try:
        return dict(parse(log))
    except Exception as exc:  # swebench's parsers index split lines freely; whatever they raise is the text's
        raise UnparsableLog(
            f"the {name!r} log parser raised {type(exc).__name__} ({exc}) on the test output: "
            "a line the code under test printed broke it; the log is unreadable"
        ) from exc


@functools.lru_cache(maxsize=65536)
def parser_key(name: str, test_id: str) -> str | None:
    """The key parser ``name`` records for a test reported as ``test_id``; None when no probe line parses.

    >>> parser_key("pytest", "tests/test_a.py::test_x[a b]")  # doctest: +SKIP
    'tests/test_a.py::test_x[a'
    """
    for probe in _PROBES:
        found = parse_log(name, probe.format(id=test_id))
        if len(found) == 1:
            return next(iter(found))
    return None


def lookup(name: str, test_id: str, status_map: dict[str, str]) -> str | None:
    """The key of ``status_map`` that reports ``test_id``: itself, else the parser's form of it; None if absent."""
    if test_id in status_map:
        return test_id
    key = parser_key(name, test_id)
    return key if key is not None and key in status_map else None


def test_directives(repo: str, test_patch: str) -> list[str]:
    """The test selection SWE-bench appends to a repository's test command, computed from ``test_patch``.

    SWE-bench's own ``get_test_directives``: the files the test patch touches, less data files (.json, .png,
    ...); for django/django each becomes a module label (``tests/admin_views/tests.py`` ->
    ``admin_views.tests``). Adapters build ``Task.test_cmd`` as ``spec test_cmd + ' ' + ' '.join(directives)``.
    """
    return swebench_harness.get_test_directives(repo, test_patch)


test_directives.__test__ = False  # type: ignore[attr-defined]  # mypy has no function attributes; a library function, not a test, when a test module imports it
