"""``grade(task, agent_diff, layers=...)``: the reward, computed where the agent cannot reach.

The shared steps (any grader kind): :func:`apply_agent_diff`, :func:`restore_protected`,
:func:`apply_test_patch`, :func:`score`; the pytest kind's run is :func:`run_pytest`.

1. Start a fresh sandbox from the task's layers: nothing the agent did in its own shell survives.
2. Filter the agent's diff to source files (:func:`swebox.envs.tasks.graders.diffs.filter_diff`), have git itself say
   what the diff and the filtered diff touch (:mod:`swebox.envs.tasks.graders.diff_truth`: refused when git reads it
   differently from the filter, or would touch a protected path), then ``git apply --binary --recount``; a
   refused diff or one that does not apply gives reward 0 and the reason.
3. Put back every protected path that differs from the starting commit, found without git's exclude rules
   (none should, after filtering: this is the second lock), then apply the task's ``test_patch``.
4. Run the test files, plus two canary tests planted at a random place, under the grade monitor
   (:mod:`swebox.envs.tasks.graders.verdict`): ``env -i`` (fixed PATH), the monitor as ``python -I -S -B`` outside
   the tested interpreter, pytest as its child with ``python -I -B`` (no PYTHON* variables, no user site, no
   current directory on sys.path, no bytecode), ``-p no:cacheprovider``, ``-o addopts=``,
   ``--rootdir=/testbed``, under a timeout. Per-test reports stream to the monitor as they happen; it signs
   the verdict with a key the tested process never holds. The test files' assertion rewriting comes from a
   read-only host cache keyed by their pristine bytes (:mod:`swebox.envs.tasks.graders.rewrite_cache`).
5. Believe only that signed verdict; match the task's F2P/P2P ids. ``resolved``: the run was complete,
   consistent and error-free (no refusal, crash, timeout, tampering, missing file, broken test_patch), every
   F2P test passed (xfailed, xpassed and skipped are not passes) and every P2P test passed (or stayed
   xfailed). ``reward``: ``binary`` = 1.0 if resolved; ``fraction`` = passed share of F2P when the run was
   clean and every P2P passed, else 0.

Steps 1-3 are shared by every grader kind. Tasks with ``grader='log'`` (the SWE-bench family) replace steps
4-5 with the repository's test command read by SWE-bench's log parser (:mod:`swebox.envs.tasks.graders.log_grading`);
a log verdict that earns a reward is then confirmed, when ``Task.confirm_mode`` says 'runner', by steps 1-5 once
more for the F2P and P2P tests in a second fresh sandbox (:mod:`swebox.envs.tasks.graders.log_confirm`), with the
log run's outcome-changing pytest options first (:mod:`swebox.envs.tasks.graders.confirm_options`).
A non-empty ``Task.expected_status`` must match in both. Tasks with ``grader='harbor'`` (Harbor task folders)
replace them with the task's ``tests/test.sh`` and the reward file it writes
(:mod:`swebox.envs.tasks.harbor_format.verify`).
"""

from __future__ import annotations

import dataclasses
import secrets
import shlex
import time
from pathlib import Path

from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy
from swebox.envs.tasks.graders import rewrite_cache
from swebox.envs.tasks.graders import verdict as channel
from swebox.envs.tasks.graders.diff_parse import changed_paths
from swebox.envs.tasks.graders.diff_truth import encode_diff, judge
from swebox.envs.tasks.graders.diffs import filter_diff, own_modules, protected_reason
from swebox.envs.tasks.graders.junit import MISSING, TestResult
from swebox.envs.tasks.graders.provenance import provenance
from swebox.envs.tasks.graders.report import GradeReport, TestOutcome, expected_mismatches
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.testids import Key, junit_key, match_ids

REWARD_MODES = ("binary", "fraction")
F2P_PASSING = frozenset({"passed"})
"""A FAIL_TO_PASS test must really pass: xfailed, xpassed and skipped are not fixes."""
P2P_PASSING = frozenset({"passed", "xfailed"})
"""A PASS_TO_PASS test may also stay an expected failure (the suite's own xfail marks, as in SWE-bench)."""
_OUTPUT_TAIL = 4000


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


