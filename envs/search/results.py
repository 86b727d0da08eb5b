"""What a search over one task records and is bounded by: its budgets (``SearchBudget``), each ended line of play
(``Attempt``) and the search's result (``SearchResult``: the attempts, the rule's pick, the tree, what it cost).

Plain records: tree.py plays the lines that fill them, harness_lines.py does the same for harness lines.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from swebox.envs.search.nodes import Node, chosen_path, path_turns
from swebox.envs.search.passk import pass_at_k


@dataclass
class SearchBudget:
    """Limits of one task's search; 0 means no limit."""

    max_turns: int = 0
    """Policy turns over all lines together."""
    max_sandboxes: int = 0
    """Sandboxes alive at once (the lines being played, plus a fork being scored)."""
    wall_s: float = 0.0
    """Wall-clock seconds for the whole search of the task."""

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_sandboxes", "wall_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"SearchBudget.{name}: expected >= 0 (0 = no limit); found {getattr(self, name)}")
        if self.max_sandboxes == 1:
            raise ValueError("SearchBudget.max_sandboxes: expected 0 or >= 2 (a line and one fork); found 1")


@dataclass
class Attempt:
    """One ended line of play."""

    index: int
    """Its number within the task's search."""
    parent: int | None
    """The line it was forked from (None: started from the task's start state)."""
    forked_at: int
    """The turn it was forked at (0 for a line from the start state)."""
    turns: int
    """Turns it played, those before the fork included."""
    reason: str
    """Why it ended: submitted, max_turns, time_limit, budget, error."""
    reward: float
    """The hidden tests' reward."""
    resolved: bool
    """The hidden tests all passed."""
    diff: str
    """Its final changes."""
    grade: dict[str, Any] | None = None
    """The hidden tests' grade report (``GradeReport.to_dict()``); None when it was not graded."""
    score: float = 0.0
    """The selection rule's score."""
    error: str = ""
    """What went wrong, when the line errored."""
    audit: dict[str, Any] | None = None
    """The exploit audit's summary of the line (its episode's ``info["audit"]``: flagged, rules, findings by
    turn); None when it was not graded or the audit is off."""


@dataclass
class SearchResult:
    """A task's search: its graded attempts, the rule's pick, and what it cost."""

    task_id: str
    rule: str
    """The selection rule; reports call 'oracle' the oracle (it reads the hidden tests)."""
    oracle: bool
    attempts: list[Attempt] = field(default_factory=list)
    picked: int = -1
    """Index (in ``attempts``) of the attempt the rule picked; -1 when there is none."""
    sandboxes: int = 0
    """Sandboxes started for the lines (forks included; scoring forks too)."""
    forks: int = 0
    """Forks of live lines (each a snapshot and its children)."""
    fork_s: float = 0.0
    """Seconds spent forking."""
    pruned: int = 0
    """Live lines a beam dropped (closed without grading)."""
    turns: int = 0
    """Policy turns over all lines."""
    replayed: int = 0
    """Model calls of harness lines answered from a parent's records (a fork by replay; its harness's commands
    ran again: :mod:`swebox.envs.gateway.replay`)."""
    wall_s: float = 0.0
    budgets_hit: list[str] = field(default_factory=list)
    """The budgets that stopped or narrowed the search, in the order they did (empty when none did)."""
    prompt: list[dict[str, str]] = field(default_factory=list)
    """The first messages every line started from (system, user)."""
    tree: list[Node] = field(default_factory=list)
    """Every line of play, in the order they started (:mod:`swebox.envs.search.nodes`)."""

    @property
    def resolved_count(self) -> int:
        return sum(a.resolved for a in self.attempts)

    @property
    def picked_resolved(self) -> bool:
        return self.picked >= 0 and self.attempts[self.picked].resolved

    @property
    def chosen(self) -> list[int]:
        """The picked attempt's line and its ancestors, root first (empty when nothing was picked)."""
        return chosen_path(self.tree, self.attempts[self.picked].index) if self.picked >= 0 else []

    def chosen_turns(self) -> list[dict[str, Any]]:
        """The picked attempt's whole conversation, turn by turn, through the tree."""
        return path_turns(self.tree, self.chosen)

    def pass_at(self, k: int) -> float:
        """Unbiased pass@k over this task's attempts."""
        return pass_at_k(len(self.attempts), self.resolved_count, k)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(resolved_count=self.resolved_count, picked_resolved=self.picked_resolved, chosen=self.chosen)
        return out
