"""What grading found out: :class:`GradeReport` and its per-test :class:`TestOutcome`, shared by both graders.

The pytest grader (grading.py) and the log grader (log_grading.py) fill the same report; it lives here, apart
from both, so that neither grader imports the other to reach it (log_grading builds on grading's run; grading calls
log_grading for grader='log': one direction only).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from swebox.envs.tasks.graders.junit import MISSING
from swebox.envs.tasks.schema import Task


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
    """Every F2P test passed and every P2P test passed (or stayed xfailed) in a complete, consistent,
    error-free run with a signed verdict; the diff applied; nothing was tampered with."""
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
    """Forged verdicts, inconsistent report streams, canaries that came out wrong, what the watchdog saw."""
    errors: list[str] = field(default_factory=list)
    """Everything else that went wrong (a refused diff, a timeout, a crash, an incomplete run, a test_patch
    that did not apply). Any entry here or in ``tampered`` forces reward 0."""
    timed_out: bool = False
    """The test run hit its timeout."""
    verdict: str = ""
    """ok (the grade monitor's signed verdict) | missing | forged | '' (the tests did not run)."""
    log_status: str = ""
    """ok | unfinished (no end marker) | no-results (the parser found no test) | unparsable (the parser raised
    on the log) (grader 'log')."""
    confirm: str = ""
    """The log verdict's confirmation under swebox's runner (grader 'log', ``Task.confirm_mode``): '' (not
    run: another grader, or the log verdict earned nothing) | 'off' (the task opts out; the log alone decided)
    | 'confirmed' (no F2P or P2P test failed under the runner, in a clean signed run) | 'failed' (a signed run
    of the runner disagreed or saw tampering) | 'unfinished' (the rerun left no signed verdict or timed out). Both
    of the last give reward 0, the reason in ``errors`` or ``tampered`` (entries start 'confirm under the
    runner:')."""
    rewritten: dict[str, int] = field(default_factory=dict)
    """The rewritten-test cache in this grade (rewrite_cache): ``entries`` given to pytest, of which
    ``compiled`` were compiled now (the rest were cached); empty when the cache was off."""
    durations: dict[str, float] = field(default_factory=dict)
    """Seconds per phase: start, apply, rewrite (the rewritten-test cache), tests, confirm (the log verdict's
    confirmation, its own sandbox included), total."""
    output_tail: str = ""
    """The end of pytest's terminal output, for humans; never used for the verdict."""
    usage: dict[str, Any] = field(default_factory=dict)
    """What the grading sandbox used (swebox.envs.sandbox.Usage as a dict: cpu_s, peak_bytes, upper_bytes,
    source); empty when it could not be read."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """What produced this verdict: task and layer digests, grader and versions, dataset row, sandbox policy
    digest (swebox.envs.tasks.graders.provenance, docs/tasks.md "Provenance")."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def expected_mismatches(task: Task, report: GradeReport) -> list[str]:
    """One line per ``Task.expected_status`` entry whose outcome differs (a missing test never matches)."""
    from swebox.envs.tasks.graders.log_parsers import normal_status

    out = []
    for test_id, want in task.expected_status.items():
        got = report.tests[test_id].status if test_id in report.tests else MISSING
        if got != normal_status(want):
            out.append(f"expected_status: {test_id} should be {want}, is {got}")
    return out