# -- the steps every grader kind shares -------------------------------------------------------------------
def protected_files(task: Task) -> tuple[str, ...]:
    """The files the agent's diff may not touch: the task's test files; for log grading also test_patch's
    files (SWE-bench checks them out at base_commit before applying the test patch)."""
    if task.grader != "log":
        return task.all_test_files()
    return tuple(dict.fromkeys([*task.all_test_files(), *changed_paths(task.test_patch)]))


def untracked(sb: Sandbox) -> set[str]:
    """Every untracked path of /testbed, ignored ones included (no exclude rules: nothing can hide)."""
    out = sb.exec("cd /testbed && git ls-files --others -z", timeout=120).output
    return {p for p in out.split("\0") if p}


def apply_agent_diff(sb: Sandbox, task: Task, agent_diff: str, workdir: str, report: GradeReport) -> bool:
    """Filter the agent's diff, have git confirm what it touches (diff_truth), apply it; False = reward 0."""
    protected, own = protected_files(task), own_modules(task.repo)
    filtered = filter_diff(agent_diff, protected, own)
    report.dropped = filtered.dropped
    refused = judge(sb, workdir, agent_diff, filtered, protected, own)
    if refused:
        report.applied, report.apply_error = False, refused
        report.errors.append(f"the diff was refused: {refused}")
        return False
    report.applied, report.apply_error = True, ""
    if filtered.text:
        report.applied, report.apply_error = _apply(sb, f"{workdir}/agent.diff")
    if not report.applied:
        last = report.apply_error.splitlines()[-1:]
        report.errors.append("the diff does not apply" + (f": {last[0]}" if last else ""))
    return report.applied


def restore_protected(sb: Sandbox, task: Task, before: set[str], report: GradeReport) -> None:
    """Second lock: any protected path that differs from HEAD goes back to HEAD (or away, if new).

    What changed is asked of git without exclude rules (``before``: the untracked paths before applying), so
    a planted ``.gitignore`` cannot hide a planted file.
    """
    tracked = sb.exec("cd /testbed && git diff --name-only --no-renames -z HEAD", timeout=120).output
    changed = [p for p in tracked.split("\0") if p] + sorted(untracked(sb) - before)
    protected = protected_files(task)
    bad = [p for p in dict.fromkeys(changed) if protected_reason(p, protected, own_modules(task.repo))]
    for path in bad:
        q = shlex.quote(path)
        sb.exec(f"cd /testbed && (git checkout -q HEAD -- {q} 2>/dev/null || rm -rf -- {q})", timeout=60)
    report.restored = bad


def apply_test_patch(sb: Sandbox, task: Task, workdir: str, report: GradeReport) -> None:
    """The task's hidden tests; one that does not apply is a broken task (an error, reward 0)."""
    if task.test_patch:
        sb.write_file(f"{workdir}/test.diff", encode_diff(task.test_patch))
        ok, why = _apply(sb, f"{workdir}/test.diff")
        if not ok:
            report.errors.append(f"the task's test_patch does not apply (a broken task): {why}")


def _apply(sb: Sandbox, diff_file: str) -> tuple[bool, str]:
    result = sb.exec(f"cd /testbed && git apply --binary --recount --whitespace=nowarn {diff_file}", 120)
    return result.exit_code == 0, result.output.strip()[-2000:]


