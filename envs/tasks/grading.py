"""``grade(task, agent_diff, layers=...)``: the reward, computed where the agent cannot reach.

1. Start a fresh sandbox from the task's layers: nothing the agent did in its own shell survives.
2. Apply the agent's diff restricted to source files (:func:`swebox.envs.tasks.diffs.filter_diff`) with
   ``git apply --binary``; a diff that does not apply gives reward 0 and git's reason.
3. Put back every test file, ``conftest.py`` and test configuration that differs from the starting commit
   (none should, after filtering: this is the second lock), then apply the task's ``test_patch``.
4. Run the selected test files with ``env -i`` (fixed PATH, nothing inherited), ``python -I -B`` (no
   PYTHON* variables, no user site, no current directory on sys.path, no bytecode), ``-p no:cacheprovider``,
   ``-o addopts=`` (no config can add options), ``--rootdir=/testbed``, under a timeout, through
   :mod:`swebox.envs.tasks.pytest_runner`, which watches pytest for tampering. JUnit XML goes to a folder
   created just before the run with an unguessable name, outside /testbed.
5. Read results from the XML (cross-checked against the runner's in-memory record and digests), match the
   task's F2P/P2P ids, and report. ``resolved``: every F2P and P2P test passes (SWE-bench's definition).
   ``reward``: ``binary`` = 1.0 if resolved; ``fraction`` = passed share of F2P, 0 if any P2P fails.

Steps 1-3 are shared by every grader. Tasks with ``grader='log'`` (the SWE-bench family)
replace steps 4-5 with the repository's test command read by SWE-bench's log parser
(:mod:`swebox.envs.tasks.log_grading`). A non-empty ``Task.expected_status`` must match in both.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy
from swebox.envs.tasks.diffs import changed_paths, filter_diff, protected_reason
from swebox.envs.tasks.junit import MISSING, PASSING, TestResult, parse_junit
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.testids import junit_key, match_ids

REWARD_MODES = ("binary", "fraction")
CLEAN_PATH = "/venv/bin:/usr/local/bin:/usr/bin:/bin"
RUNNER = Path(__file__).with_name("pytest_runner.py")
_OUTPUT_TAIL = 4000


@dataclass
class TestOutcome:
    """One of the task's test ids after grading."""

    __test__ = False

    status: str
    """passed | failed | error | skipped | xfailed | missing (not in the results) | unknown (ambiguous id)."""
    duration_s: float = 0.0
    """Time pytest measured for it."""
    message: str = ""
    """Failure message, or why the id could not be matched."""


