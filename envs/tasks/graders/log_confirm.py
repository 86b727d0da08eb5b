"""The log verdict's confirmation: a log-graded task's FAIL_TO_PASS tests once more, under swebox's runner.

Why. A log is text the tested process writes. Code under test that singles out the task's failing tests
inside the repository's own test command (patching pytest's report for them, or an fd-level filter that
rewrites their ``FAILED`` lines on the way to the log's pipe) and leaves the canaries honest prints a log
that nothing outside the tested process can tell from pytest's (docs/tasks.md, "What the log grader can and
cannot guarantee"). swebox's pytest runner closes that for the JUnit grader: its report channel is pinned
(no filter can sit on it) and its watchdog sees patched reports. So a log verdict that earns a reward is only
believed once the F2P tests pass there too.

When: grader 'log', ``Task.confirm_mode == 'runner'`` (a pytest-family log; the per-task setting, fixed with
the record, never switched by what happens at grading), and only when the log verdict earned a reward: an
unresolved diff costs nothing more.

What runs, all through the JUnit grader's own steps (:mod:`swebox.envs.tasks.graders.grading`):

1. a fresh sandbox over the same layers and policy (nothing of the log run survives);
2. the same filtered diff, protected files (the log task's: its test files and test_patch's) restored, and
   the task's ``test_patch``: the tree the log graded;
3. the interpreter: ``test_cmd``'s own when it reads ``<absolute python> -m pytest ...``, else the
   ``python`` that the log run's environment finds first (:func:`log_grading.grading_env`: the env layer's
   /venv, or the env a container image's ``~/.bashrc`` activates), asked before the diff is applied;
4. :func:`grading.run_pytest` on the files of the F2P *and* P2P tests plus the two canaries, in one run, with
   the log run's outcome-changing pytest options (:mod:`.confirm_options`: the record's addopts, read from the
   root ini before the diff is applied, or test_cmd's ``-o addopts=...``; then test_cmd's own options; less
   what only shapes the log, the runner's own options, test selection, early stops, xdist/forked/coverage)
   followed by the runner's (``-p no:cacheprovider -o addopts= --rootdir=/testbed --junitxml=...``), which win
   where pytest keeps the last and keep an ini file the diff edits from adding options. ``eval_commands`` are
   not run and their environment is not carried: they are shell run after the diff is applied, so what they
   export may come from files the diff wrote, and the runner starts from a fixed environment on purpose
   (``env -i`` with :func:`verdict.clean_vars`, ``python -I``: no ``LD_PRELOAD``, ``PYTEST_ADDOPTS``...);
   no pytest-family spec of SWE-bench 4.1 has any (Django's locale exports are its only ones, and Django is
   not confirmed). A test that needs one fails the confirmation of an honest patch: ``swebox tasks
   validate`` names it and ``confirm='off'`` is the remedy;
5. the verdict: the run must be complete, signed, untampered and error-free, and every F2P and P2P test the
   log did not fail (all of them when it resolved; under ``reward_mode='fraction'`` every P2P test and the
   F2P tests it counted) must come out as the log grader's rule accepts it (passed, xfailed, or skipped:
   SWE-bench's ``test_passed`` and "skipped fails nothing"; failed, error, xpassed or absent fail). An id
   the runner's node ids do not give as written (SWE-bench's pytest parser cuts a node id at its first
   space, so a Verified row may list ``test_x[a`` for ``test_x[a b]``) is matched as the log parser would
   read the runner's results (:func:`cut_statuses`): every result the parser reads as that id must be
   accepted. So the confirmation changes no honest verdict of the harness's rule; it removes what only
   the log said, about P2P tests as much as about F2P ones (a diff that fixes the F2P tests, breaks a P2P
   test and prints its ``PASSED`` line earns 0).

Anything else (a test failing there, tampering, no verdict, a crash, a timeout) is reward 0 with the reason
in ``errors`` or ``tampered`` (each entry starting with :data:`PREFIX`) and ``GradeReport.confirm`` 'failed'
('unfinished' when the rerun left no signed verdict or timed out: like such a JUnit grade, it is not memoised).
"""

