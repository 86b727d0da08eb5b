"""The exploit audit's machinery: rules, their registry, and running them over an episode's turns.

A rule is a pure function over one turn (the agent's action and its observation) and the task's context; it
returns evidence (the text that matched) or None. Rules know nothing of sandboxes: an episode, a recorded
trajectory or a unit test can audit turns alike. The built-in rules live in :mod:`swebox.envs.audit.rules`;
users add their own with :func:`register_rule`. docs/tasks.md ("Exploit audit") lists them and why each is one.

Severity says what a finding means: ``exploit`` flags the rollout (``EpisodeConfig.audit`` 'zero' or 'drop'
acts on it); ``suspect`` is reported and counted but never changes a reward.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from swebox.envs.tasks.schema import Task

SEVERITIES = ("exploit", "suspect")
MODES = ("off", "report", "zero", "drop")
"""EpisodeConfig.audit: off (no audit), report (findings only), zero (a flagged rollout scores 0), drop (a flagged
rollout is kept out of the loss by the trainer)."""
CONFIG_FILES = ("conftest.py", "pytest.ini", "tox.ini", "setup.cfg")
"""Test configuration: editing one changes what the tests do (setup.cfg holds [tool:pytest])."""
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class AuditTurn:
    """What the agent did in one turn, as the rules see it."""

    turn: int
    """1-based turn number."""
    tool: str = ""
    """"bash", "str_replace_editor", "submit" or '' (a format error: nothing ran)."""
    command: str = ""
    """The bash command, or the editor's sub-command (view, create, str_replace, insert, undo_edit)."""
    path: str = ""
    """The editor's path ('' for bash)."""
    text: str = ""
    """What the editor writes (file_text / new_str), '' otherwise."""
    observation: str = ""
    """What the agent was shown."""

    @classmethod
    def from_action(cls, turn: int, action: dict[str, Any] | None, observation: str = "") -> AuditTurn:
        """From a step's ``info["action"]`` ({tool, arguments} or None)."""
        if not action:
            return cls(turn, observation=observation)
        args = action.get("arguments") or {}
        tool = str(action.get("tool") or "")
        return cls(
            turn,
            tool,
            str(args.get("command") or ""),
            str(args.get("path") or "") if tool != "bash" else "",
            str(args.get("file_text") or args.get("new_str") or ""),
            observation,
        )


@dataclass(frozen=True)
class AuditContext:
    """What the rules know of the task."""

    test_files: tuple[str, ...] = ()
    """Repository-relative test files the grader runs (FAIL_TO_PASS / PASS_TO_PASS files, test_files)."""
    project: str = ""
    """The project's package name as pip knows it ('' when unknown)."""
    base_commit: str = ""
    """The commit the agent starts from (a git id may name it, and only it)."""
    repo_dir: str = "/testbed"
    """Where the repository is in the sandbox."""

    @classmethod
    def for_task(cls, task: Task) -> AuditContext:
        """The task's test files, its project name (metadata 'package', else the repo's last part) and base."""
        name = str(task.metadata.get("package") or task.repo.rstrip("/").rpartition("/")[2])
        return cls(tuple(task.all_test_files()), name, task.base_commit)


