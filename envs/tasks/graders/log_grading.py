"""The 'log' grader: run the task's test command and read its output with SWE-bench's parser for the repo.

This is how SWE-bench's harness decides (``eval.sh`` then ``get_logs_eval`` and ``get_eval_report``), kept
inside swebox's grading (:func:`swebox.envs.tasks.graders.grading.grade`): the fresh sandbox, the filtered diff, the
restored test files and ``test_patch`` come first, as for the JUnit grader. Then, in /testbed:

1. two canary tests are appended to a test file the command runs (:mod:`.log_canaries`), and the log monitor
   (``log_monitor.py``, a separate interpreter holding the run's HMAC key, which the tested process never
   sees) runs a script under ``env -i`` with a fixed environment (:func:`grading_env`: PATH/HOME/locale; in a
   container image, the image's own): the task's ``eval_commands``
   (SWE-bench's spec eval_commands, e.g. locale exports), a start marker carrying a random nonce,
   ``test_cmd`` (the repository's test command with its directives) and an end marker with its exit status;
   stdout and stderr go to one pipe, as ``docker exec`` gives the harness one stream. The monitor keeps
   what it reads and signs it with bash's exit status;
2. only a log with a valid signature, one start and one end marker (a second one can only come from the
   code under test) and a script that ran to its end is read; the text between the markers goes to the
   task's parser (:mod:`swebox.envs.tasks.graders.log_parsers`), both canaries must have their planted status, and
   (pytest-family logs) no task test may pass after a line that reported it failed;
3. the verdict is the official one: a test passes when its status is PASSED or XFAIL, fails when it is
   FAILED, ERROR or absent from the log, and a SKIPPED test is neither (SWE-bench's ``test_passed`` /
   ``test_failed``); ``resolved`` = no F2P or P2P test fails and nothing went wrong (a ``test_patch`` that
   does not apply is unresolved, as in the harness). swebox adds: a log without the end marker (timeout, a
   killed run) or in which the parser finds no test at all is unresolved with the reason, tampering (a
   forged or doubled marker, an unsigned log, a canary with the wrong status) is reward 0, and every
   ``expected_status`` entry must match. A parser that raises on the log (the code under test can print a
   line that crashes it) makes the log ``unparsable``: reward 0 with the reason, never a masked episode.

A log is text the code under test can print to, as under the official harness. What swebox adds: the agent
cannot change the tests, their configuration, the environment or the command that runs them; it cannot
rewrite the log after the fact, fake the run's end, make every test pass unseen (the canaries) or print a
pass after pytest's failure. What the log alone cannot show is targeted forging: code under test that turns
only the task's own failing tests into passes inside the command (pytest's report patched, or an fd-level
filter on the log's pipe), leaving the canaries honest. For pytest-family logs (``Task.confirm_mode ==
'runner'``) a verdict that earns a reward is therefore confirmed by running the F2P and P2P tests again under
swebox's runner, whose channel is pinned and whose watchdog sees report patching (:mod:`.log_confirm`, called by
:func:`swebox.envs.tasks.graders.grading.grade` after :func:`score`). Django's, sympy's, the JavaScript, Go,
Rust and C/C++ logs, pytest-dev/pytest's rows and tasks with ``confirm='off'`` keep the gap; see docs/tasks.md.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import shlex
from pathlib import Path

from swebox.envs.cache.images.records import START_SCRIPT
from swebox.envs.cache.toolchains import toolchain_env
from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy
from swebox.envs.tasks.graders import log_canaries
from swebox.envs.tasks.graders.junit import MISSING
from swebox.envs.tasks.graders.log_parsers import UnparsableLog, lookup, normal_status, parse_log
from swebox.envs.tasks.graders.monitor_loop import shipped
from swebox.envs.tasks.graders.report import GradeReport, TestOutcome, expected_mismatches
from swebox.envs.tasks.graders.verdict import clean_vars
from swebox.envs.tasks.schema import Task

FAILING = frozenset({"failed", "error", MISSING})
"""Statuses SWE-bench's test_failed counts as a failure (absent from the log included)."""
PASSING = frozenset({"passed", "xfailed"})
"""Statuses SWE-bench's test_passed counts as a pass."""
MONITOR = Path(__file__).with_name("log_monitor.py")
MONITOR_PYTHON = "/venv/bin/python"
"""The env layer's interpreter runs the monitor (stdlib only, Python 3.5 syntax: every recipe's can)."""
MAX_SIGNED_BYTES = 257 * 1024 * 1024
LINE_UNCHECKED = frozenset({"django/django", "sympy/sympy"})
"""Parsers whose logs :func:`passes_after_failures` does not read line by line (multi-line results)."""
_RESULT_WORD = re.compile(r"FAIL|ERROR")  # FAIL: go test's "--- FAIL:" as well as FAILED


