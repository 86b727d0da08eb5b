"""The 'log' grader: run the task's test command and read its output with SWE-bench's parser for the repo.

This is how SWE-bench's harness decides (``eval.sh`` then ``get_logs_eval`` and ``get_eval_report``), kept
inside swebox's grading (:func:`swebox.envs.tasks.grading.grade`): the fresh sandbox, the filtered diff, the
restored test files and ``test_patch`` come first, as for the JUnit grader. Then, in /testbed:

1. a script written to the grading folder (random name, outside /testbed) runs under ``env -i`` with a fixed
   environment (:func:`grading_env`: PATH/HOME/locale; in a container image, the image's own): the task's
   ``eval_commands`` (SWE-bench's spec eval_commands, e.g. locale exports), a
   start marker carrying a random nonce, ``test_cmd`` (the repository's test command with its directives),
   and an end marker with its exit status; stdout and stderr go to one log file, as ``docker exec`` gives
   the harness one stream;
2. the text between the markers is read by the task's parser (:mod:`swebox.envs.tasks.log_parsers`);
3. the verdict is the official one: a test passes when its status is PASSED or XFAIL, fails when it is
   FAILED, ERROR or absent from the log, and a SKIPPED test is neither (SWE-bench's ``test_passed`` /
   ``test_failed``); ``resolved`` = no F2P or P2P test fails and nothing went wrong (a ``test_patch`` that
   does not apply is unresolved, as in the harness). swebox adds: a log without the end marker (timeout, a
   killed run) or in which the parser finds no test at all is unresolved with the reason, and every
   ``expected_status`` entry must match.

A log is text the code under test can print to, so this grader trusts the test output as the official
harness does; what swebox adds over the harness is that the agent cannot change the tests, their
configuration, the environment or the command that runs them.
"""

from __future__ import annotations

import shlex

from swebox.envs.cache.images.records import START_SCRIPT
from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy
from swebox.envs.tasks.grading import GradeReport, TestOutcome, expected_mismatches
from swebox.envs.tasks.junit import MISSING
from swebox.envs.tasks.log_parsers import lookup, normal_status, parse_log
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.verdict import CLEAN_PATH

FAILING = frozenset({"failed", "error", MISSING})
"""Statuses SWE-bench's test_failed counts as a failure (absent from the log included)."""
PASSING = frozenset({"passed", "xfailed"})
"""Statuses SWE-bench's test_passed counts as a pass."""


def eval_script(task: Task, nonce: str) -> str:
    """The bash script the grader runs in /testbed (no ``set -e``: like eval.sh, a failing setup line goes on)."""
    return "\n".join(
        [
            "cd /testbed",
            *task.eval_commands,
            f"printf '%s\\n' 'SWEBOX-LOG-START {nonce}'",
            task.test_cmd,
            "status=$?",
            f"printf '\\n%s %s\\n' 'SWEBOX-LOG-END {nonce}' \"$status\"",
            "",
        ]
    )


def grading_env(policy: SandboxPolicy, workdir: str) -> dict[str, str]:
    """The environment the script starts with; nothing of it comes from the agent's sandbox.

    Normally a fixed one (the env layer's /venv first). A sandbox running a container image (its policy
    reads the image's shell start through ``BASH_ENV``: :func:`swebox.envs.cache.images.image_env`) gets the
    image's own, as ``docker exec`` gives SWE-bench's harness: the image config's Env, its HOME, and
    ``BASH_ENV``, so bash sources the image's ``~/.bashrc`` first, where SWE-bench images activate their
    conda env (a bare ``pytest`` in ``test_cmd`` is the env's). The policy is the image record's, and the
    grading sandbox is a fresh one of the image with only the filtered diff in /testbed, so the ~/.bashrc it
    reads is the image's, never one the agent edited.
    """
    if policy.env.get("BASH_ENV") == START_SCRIPT:
        return dict(policy.env)
    return {"PATH": CLEAN_PATH, "HOME": f"{workdir}/home", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "TMPDIR": "/tmp", "TERM": "dumb"}


def run_command(workdir: str, env: dict[str, str]) -> str:
    """The shell command that runs the script in the clean environment ``env``, its output into
    ``workdir/test.log``."""
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"cd /testbed && env -i {assignments} /bin/bash {workdir}/eval.sh > {workdir}/test.log 2>&1"


def log_section(log: str, nonce: str) -> tuple[str, str]:
    """(text between the markers, problem); the problem is '' when both markers are there."""
    start, end = f"SWEBOX-LOG-START {nonce}\n", f"\nSWEBOX-LOG-END {nonce} "
    _, found, rest = log.partition(start)
    if not found:
        return "", "the test command never started (no start marker in the log)"
    body, found, _ = rest.rpartition(end)
    if not found:
        return rest, "the test command did not finish (no end marker: killed, crashed or timed out)"
    return body, ""


def run_tests(sb: Sandbox, task: Task, report: GradeReport, workdir: str, nonce: str, timeout: float) -> dict:
    """Run the script, read the log, return the parser's status map ({} with report.errors saying why)."""
    sb.write_file(f"{workdir}/eval.sh", eval_script(task, nonce))
    run = sb.exec(run_command(workdir, grading_env(sb.policy, workdir)), timeout=timeout)
    report.timed_out = run.timed_out
    try:
        log = sb.read_file(f"{workdir}/test.log").decode("utf-8", errors="replace")
    except (OSError, SandboxError):
        log = ""
    report.output_tail = log[-4000:]
    if run.timed_out:
        report.errors.append(f"the tests timed out after {timeout:g} s")
    body, problem = log_section(log, nonce)
    if problem:
        report.log_status = "unfinished"
        report.errors.append(problem)
        return {}
    status_map = parse_log(task.log_parser, body)
    if not status_map:
        report.log_status = "no-results"
        report.errors.append(
            f"the {task.log_parser!r} log parser found no test results in the test output "
            f"({len(body)} characters; its end is in output_tail)"
        )
        return {}
    report.log_status = "ok"
    return status_map


def score(task: Task, report: GradeReport, status_map: dict[str, str]) -> None:
    """Per-id outcomes and the verdict, by SWE-bench's rule (see the module docstring)."""
    ids = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS, *task.expected_status]
    for test_id in dict.fromkeys(ids):
        key = lookup(task.log_parser, test_id, status_map)
        if key is None:
            report.tests[test_id] = TestOutcome(MISSING, 0.0, "not found in the test log")
            report.unknown_ids.append((test_id, "not found in the test log"))
        else:
            shown = "" if key == test_id else f"reported as {key!r}"
            report.tests[test_id] = TestOutcome(normal_status(status_map[key]) or "error", 0.0, shown)
    f2p = [report.tests[t].status for t in task.FAIL_TO_PASS]
    p2p = [report.tests[t].status for t in task.PASS_TO_PASS]
    report.f2p_total, report.p2p_total = len(f2p), len(p2p)
    report.f2p_passed = sum(s in PASSING for s in f2p)
    report.p2p_passed = sum(s in PASSING for s in p2p)
    report.errors += expected_mismatches(task, report)
    # as in the JUnit grader: anything short of a complete, error-free run is 0 (a broken test_patch, say)
    clean = (report.applied and not report.timed_out and report.log_status == "ok" and not report.errors
             and not report.tampered)
    no_failure = not any(s in FAILING for s in (*f2p, *p2p))
    report.resolved = clean and no_failure
    if report.reward_mode == "binary":
        report.reward = 1.0 if report.resolved else 0.0
    else:
        p2p_ok = not any(s in FAILING for s in p2p)
        report.reward = report.f2p_passed / report.f2p_total if clean and p2p_ok else 0.0
