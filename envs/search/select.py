"""Selection rules: which of several attempts at a task to keep, without looking at the hidden tests.

A rule scores candidates; the best score wins (ties: the earliest attempt). The agent-visible rules are:

- ``visible_tests``: the project's own test suite as the agent sees it, run in the candidate's sandbox (the
  task's pytest with no file arguments, so pytest collects what the project configures, with its addopts
  neutralised as in grading); the score is the passed share. Hidden tests are not in that sandbox, so they
  cannot count.
- ``majority``: a vote over the final diffs; a candidate scores the number of attempts that ended with the
  same (non-empty) diff.
- ``MODULE:FUNCTION``: a user's scorer, ``FUNCTION(task, candidate) -> float``, imported by name. It gets the
  task object too: keeping away from its test fields is then the scorer's promise.

``oracle`` scores by the hidden tests' reward. It bounds what selection can reach and exists for research;
every report marks it as the oracle.
"""

from __future__ import annotations

import importlib
import re
import shlex
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks.schema import Task

BUILTIN_RULES = ("visible_tests", "majority", "oracle")
_COUNTS = re.compile(r"(\d+) (passed|failed|errors?)\b")


@dataclass
class Candidate:
    """What a rule may look at: one attempt's final (or current) state."""

    index: int
    """The attempt's number within its task."""
    diff: str
    """The attempt's changes as a git diff against the start state."""
    messages: list[dict[str, str]] = field(default_factory=list)
    """The conversation that led there (system, user, then assistant and tool turns)."""
    sandbox: Sandbox | None = None
    """The attempt's live sandbox: its files as the agent left them (None when it is gone)."""
    reward: float = 0.0
    """The hidden tests' reward; only the oracle rule reads it."""


Scorer = Callable[[Task, Candidate], float]


@dataclass(frozen=True)
class SelectRule:
    """A parsed ``--select`` value."""

    name: str
    """'visible_tests', 'majority', 'oracle' or 'MODULE:FUNCTION'."""
    oracle: bool
    """True when the rule reads the hidden tests (only 'oracle')."""
    scorer: Scorer | None = None
    """Scores one candidate; None for majority, which scores the candidates together."""


def parse_rule(name: str, test_timeout_s: float = 600.0) -> SelectRule:
    """The rule called ``name``; an unknown name is an error listing the choices."""
    if name == "visible_tests":
        return SelectRule(name, False, lambda task, c: visible_tests_score(task, c, test_timeout_s))
    if name == "majority":
        return SelectRule(name, False, None)
    if name == "oracle":
        return SelectRule(name, True, lambda task, c: float(c.reward))
    if re.fullmatch(r"[\w.]+:[\w]+", name):
        module, _, attr = name.partition(":")
        try:
            scorer = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(
                f"--select {name}: expected an importable MODULE:FUNCTION; could not load it "
                f"({type(exc).__name__}: {exc})"
            ) from None
        if not callable(scorer):
            raise ValueError(
                f"--select {name}: expected a function (task, candidate) -> float; found {type(scorer).__name__}"
            )
        return SelectRule(name, False, scorer)
    raise ValueError(f"--select: expected one of {', '.join(BUILTIN_RULES)} or MODULE:FUNCTION; found {name!r}")


def visible_tests_score(task: Task, candidate: Candidate, timeout_s: float = 600.0) -> float:
    """Passed share of the project's test suite run in the candidate's own sandbox (what the agent sees)."""
    if task.grader != "junit":
        raise ValueError(
            f"--select visible_tests: task {task.instance_id} runs its tests with "
            f"{task.grader!r}, not pytest; use --select majority or a MODULE:FUNCTION scorer"
        )
    if candidate.sandbox is None:
        raise ValueError("visible_tests: the candidate's sandbox is gone; score before closing it")
    # as grading does, the config's addopts are neutralised: they must not hide tests from the count
    argv = [
        task.python,
        "-m",
        "pytest",
        *task.pytest_options,
        "-o",
        "addopts=",
        "-q",
        "-p",
        "no:cacheprovider",
        "--color=no",
    ]
    # a host command (Sandbox.run), never the agent's shell (whose functions, aliases and traps are the agent's),
    # in the sandbox policy's environment (the host's, not one the agent exported), with every process of the
    # attempt killed first (quiesce: nothing of the agent runs beside it); the candidate's sandbox is a
    # throwaway fork or about to close, so nothing is lost
    sandbox = candidate.sandbox
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in sandbox.policy.env.items())
    result = sandbox.run(f"cd /testbed && exec env -i {env} {shlex.join(argv)} 2>&1", timeout=timeout_s, quiesce=True)
    if result.truncated:
        return 0.0  # pytest's summary is its last line: not read, no score
    counts = Counter()
    last = result.stdout.decode("utf-8", "replace").rstrip().splitlines()[-5:]
    for number, kind in _COUNTS.findall("\n".join(last)):
        counts["error" if kind.startswith("error") else kind] += int(number)
    total = counts["passed"] + counts["failed"] + counts["error"]
    return counts["passed"] / total if total else 0.0


def normal_diff(diff: str) -> str:
    """A diff with its file sections in path order: attempts that changed the same files to the same content
    compare equal whatever order they touched them in."""
    sections = re.split(r"(?m)^(?=diff --git )", diff.strip())
    return "\n".join(sorted(s.strip() for s in sections if s.strip()))


def majority_scores(diffs: Sequence[str]) -> list[float]:
    """For each diff, how many of the diffs equal it; empty diffs score 0 (no vote for doing nothing)."""
    normal = [normal_diff(d) for d in diffs]
    votes = Counter(n for n in normal if n)
    return [float(votes[n]) if n else 0.0 for n in normal]


def pick(scores: Sequence[float]) -> int:
    """The index of the best score; the earliest attempt wins a tie."""
    if not scores:
        raise ValueError("pick: expected at least one score; found none")
    return max(range(len(scores)), key=lambda i: (scores[i], -i))