def eval_script(task: Task, nonce: str) -> str:
    """The bash script the monitor runs in /testbed (no ``set -e``: like eval.sh, a failing setup line goes on)."""
    return "\n".join(
        [
            "cd /testbed",
            *task.eval_commands,
            f"printf '%s\\n' 'SWEBOX-LOG-START {nonce}'",
            task.test_cmd,
            "status=$?",
            f"printf '\\n%s %s\\n' 'SWEBOX-LOG-END {nonce}' \"$status\"",
            "exit 0",
            "",
        ]
    )


def grading_env(policy: SandboxPolicy, workdir: str, toolchains: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment the script starts with; nothing of it comes from the agent's sandbox.

    Normally a fixed one (the env layer's /venv first), with the environment of the task env's toolchain
    layers (``EnvSpec.toolchains``: PATH to go or cargo, GOROOT, CARGO_HOME...; the task's, not the agent's).
    A sandbox running a container image (its policy
    reads the image's shell start through ``BASH_ENV``: :func:`swebox.envs.cache.images.image_env`) gets the
    image's own, as ``docker exec`` gives SWE-bench's harness: the image config's Env, its HOME, and
    ``BASH_ENV``, so bash sources the image's ``~/.bashrc`` first, where SWE-bench images activate their
    conda env (a bare ``pytest`` in ``test_cmd`` is the env's). The policy is the image record's, and the
    grading sandbox is a fresh one of the image with only the filtered diff in /testbed, so the ~/.bashrc it
    reads is the image's, never one the agent edited.
    """
    if policy.env.get("BASH_ENV") == START_SCRIPT:
        return dict(policy.env)
    env = clean_vars(workdir)
    return {**env, **toolchain_env(toolchains)} if toolchains else env


def run_command(workdir: str, env: dict[str, str]) -> str:
    """The shell command that starts the log monitor in the clean environment ``env`` (``env -i``).

    The monitor's interpreter is the env layer's; a container image has no /venv, so there it is the
    ``python3`` on ``env``'s PATH (SWE-bench images: conda's base interpreter or the system's).
    """
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (
        f"cd /testbed && py={MONITOR_PYTHON} && {{ [ -x $py ] || py=python3; }} && "
        f"env -i {assignments} $py -I -S -B {workdir}/log_monitor.py {workdir}"
    )


def log_section(log: str, nonce: str) -> tuple[str, str, str]:
    """(text between the markers, problem, tampering); problem and tampering are '' for one marker of each.

    The markers carry the run's nonce, which the code under test can learn (it names the grading folder):
    a second start or end marker can only come from it, so it is tampering, never a shorter log.
    """
    start, end = f"SWEBOX-LOG-START {nonce}\n", f"\nSWEBOX-LOG-END {nonce} "
    starts, ends = log.count(start), log.count(end)
    if starts > 1 or ends > 1:
        return (
            "",
            "",
            (
                f"the test log holds {starts} start and {ends} end markers of this run (one each is "
                "printed by the grader): the code under test printed them"
            ),
        )
    _, found, rest = log.partition(start)
    if not found:
        return "", "the test command never started (no start marker in the log)", ""
    body, found, _ = rest.rpartition(end)
    if not found:
        return rest, "the test command did not finish (no end marker: killed, crashed or timed out)", ""
    return body, "", ""


def read_signed(data: bytes | None, key: bytes) -> tuple[dict, str, str]:
    """(header, log text, why there is nothing to believe); the log monitor's signed file, verified."""
    if data is None:
        return {}, "", "no log from the log monitor (it was killed or never ran)"
    tag, _, payload = data.partition(b"\n")
    mac = hmac.new(key, payload, hashlib.sha256).hexdigest().encode()
    if not tag.startswith(b"SWEBOX-LOG ") or not hmac.compare_digest(tag[len(b"SWEBOX-LOG ") :], mac):
        return {}, "", "forged"
    head, _, log = payload.partition(b"\n")
    return json.loads(head), log.decode("utf-8", errors="replace"), ""


def run_tests(sb: Sandbox, task: Task, report: GradeReport, workdir: str, nonce: str, timeout: float) -> dict:
    """Run the script under the log monitor, read its signed log, return the parser's status map ({} with
    report.errors or report.tampered saying why)."""
    canaries = log_canaries.plant(sb, task, workdir)
    key = secrets.token_bytes(32)
    sb.write_file(f"{workdir}/log_monitor.py", shipped(MONITOR))  # monitor_loop.py inside
    sb.write_file(f"{workdir}/log_monitor.json", json.dumps({"script": eval_script(task, nonce), "timeout": timeout}))
    sb.write_file(f"{workdir}/key", key, mode=0o600)
    # a host command (sb.run): the monitor and the tested processes are no children of the sandbox's shell
    tools = task.env.toolchains if task.env is not None else ()
    run = sb.run(run_command(workdir, grading_env(sb.policy, workdir, tools)), timeout=timeout + 30, max_stdout=1 << 20)
    said = (run.stdout.decode("utf-8", "replace") + run.stderr).strip()
    try:
        signed = sb.read_file(f"{workdir}/log.signed", max_bytes=MAX_SIGNED_BYTES)
    except (OSError, SandboxError):
        signed = None
    head, log, unusable = read_signed(signed, key)
    report.output_tail = log[-4000:]
    report.timed_out = run.timed_out or bool(head.get("timed_out"))
    if report.timed_out:
        report.errors.append(f"the tests timed out after {timeout:g} s")
    if unusable == "forged":
        report.log_status = "unfinished"
        report.tampered.append("the test log is not signed with the run's key")
        return {}
    if unusable:
        report.log_status = "unfinished"
        report.errors.append(unusable + (f"; it said: {said[-500:]}" if said else ""))
        return {}
    if head.get("cut"):
        report.errors.append("the test log was cut at the log monitor's limit")
    body, problem, tampering = log_section(log, nonce)
    if not tampering and not problem and head.get("exit") != 0:
        problem = f"the test script was stopped before its end (exit status {head.get('exit')})"
    if tampering or problem:
        report.log_status = "unfinished"
        (report.tampered if tampering else report.errors).append(tampering or problem)
        return {}
    try:
        status_map = parse_log(task.log_parser, body)
        after = passes_after_failures(task, body, status_map) if status_map else []
    except UnparsableLog as exc:  # the tested code printed what the parser cannot read: 0, never a mask
        report.log_status = "unparsable"
        report.errors.append(str(exc))
        return {}
    if not status_map:
        report.log_status = "no-results"
        report.errors.append(
            f"the {task.log_parser!r} log parser found no test results in the test output "
            f"({len(body)} characters; its end is in output_tail)"
        )
        return {}
    report.log_status = "ok"
    report.tampered += log_canaries.problems(canaries, status_map)
    report.tampered += after
    return status_map


def passes_after_failures(task: Task, body: str, status_map: dict[str, str]) -> list[str]:
    """The task's tests whose last (believed) status is a pass although the log reported them failed before.

    A pytest-family parser keeps a test's last line. pytest prints a test's failure in its progress and in
    the short summary, which lists passes before errors and failures and ends the run, so in an honest log
    a failed test's last line is a failure (a teardown error after a pass ends as ERROR). A pass after a
    failure is a result line printed after pytest's own: by the code under test (at exit, say). Django's
    and sympy's parsers read multi-line results, so their logs are not checked line by line.
    """
    if task.log_parser in LINE_UNCHECKED:
        return []
    keys = {lookup(task.log_parser, t, status_map) for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)}
    passed = {k for k in keys if k is not None and normal_status(status_map[k]) in PASSING}
    failed: set[str] = set()
    for line in body.split("\n"):
        if passed and _RESULT_WORD.search(line):
            found = parse_log(task.log_parser, line).items()
            failed |= {k for k, s in found if k in passed and s in ("FAILED", "ERROR")}
    return [
        f"test {k} was reported failed and then passed: a result line printed after pytest's own"
        for k in sorted(failed)
    ]


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
    clean = (
        report.applied
        and not report.timed_out
        and report.log_status == "ok"
        and not report.errors
        and not report.tampered
    )
    no_failure = not any(s in FAILING for s in (*f2p, *p2p))
    report.resolved = clean and no_failure
    if report.reward_mode == "binary":
        report.reward = 1.0 if report.resolved else 0.0
    else:
        p2p_ok = not any(s in FAILING for s in p2p)
        report.reward = report.f2p_passed / report.f2p_total if clean and p2p_ok else 0.0