from __future__ import annotations

import dataclasses
import secrets
import shlex
import time
from collections.abc import Sequence

from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy
from swebox.envs.tasks.graders import confirm_options, grading, log_grading, log_parsers, rewrite_cache
from swebox.envs.tasks.graders.diff_parse import changed_paths
from swebox.envs.tasks.graders.junit import MISSING, TestResult
from swebox.envs.tasks.graders.report import GradeReport, TestOutcome
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.testids import Key, file_of_test, node_id_from_junit

ACCEPTED = frozenset({"passed", "xfailed", "skipped"})
"""Statuses under the runner that fail nothing by the log grader's (SWE-bench's) rule."""
PREFIX = "confirm under the runner: "
"""How every error and tampering entry of the confirmation starts."""


def needed(task: Task, report: GradeReport) -> bool:
    """True when ``report`` (a scored log grade) must be confirmed: the task asks for it and it earned a reward."""
    return task.grader == "log" and task.confirm_mode == "runner" and report.reward > 0


def named_python(task: Task) -> str:
    """test_cmd's interpreter when it reads ``<absolute python> -m pytest ...``; '' otherwise."""
    try:
        argv = shlex.split(task.test_cmd)
    except ValueError:
        return ""
    return argv[0] if len(argv) >= 3 and argv[0].startswith("/") and argv[1:3] == ["-m", "pytest"] else ""


def interpreter(sb: Sandbox, task: Task, workdir: str) -> str:
    """The python that runs pytest: test_cmd's own, or the one the log run's environment finds; '' if none."""
    if named_python(task):
        return named_python(task)
    tools = task.env.toolchains if task.env is not None else ()
    env = log_grading.grading_env(sb.policy, workdir, tools)
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    found = sb.run(f"cd /testbed && env -i {assignments} bash -c 'command -v python'", timeout=60)
    path = found.stdout.decode("utf-8", "replace").strip().splitlines()[-1:] if found.ok else []
    return path[0] if path and path[0].startswith("/") else ""


def runner_task(task: Task, python: str, options: Sequence[str] = ()) -> Task:
    """The JUnit-graded task the confirmation runs: the F2P and P2P tests (their files, one run), with
    ``options`` (:func:`confirm_options.rerun_options`) before the runner's own (:func:`grading.pytest_args`)."""
    ids = (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)
    files = tuple(dict.fromkeys(f for f in map(file_of_test, ids) if f))
    return Task(
        instance_id=task.instance_id,
        repo=task.repo,
        FAIL_TO_PASS=task.FAIL_TO_PASS,
        PASS_TO_PASS=task.PASS_TO_PASS,
        test_files=files,
        test_cmd=shlex.join([python, "-m", "pytest", *options]),
    )


def confirm(
    task: Task, agent_diff: str, report: GradeReport, *, layers: list, policy: SandboxPolicy, timeout: float
) -> None:
    """Run the confirmation and fold it into ``report`` (the log grade): 'confirmed', or 'failed' and reward 0.

    Raises only what :func:`grading.grade` raises for the host (a sandbox that cannot start)."""
    started = time.monotonic()
    found = GradeReport(task.instance_id)
    workdir = f"/swebox-confirm-{secrets.token_hex(12)}"
    # the rewritten-test cache is per interpreter and bound before the sandbox starts: the one the record
    # names (else the env layer's); an interpreter found otherwise (a container image's) goes without it
    expected = named_python(task) or log_grading.MONITOR_PYTHON
    cache = rewrite_cache.folder_for(list(layers), expected)
    policy = dataclasses.replace(policy, ro_binds=(*policy.ro_binds, str(cache)))
    with Sandbox(list(layers), policy) as sb:
        try:
            sb.exec(f"mkdir -p {workdir}/home", timeout=30)
            python = interpreter(sb, task, workdir)
            before = grading.untracked(sb)
            ini = confirm_options.read_ini_files(sb)  # the record's config, before the diff can change it
            if not python:
                found.errors.append("no python on the log run's PATH to run pytest with")
            elif grading.apply_agent_diff(sb, task, agent_diff, workdir, found):
                grading.restore_protected(sb, task, before, found)
                grading.apply_test_patch(sb, task, workdir, found)
                patched = patched_ini(task)  # read again as test_patch leaves them (or drops them)
                ini = {k: v for k, v in ini.items() if k not in patched} | confirm_options.read_ini_files(sb, patched)
                rerun = runner_task(task, python, confirm_options.rerun_options(task.test_cmd, ini))
                results = grading.run_pytest(sb, rerun, workdir, timeout, found, cache if python == expected else None)
                grading.score(rerun, found, results)
                recover_cut_ids(task, found, results)
        except (SandboxError, OSError, ValueError, UnicodeError, KeyError, TypeError) as exc:
            found.errors.append(f"stopped by what the diff or its code did: {type(exc).__name__}: {exc}")
    _fold(task, report, found)
    report.durations["confirm"] = time.monotonic() - started