@dataclass
class GradeReport:
    """Everything grading found out; ``reward`` is what the learner gets."""

    instance_id: str
    """The task graded."""
    resolved: bool = False
    """All F2P and P2P tests pass (SWE-bench's definition), the diff applied, nothing was tampered with."""
    reward: float = 0.0
    """By reward_mode: binary 1.0/0.0, or the passed F2P fraction (0 if any P2P fails)."""
    reward_mode: str = "binary"
    """'binary' or 'fraction'."""
    applied: bool = False
    """The filtered diff applied cleanly (an empty diff applies trivially)."""
    apply_error: str = ""
    """git's message when it did not."""
    dropped: list[tuple[str, str]] = field(default_factory=list)
    """(path, reason) for diff sections removed before applying."""
    restored: list[str] = field(default_factory=list)
    """Protected paths found changed after applying and put back (should stay empty)."""
    tests: dict[str, TestOutcome] = field(default_factory=dict)
    """Per test id of the task (F2P then P2P)."""
    f2p_passed: int = 0
    """F2P tests that passed."""
    f2p_total: int = 0
    """F2P tests in the task."""
    p2p_passed: int = 0
    """P2P tests that passed."""
    p2p_total: int = 0
    """P2P tests in the task."""
    unknown_ids: list[tuple[str, str]] = field(default_factory=list)
    """(id, problem) for task ids absent from or ambiguous in the results."""
    tampered: list[str] = field(default_factory=list)
    """What the watchdog or the cross-checks caught; any entry forces reward 0."""
    errors: list[str] = field(default_factory=list)
    """Everything else that went wrong (timeouts, unreadable JUnit, a test_patch that did not apply)."""
    timed_out: bool = False
    """The test run hit its timeout."""
    junit_status: str = ""
    """ok | missing | empty | invalid | truncated (grader 'junit')."""
    log_status: str = ""
    """ok | unfinished (no end marker) | no-results (the parser found no test) (grader 'log')."""
    durations: dict[str, float] = field(default_factory=dict)
    """Seconds per phase: start, apply, tests, total."""
    output_tail: str = ""
    """The end of pytest's terminal output, for humans; never used for the verdict."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def pytest_args(task: Task, workdir: str) -> list[str]:
    """pytest's options for a graded run: the task's own, then the hardening (test files come separately).

    Synthesis should run its baselines with the same options so F2P/P2P ids mean the same thing.
    """
    return [
        *task.pytest_options,
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-o",
        "junit_family=xunit1",
        "--rootdir=/testbed",
        f"--junitxml={workdir}/junit.xml",
        "-q",
        "--tb=short",
        "--color=no",
    ]


def runner_command(task: Task, workdir: str, nonce: str) -> str:
    """The shell command that runs the tests in a clean environment (see the module docstring)."""
    env = {
        "PATH": CLEAN_PATH,
        "HOME": f"{workdir}/home",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": "/tmp",
        "TERM": "dumb",
    }
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (
        f"cd /testbed && env -i {assignments} {shlex.quote(task.python)} -I -B "
        f"{workdir}/pytest_runner.py {nonce} {workdir} {workdir}/args.json"
    )


def protected_files(task: Task) -> tuple[str, ...]:
    """The files the agent's diff may not touch: the task's test files; for log grading also test_patch's
    files (SWE-bench checks them out at base_commit before applying the test patch)."""
    if task.grader != "log":
        return task.all_test_files()
    return tuple(dict.fromkeys([*task.all_test_files(), *changed_paths(task.test_patch)]))


def _restore(sb: Sandbox, task: Task, report: GradeReport) -> None:
    """Second lock: any protected path that differs from HEAD goes back to HEAD (or away, if new)."""
    status = sb.exec("cd /testbed && git status --porcelain=v1 -z --untracked-files=all", timeout=60)
    entries = [e for e in status.output.split("\0") if len(e) > 3]
    tests = protected_files(task)
    changed = [e[3:] for e in entries]
    bad = [p for p in changed if protected_reason(p, tests)]
    for path in bad:
        q = shlex.quote(path)
        sb.exec(f"cd /testbed && (git checkout -q HEAD -- {q} 2>/dev/null || rm -rf -- {q})", timeout=60)
    report.restored = bad


def _apply(sb: Sandbox, workdir: str, name: str, diff: str) -> tuple[bool, str]:
    sb.write_file(f"{workdir}/{name}", diff.encode("utf-8", errors="surrogateescape"))
    result = sb.exec(f"cd /testbed && git apply --binary --recount --whitespace=nowarn {workdir}/{name}", 120)
    return result.exit_code == 0, result.output.strip()[-2000:]


def _read(sb: Sandbox, path: str) -> bytes | None:
    try:
        return sb.read_file(path)
    except (OSError, SandboxError):
        return None


def _cross_check(
    report: GradeReport,
    junit_bytes: bytes | None,
    record_bytes: bytes | None,
    output: str,
    nonce: str,
    results: dict,
) -> None:
    import hashlib

    tags = re.findall(rf"SWEBOX-GRADE {nonce} (\S+) (\S+)", output)
    if not tags:
        report.errors.append(
            "the test runner did not finish (no completion line): crash, timeout or os._exit"
        )
        return
    junit_digest, record_digest = tags[-1]
    if junit_bytes is not None and hashlib.sha256(junit_bytes).hexdigest() != junit_digest:
        report.tampered.append("the JUnit file changed after the test runner read it")
    if record_bytes is None or hashlib.sha256(record_bytes).hexdigest() != record_digest:
        report.tampered.append("the runner's record changed after it was written")
        return
    record = json.loads(record_bytes)
    report.tampered += record.get("tampered", [])
    report.errors += [f"test file not found: {f}" for f in record.get("missing_files", [])]
    seen = {junit_key(nodeid): status for nodeid, status in record.get("record", {}).items()}
    for key, result in results.items():
        if result.status in PASSING and seen.get(key) not in PASSING:
            report.tampered.append(f"JUnit says {key[0]}::{key[1]} passed; the runner saw {seen.get(key)}")


def expected_mismatches(task: Task, report: GradeReport) -> list[str]:
    """One line per ``Task.expected_status`` entry whose outcome differs (a missing test never matches)."""
    from swebox.envs.tasks.log_parsers import normal_status

    out = []
    for test_id, want in task.expected_status.items():
        got = report.tests[test_id].status if test_id in report.tests else MISSING
        if got != normal_status(want):
            out.append(f"expected_status: {test_id} should be {want}, is {got}")
    return out


def _score(task: Task, report: GradeReport, results: dict[tuple[str, str], TestResult]) -> None:
    ids = list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS, *task.expected_status]))
    for match in match_ids(ids, results):
        if match.key is None:
            status = MISSING if match.problem.startswith("not found") else "unknown"
            report.tests[match.test_id] = TestOutcome(status, 0.0, match.problem)
            report.unknown_ids.append((match.test_id, match.problem))
            continue
        result = results[match.key]
        report.tests[match.test_id] = TestOutcome(result.status, result.duration_s, result.message)
    passing = {t for t, o in report.tests.items() if o.status in PASSING}
    report.f2p_total, report.p2p_total = len(task.FAIL_TO_PASS), len(task.PASS_TO_PASS)
    report.f2p_passed = sum(t in passing for t in task.FAIL_TO_PASS)
    report.p2p_passed = sum(t in passing for t in task.PASS_TO_PASS)
    mismatched = expected_mismatches(task, report)
    report.errors += mismatched
    clean = report.applied and not report.tampered and not report.timed_out and not mismatched
    all_p2p = report.p2p_passed == report.p2p_total
    report.resolved = clean and all_p2p and report.f2p_passed == report.f2p_total
    if report.reward_mode == "binary":
        report.reward = 1.0 if report.resolved else 0.0
    else:
        report.reward = report.f2p_passed / report.f2p_total if clean and all_p2p else 0.0


def grade(
    task: Task,
    agent_diff: str,
    *,
    layers: list,
    policy: SandboxPolicy | None = None,
    timeout: float = 900.0,
    reward_mode: str = "binary",
) -> GradeReport:
    """Grade ``agent_diff`` for ``task`` in a fresh sandbox over ``layers`` (env layer first)."""
    if reward_mode not in REWARD_MODES:
        raise ValueError(f"grade(reward_mode=...): expected one of {REWARD_MODES}; found {reward_mode!r}.")
    if task.language != "python":
        raise ValueError(
            f"grade: expected a python task; found language {task.language!r}. Only pytest "
            f"suites can be graded."
        )
    if task.grader == "log":
        from swebox.envs.tasks import log_grading, log_parsers  # log_grading builds on this module

        log_parsers.get_parser(task.log_parser)  # a missing swebench fails here, before a sandbox starts
    started = time.monotonic()
    report = GradeReport(task.instance_id, reward_mode=reward_mode)
    filtered = filter_diff(agent_diff or "", protected_files(task))
    report.dropped = filtered.dropped
    nonce = secrets.token_hex(12)
    workdir = f"/swebox-grade-{nonce}"
    with Sandbox(list(layers), policy or SandboxPolicy(network="none")) as sb:
        report.durations["start"] = time.monotonic() - started
        sb.exec(f"mkdir -p {workdir}/home", timeout=30)
        report.applied, report.apply_error = True, ""
        if filtered.text:
            report.applied, report.apply_error = _apply(sb, workdir, "agent.diff", filtered.text)
        if not report.applied:
            report.errors.append(
                "the diff does not apply: " + report.apply_error.splitlines()[-1:][0]
                if report.apply_error
                else "the diff does not apply"
            )
            report.durations["total"] = time.monotonic() - started
            return report
        _restore(sb, task, report)
        if task.test_patch:
            ok, why = _apply(sb, workdir, "test.diff", task.test_patch)
            if not ok:
                report.errors.append(f"the task's test_patch does not apply (a broken task): {why}")
        report.durations["apply"] = time.monotonic() - started - report.durations["start"]
        if task.grader == "log":  # the steps above are every grader's; the run and the verdict are its own
            return log_grading.run_and_score(sb, task, report, workdir, timeout, started)
        sb.write_file(f"{workdir}/pytest_runner.py", RUNNER.read_bytes())
        args = {"options": pytest_args(task, workdir), "files": list(task.all_test_files())}
        sb.write_file(f"{workdir}/args.json", json.dumps(args))
        t0 = time.monotonic()
        run = sb.exec(runner_command(task, workdir, nonce), timeout=timeout)
        report.durations["tests"] = time.monotonic() - t0
        report.timed_out = run.timed_out
        report.output_tail = run.output[-_OUTPUT_TAIL:]
        if run.timed_out:
            report.errors.append(f"the tests timed out after {timeout:g} s")
        junit_bytes = _read(sb, f"{workdir}/junit.xml")
        record_bytes = _read(sb, f"{workdir}/record.json")
    junit = parse_junit(junit_bytes)
    report.junit_status = junit.status
    if junit.error:
        report.errors.append(junit.error)
    if not run.timed_out:
        _cross_check(report, junit_bytes, record_bytes, run.output, nonce, junit.results)
    _score(task, report, junit.results)
    report.durations["total"] = time.monotonic() - started
    return report
