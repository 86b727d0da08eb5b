"""The tree a search leaves behind: one node per line of play, and the chosen line's path through it.

A line is an episode in a sandbox of its own. A line from the start state is a root; a fork of a live line at
turn k is a child of it (the parent plays on as one of the beam's children, so a node's own turns may go past
the turns its children were forked at). Each node keeps the turns it played itself (after its fork), the
selection rule's value of its state at each beam level it was ranked at and whether the beam kept it, and how
it ended: graded (its attempt: reward, resolved, the rule's score) or pruned (closed ungraded). The chosen
path is the picked attempt's line and its ancestors; its turns, joined, are the picked attempt's whole
conversation (what ``swebox eval --out`` writes as the record's ``turns``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Node:
    """One line of play."""

    index: int
    """The line's number in the search (an ended line's ``Attempt.index``)."""
    parent: int | None
    """The line it was forked from; None for a line from the start state."""
    forked_at: int
    """The parent's turn count at the fork (0 for a root): the node's turns are numbered from forked_at + 1."""
    turns: list[dict[str, Any]] = field(default_factory=list)
    """The turns this line played itself, each a :func:`swebox.envs.episodes.turns.turn_record` (``turn`` numbers it
    in the episode): the shape of a trajectory record's turns."""
    values: list[dict[str, Any]] = field(default_factory=list)
    """At each beam level it was ranked at: ``level`` (1 = the first fork), ``turn``, ``value`` (the selection
    rule's value of its state then) and ``kept`` (False: pruned there)."""
    status: str = "live"
    """'ended' (graded, see ``attempt``) or 'pruned' (a beam dropped it); 'live' only while searching."""
    attempt: int = -1
    """Position of its graded attempt in ``SearchResult.attempts`` (-1: none)."""


def chosen_path(nodes: list[Node], line: int) -> list[int]:
    """The line numbers from the root to ``line`` (empty when ``line`` is not in the tree)."""
    by_index = {n.index: n for n in nodes}
    path: list[int] = []
    while line in by_index and line not in path:
        path.append(line)
        line = by_index[line].parent
    return path[::-1]


def path_turns(nodes: list[Node], path: list[int]) -> list[dict[str, Any]]:
    """Every turn of the line at the end of ``path``: each ancestor's up to the next node's fork, then its own."""
    by_index = {n.index: n for n in nodes}
    out: list[dict[str, Any]] = []
    for here, after in zip(path, [*path[1:], None], strict=True):
        until = by_index[after].forked_at if after is not None else None
        out += [t for t in by_index[here].turns if until is None or t["turn"] <= until]
    return out