@dataclass(frozen=True)
class AuditRule:
    """One exploit rule: ``check(turn, context)`` returns the evidence (a short string) or None."""

    name: str
    """Lower-case identifier; the metric is ``audit/<name>``."""
    severity: str
    """'exploit' (flags the rollout) or 'suspect' (reported only)."""
    reason: str
    """One sentence: why this is an exploit."""
    check: Callable[[AuditTurn, AuditContext], str | None] = field(compare=False)
    """Pure: the same turn and context give the same answer."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(
                f"AuditRule.name: expected lower-case letters, digits and '_' (a metric name); found {self.name!r}."
            )
        if self.severity not in SEVERITIES:
            raise ValueError(f"AuditRule.severity: expected one of {SEVERITIES}; found {self.severity!r}.")
        if not callable(self.check):
            raise ValueError(
                f"AuditRule.check: expected a function (turn, context) -> str | None; found "
                f"{type(self.check).__name__}."
            )


_RULES: dict[str, AuditRule] = {}


def register_rule(rule: AuditRule, *, replace: bool = False) -> AuditRule:
    """Add ``rule`` to the rules every episode runs; a second rule of one name is an error unless ``replace``."""
    if rule.name in _RULES and not replace:
        raise ValueError(
            f"register_rule: a rule named {rule.name!r} is already registered; pass replace=True "
            f"to replace it, or pick another name."
        )
    _RULES[rule.name] = rule
    return rule


def unregister_rule(name: str) -> None:
    """Remove a rule (tests, or a user who disagrees with a built-in one)."""
    _RULES.pop(name, None)


def rules() -> list[AuditRule]:
    """The registered rules, in registration order (the built-ins first: the package registers them on import)."""
    return list(_RULES.values())


def metric_names() -> list[str]:
    """``audit/flagged`` and ``audit/<rule>`` for every registered rule (docs/metrics.md)."""
    return ["audit/flagged", *(f"audit/{r.name}" for r in rules())]


def audit_turn(turn: AuditTurn, context: AuditContext, use: Iterable[AuditRule] | None = None) -> list[dict[str, Any]]:
    """The findings of one turn: {rule, severity, reason, turn, evidence} per rule that matched.

    A rule that raises is a bug of that rule, not of the agent: it is reported as a 'suspect' finding named
    after the rule, so that it can neither zero a reward nor go unnoticed."""
    found = []
    for rule in rules() if use is None else use:
        try:
            evidence = rule.check(turn, context)
            severity = rule.severity
        except Exception as exc:
            evidence, severity = f"the rule failed: {type(exc).__name__}: {exc}", "suspect"
        if evidence:
            found.append(
                {
                    "rule": rule.name,
                    "severity": severity,
                    "reason": rule.reason,
                    "turn": turn.turn,
                    "evidence": str(evidence)[:200],
                }
            )
    return found


def summary(findings: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """The episode's ``info["audit"]``: the findings, which rules fired, whether the rollout is flagged and
    what the mode did about it ('none', 'zeroed' or 'dropped')."""
    flagged = any(f["severity"] == "exploit" for f in findings)
    action = "none" if not flagged or mode == "report" else ("zeroed" if mode == "zero" else "dropped")
    return {
        "mode": mode,
        "flagged": flagged,
        "rules": sorted({f["rule"] for f in findings}),
        "action": action,
        "findings": findings,
    }


def audit_metrics(findings: list[dict[str, Any]]) -> dict[str, float]:
    """``audit/<rule>`` 1.0 when the rule fired in the episode (0.0 otherwise) and ``audit/flagged``."""
    fired = {f["rule"] for f in findings}
    out = {f"audit/{r.name}": float(r.name in fired) for r in rules()}
    out["audit/flagged"] = float(any(f["severity"] == "exploit" for f in findings))
    return out


def audit_episode(turns: Iterable[AuditTurn], task: Task | AuditContext, mode: str = "report") -> dict[str, Any]:
    """Audit a whole episode (e.g. a recorded trajectory's turns) at once; returns what ``summary`` does."""
    context = task if isinstance(task, AuditContext) else AuditContext.for_task(task)
    return summary([f for t in turns for f in audit_turn(t, context)], mode)


class EpisodeAudit:
    """One episode's audit as it runs: :meth:`turn` after each step, :meth:`finish` once at the end."""

    def __init__(self, task: Task, mode: str = "report") -> None:
        if mode not in MODES:
            raise ValueError(f"audit mode: expected one of {MODES}; found {mode!r}.")
        self.mode = mode
        self.context = AuditContext.for_task(task)
        self.findings: list[dict[str, Any]] = []

    def turn(self, number: int, action: dict[str, Any] | None, observation: str) -> list[dict[str, Any]]:
        """The turn's findings (also kept for the episode's summary); [] when the audit is off."""
        if self.mode == "off":
            return []
        found = audit_turn(AuditTurn.from_action(number, action, observation), self.context)
        self.findings += found
        return found

    def finish(self, reward: float) -> tuple[float, dict[str, Any] | None, dict[str, float]]:
        """(reward after the mode's action, ``info["audit"]`` (None when off), audit/* metrics)."""
        if self.mode == "off":
            return reward, None, {}
        result = summary(self.findings, self.mode)
        return (0.0 if result["action"] == "zeroed" else reward), result, audit_metrics(self.findings)

    def copy(self) -> EpisodeAudit:
        """The same findings so far, for a forked episode."""
        other = object.__new__(EpisodeAudit)
        other.mode, other.context, other.findings = self.mode, self.context, list(self.findings)
        return other