def patched_ini(task: Task) -> tuple[str, ...]:
    """The root config files test_patch writes (protected: restored, then patched, before they are read)."""
    written = set(changed_paths(task.test_patch))
    return tuple(name for name in confirm_options.INI_FILES if name in written)


def cut_statuses(parser: str, results: dict[Key, TestResult]) -> dict[str, str]:
    """The runner's results as ``parser`` would key them in a log: log key -> status, the first status the log
    grader's rule does not accept among the results sharing a key (else the last), so a cut id is at least as
    strict under the runner as in the log (where the last line of the key wins)."""
    statuses: dict[str, str] = {}
    for result in results.values():
        key = log_parsers.parser_key(parser, node_id_from_junit(result.classname, result.name, result.file))
        if key is not None and (key not in statuses or statuses[key] in ACCEPTED):
            statuses[key] = result.status
    return statuses


def recover_cut_ids(task: Task, found: GradeReport, results: dict[Key, TestResult]) -> None:
    """Give an F2P/P2P id that matched no runner node id (a SWE-bench id cut at a space) the status the log
    parser's reading of the runner's results gives it; it stays absent when that reading has none either."""
    cut: dict[str, str] | None = None
    for test_id in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS):
        if test_id not in found.tests or found.tests[test_id].status != MISSING:
            continue
        cut = cut_statuses(task.log_parser, results) if cut is None else cut
        key = log_parsers.lookup(task.log_parser, test_id, cut)
        if key is not None:
            found.tests[test_id] = TestOutcome(cut[key], 0.0, f"matched as the log parser reads {key!r}")


def _fold(task: Task, report: GradeReport, found: GradeReport) -> None:
    """The confirmation's findings into the log grade; any of them makes it 'failed' and the reward 0."""
    problems = [PREFIX + e for e in found.errors]
    tampered = [PREFIX + t for t in found.tampered]
    if not found.applied and not found.errors:
        problems.append(PREFIX + "the diff did not apply")
    if found.applied and found.verdict != "ok" and not (found.errors or found.tampered):
        problems.append(PREFIX + f"no signed verdict ({found.verdict or 'the tests did not run'})")
    kinds = [("F2P", t) for t in task.FAIL_TO_PASS] + [("P2P", t) for t in task.PASS_TO_PASS]
    for kind, test_id in kinds:  # those the log did not fail (all of them, for a resolved verdict)
        said = report.tests[test_id].status if test_id in report.tests else MISSING
        status = found.tests[test_id].status if test_id in found.tests else MISSING
        if found.verdict == "ok" and said not in log_grading.FAILING and status not in ACCEPTED:
            problems.append(PREFIX + f"{kind} test {test_id} is {status} there (the log's status: {said})")
    report.errors += problems
    report.tampered += tampered
    report.timed_out = report.timed_out or found.timed_out
    if found.verdict != "ok" or found.timed_out:  # no whole run to judge by (as under the JUnit grader)
        report.confirm = "unfinished"
    else:
        report.confirm = "failed" if problems or tampered else "confirmed"
    if report.confirm != "confirmed":
        report.resolved, report.reward = False, 0.0
