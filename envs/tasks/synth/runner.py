"""Running a project's tests in a sandbox with changed files, and reading per-test results from JUnit XML.

One runner owns one sandbox over the env layer. ``run(changes, paths)`` writes the changed files into
/testbed, runs pytest with a hard timeout, reads the JUnit XML, and resets the sandbox: the reset drops the
written files and everything the run left behind (``.hypothesis/``, coverage files, caches), so every run
starts from the pristine env layer. Results come from the XML, never from pytest's exit code or output.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from swebox.envs.tasks.graders.junit import PASSING, parse_junit
from swebox.envs.tasks.synth.mutations import is_test_file
from swebox.envs.tasks.synth.statement import junit_details
from swebox.envs.tasks.testids import file_of_test, junit_key, node_id_from_junit

RUN_DIR = "/swebox/run"
JUNIT = f"{RUN_DIR}/junit.xml"
# Deterministic runs: no bytecode (a .pyc of the clean source would hide the bug and leak the fix), fixed
# hash seed, no inherited pytest/Python options.
BASE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
CLEARED_ENV = ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP")
# The grader's hardening (envs/tasks/graders/grading.py: no cache, addopts cleared, rootdir pinned), so F2P/P2P ids
# and outcomes mean the same thing here and there: anything a project's addopts did that matters must be
# in its recipe's pytest_args. A file that fails to collect must not stop the others from running.
PYTEST_OPTIONS = (
    "-p", "no:cacheprovider", "-o", "addopts=", "-o", "junit_family=xunit1", "--rootdir=/testbed",
    "-q", "--tb=short", "--color=no", "--continue-on-collection-errors",
)  # fmt: skip


@dataclass
class RunResult:
    """Per-test outcome of one pytest run."""

    statuses: dict[str, str] = field(default_factory=dict)
    """Node id -> junit status (passed, failed, error, skipped, xfailed) for tests in test files."""
    details: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Node id -> (message, traceback) of failed and errored tests."""
    timed_out: bool = False
    """The run hit its time limit (its results are incomplete)."""
    duration_s: float = 0.0
    """Wall time of the pytest command."""
    junit_status: str = "ok"
    """How the JUnit file read: ok | missing | empty | invalid | truncated."""
    defined_in: dict[str, str] = field(default_factory=dict)
    """Node id -> the file defining the test, where it is not the node id's file (a test inherited from there)."""

    def passing(self) -> set[str]:
        """Tests that passed (an expected failure counts as a pass)."""
        return {t for t, s in self.statuses.items() if s in PASSING}


def pytest_command(
    paths: Sequence[str],
    pytest_args: Sequence[str],
    env: Mapping[str, str],
    timeout_s: float,
    hypothesis: bool,
) -> str:
    """The shell command of one run (pure, so tests can read it)."""
    variables = {**BASE_ENV, **env}
    # the recipe's options first, like the grader (a recipe's own -o addopts= is then simply repeated)
    argv = ["/venv/bin/python", "-m", "pytest", *pytest_args, *PYTEST_OPTIONS, f"--junitxml={JUNIT}"]
    if hypothesis:
        argv.append("--hypothesis-seed=0")
    argv += list(paths)
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(variables.items()))
    unset = " ".join(f"-u {name}" for name in CLEARED_ENV)
    # `timeout` kills pytest itself; the sandbox's own exec timeout (a little longer) is the backstop.
    return (
        f"rm -rf {RUN_DIR} && mkdir -p {RUN_DIR} && cd /testbed && "
        f"env {unset} {assignments} timeout -s KILL {int(timeout_s) + 1} "
        f"{' '.join(shlex.quote(a) for a in argv)} > {RUN_DIR}/output.txt 2>&1; echo exit=$?"
    )


def results_from_junit(
    xml: bytes | None, files: Collection[str] = ()
) -> tuple[dict[str, str], dict[str, tuple[str, str]], dict[str, str], str]:
    """(statuses, failure details, defining files, junit status) keyed by node id, tests in test files only.

    ``files`` are the repository's files, to name inherited tests by the module that collects them. A result
    whose node id does not map back to its own JUnit key is dropped: the grader finds a test by that key, so
    such an id could never be graded. Defining files are kept where they differ from the node id's file
    (inherited tests), so a task can protect them too. Doctests of source modules are dropped: a bug in a
    module changes its own docstring tests, and a task's tests must live in files the grader can restore.
    """
    report = parse_junit(xml)
    details_by_key = junit_details(xml) if xml else {}
    statuses: dict[str, str] = {}
    details: dict[str, tuple[str, str]] = {}
    defined_in: dict[str, str] = {}
    for key, result in report.results.items():
        if not result.file.endswith(".py"):
            continue
        node = node_id_from_junit(result.classname, result.name, result.file, files)
        node_file = file_of_test(node)
        if junit_key(node) != key or not node_file or not is_test_file(node_file) or not is_test_file(result.file):
            continue
        statuses[node] = result.status
        if node_file != result.file:
            defined_in[node] = result.file
        if key in details_by_key:
            details[node] = details_by_key[key]
    return statuses, details, defined_in, report.status


class RepoReader:
    """What every runner reads of the pristine repository in its sandbox (``self.sandbox``, over the env layer):
    :class:`SandboxRunner`'s and :class:`swebox.envs.tasks.synth.log_runner.LogRunner`'s."""

    sandbox: Any

    def read_text(self, rel: str) -> str:
        """A file of the pristine repository."""
        return self.sandbox.read_file(f"/testbed/{rel}").decode("utf-8")

    def list_files(self) -> list[str]:
        """The repository's tracked files (the env layer's /testbed is a one-commit git repository)."""
        out = self.sandbox.exec("cd /testbed && git ls-files -z", timeout=60)
        if out.exit_code != 0:
            raise RuntimeError(f"git ls-files failed in /testbed: {out.output[-500:]}")
        return sorted(p for p in out.output.split("\0") if p.strip())


class SandboxRunner(RepoReader):
    """Runs tests in one sandbox; not shared between threads (each worker owns one)."""

    def __init__(self, sandbox, pytest_args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> None:
        self.sandbox = sandbox
        self.pytest_args = tuple(pytest_args)
        self.env = dict(env or {})
        probe = sandbox.exec("/venv/bin/python -c 'import hypothesis' 2>/dev/null && echo yes", timeout=60)
        self.hypothesis = probe.output.strip().endswith("yes")
        self.files = frozenset(self.list_files())

    def run(self, changes: Mapping[str, str | bytes], paths: Sequence[str], timeout_s: float) -> RunResult:
        """Write ``changes`` (repository-relative path -> content), run pytest on ``paths``, reset."""
        try:
            for rel, content in changes.items():
                self.sandbox.write_file(f"/testbed/{rel}", content)
            command = pytest_command(paths, self.pytest_args, self.env, timeout_s, self.hypothesis)
            done = self.sandbox.exec(command, timeout=timeout_s + 15)
            try:
                xml = self.sandbox.read_file(JUNIT)
            except (OSError, ValueError, RuntimeError):
                xml = None
            statuses, details, defined_in, status = results_from_junit(xml, self.files)
            timed_out = done.timed_out or "exit=137" in done.output
            return RunResult(statuses, details, timed_out, done.duration_s, status, defined_in)
        finally:
            self.sandbox.reset()