# -- the pytest kind ---------------------------------------------------------------------------------------
def run_pytest(
    sb: Sandbox, task: Task, workdir: str, timeout: float, report: GradeReport, cache: Path | None = None
) -> dict[Key, TestResult]:
    """Run the tests under the grade monitor (envs/tasks/graders/verdict.py); results only from its signed verdict.

    ``cache``: the task's rewritten-test cache folder (bound read-only into ``sb``), or None for none."""
    options = pytest_args(task, workdir)
    files = list(task.all_test_files())
    rewritten: dict[str, str] = {}
    plain: dict[str, list[str]] = {}
    if cache is not None:  # before any code under test runs: the test files are the task's own
        t0 = time.monotonic()
        rewritten, compiled = rewrite_cache.entries(sb, cache, task.python, files, workdir, channel.clean_env(workdir))
        plain = rewrite_cache.plain_tables(rewritten)
        report.rewritten = {"entries": len(rewritten), "compiled": compiled}
        report.durations["rewrite"] = time.monotonic() - t0
    key = channel.prepare(sb, workdir, task.python, options, files, timeout, rewritten, plain)
    t0 = time.monotonic()
    # a host command (sb.run): the monitor and the tested process are no children of the sandbox's shell, and
    # grading asks nothing more of that shell after them
    run = sb.run(channel.command(task.python, workdir), timeout=timeout + 30, max_stdout=1 << 20)
    report.durations["tests"] = time.monotonic() - t0
    report.output_tail = output_tail(sb, f"{workdir}/pytest.out")
    try:
        signed = sb.read_file(f"{workdir}/verdict", max_bytes=channel.MAX_VERDICT_BYTES)
    except (OSError, SandboxError):
        signed = None  # never written (or replaced by something that is not a file): no verdict
    found = channel.read_verdict(signed, key)
    report.verdict = found.status
    report.timed_out = found.timed_out or run.timed_out
    if run.timed_out:
        found.problems.append(f"the tests timed out after {timeout:g} s")
    said = (run.stdout.decode("utf-8", "replace") + run.stderr).strip()
    if found.status == "missing" and said:
        found.problems.append(f"the grade monitor said: {said[-500:]}")
    report.errors += found.problems
    report.tampered += found.tampered
    results: dict[Key, TestResult] = {}
    for node_id, (status, duration, message) in found.results.items():
        junit = junit_key(node_id)  # the key the task's ids are matched by (testids.py)
        if junit is not None:
            results[junit] = TestResult(*junit, status, duration, message, node_id.partition("::")[0])
    return results


def output_tail(sb: Sandbox, path: str) -> str:
    """The end of a run's output file, for humans, read by the host: nothing the tested code left running in
    the sandbox (a process, a shell function) takes part; '' when there is no such regular file."""
    try:
        return sb.read_tail(path, _OUTPUT_TAIL).decode("utf-8", "replace")
    except (OSError, SandboxError):
        return ""


def score(task: Task, report: GradeReport, results: dict[Key, TestResult]) -> None:
    """Match the task's ids, count, and set ``resolved``/``reward``: anything short of a complete,
    consistent, error-free run with every F2P test passing and every P2P test still passing is 0."""
    ids = list(dict.fromkeys([*task.FAIL_TO_PASS, *task.PASS_TO_PASS, *task.expected_status]))
    for match in match_ids(ids, results):
        if match.key is None:
            status = MISSING if match.problem.startswith("not found") else "unknown"
            report.tests[match.test_id] = TestOutcome(status, 0.0, match.problem)
            report.unknown_ids.append((match.test_id, match.problem))
            continue
        result = results[match.key]
        report.tests[match.test_id] = TestOutcome(result.status, result.duration_s, result.message)
    report.f2p_total, report.p2p_total = len(task.FAIL_TO_PASS), len(task.PASS_TO_PASS)
    report.f2p_passed = sum(report.tests[t].status in F2P_PASSING for t in task.FAIL_TO_PASS)
    report.p2p_passed = sum(report.tests[t].status in P2P_PASSING for t in task.PASS_TO_PASS)
    report.errors += expected_mismatches(task, report)
    clean = report.applied and report.verdict == "ok" and not (report.tampered or report.errors or report.timed_out)
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
    rewrite_cache_on: bool = True,
) -> GradeReport:
    """Grade ``agent_diff`` for ``task`` in a fresh sandbox over ``layers`` (env layer first).

    ``rewrite_cache_on``: reuse pytest's assertion rewriting of the pristine test files across grades
    (:mod:`swebox.envs.tasks.graders.rewrite_cache`; the pytest kind only). The verdict is the same either way.

    Raises only for the caller's mistakes (a bad ``reward_mode``, a junit task that is not python) and for a
    sandbox that cannot start. Whatever the agent's diff or its code does after that — a diff no parser
    agrees on, a crash, a killed shell, a forged verdict — ends in a report with reward 0 and the reason in
    ``errors``: an episode whose code broke its own grading earns 0; it is not an environment failure.
    """
    if reward_mode not in REWARD_MODES:
        raise ValueError(f"grade(reward_mode=...): expected one of {REWARD_MODES}; found {reward_mode!r}.")
    if task.language != "python" and task.grader == "junit":
        raise ValueError(
            f"grade: expected a python task with grader='junit' (swebox's pytest runner); found language "
            f"{task.language!r}. Grade other languages from their test log (grader='log' and a log_parser)."
        )
    if task.grader == "log":
        from swebox.envs.tasks.graders import log_grading, log_parsers  # log_grading builds on this module

        log_parsers.get_parser(task.log_parser)  # a missing swebench fails here, before a sandbox starts
    started = time.monotonic()
    report = GradeReport(task.instance_id, reward_mode=reward_mode)
    policy = policy or SandboxPolicy(network="none")
    if task.network == "user":  # the row's tests need the internet (Task.network): the harness's containers
        policy = dataclasses.replace(policy, network="user")
    report.provenance = provenance(task, list(layers), policy)
    nonce = secrets.token_hex(12)
    workdir = f"/swebox-grade-{nonce}"
    results: dict[Key, TestResult] = {}
    status_map: dict[str, str] = {}
    harbor_reward = 0.0
    cache = None
    if rewrite_cache_on and task.grader == "junit":
        cache = rewrite_cache.folder_for(list(layers), task.python)
        policy = dataclasses.replace(policy, ro_binds=(*policy.ro_binds, str(cache)))
    with Sandbox(list(layers), policy) as sb:
        report.durations["start"] = time.monotonic() - started
        try:
            sb.exec(f"mkdir -p {workdir}/home", timeout=30)
            before = untracked(sb)
            if apply_agent_diff(sb, task, agent_diff or "", workdir, report):
                restore_protected(sb, task, before, report)
                apply_test_patch(sb, task, workdir, report)
                report.durations["apply"] = time.monotonic() - started - report.durations["start"]
                if task.grader == "harbor":  # the task's own tests/test.sh and reward file
                    from swebox.envs.tasks.harbor_format import verify as harbor_verify

                    t0 = time.monotonic()
                    harbor_reward = harbor_verify.run_verifier(sb, task, report, workdir, timeout)
                    report.durations["tests"] = time.monotonic() - t0
                elif task.grader == "log":
                    t0 = time.monotonic()
                    status_map = log_grading.run_tests(sb, task, report, workdir, nonce, timeout)
                    report.durations["tests"] = time.monotonic() - t0
                else:
                    results = run_pytest(sb, task, workdir, timeout, report, cache)
        except (SandboxError, OSError, ValueError, UnicodeError, KeyError, TypeError) as exc:
            report.errors.append(f"grading stopped by what the diff or its code did: {type(exc).__name__}: {exc}")
        try:
            report.usage = dataclasses.asdict(sb.usage())
        except (SandboxError, OSError):  # the cost is unknown; the verdict stands
            report.usage = {}
    if report.applied:
        if task.grader == "harbor":
            harbor_verify.score(report, harbor_reward)
        elif task.grader == "log":
            log_grading.score(task, report, status_map)
            _confirm(task, agent_diff or "", report, layers=list(layers), policy=policy, timeout=timeout)
        else:
            score(task, report, results)
    report.durations["total"] = time.monotonic() - started
    return report


def _confirm(
    task: Task, agent_diff: str, report: GradeReport, *, layers: list, policy: SandboxPolicy, timeout: float
) -> None:
    """A log verdict that earned a reward, confirmed under the runner when the task says so (log_confirm.py)."""
    from swebox.envs.tasks.graders import log_confirm  # it builds on this module's steps

    if log_confirm.needed(task, report):
        log_confirm.confirm(task, agent_diff, report, layers=layers, policy=policy, timeout=timeout)
    elif report.reward > 0:
        report.confirm = "off"
