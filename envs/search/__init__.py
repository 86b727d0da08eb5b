"""Search at inference over forked sandboxes: pass@k, best-of-N and beam search over tool calls.

``sample(task, n, reply)`` plays n attempts from one prepared start state; ``beam(task, reply, width=W,
depth=D)`` branches mid-episode; ``SearchResult`` has the graded attempts, the selection rule's pick and the
costs and ``SearchResult.tree`` every line of play (:mod:`.nodes`); :mod:`.passk` has the estimator;
:mod:`.select` the rules; :mod:`.harness_lines` the same searches over harness episodes (``sample_harness``,
``beam_harness``: forks by replay). See docs/envs.md ("Search at inference").
"""

from swebox.envs.search.harness_lines import HarnessPolicy, beam_harness, sample_harness
from swebox.envs.search.nodes import Node
from swebox.envs.search.passk import best_of_n_rate, mean_pass_at_k, pass_at_k, report_ks
from swebox.envs.search.results import Attempt, SearchBudget, SearchResult
from swebox.envs.search.select import BUILTIN_RULES, Candidate, SelectRule, parse_rule
from swebox.envs.search.tree import Reply, TaskSearch, beam, sample

__all__ = [
    "BUILTIN_RULES",
    "Attempt",
    "Candidate",
    "HarnessPolicy",
    "Node",
    "Reply",
    "SearchBudget",
    "SearchResult",
    "SelectRule",
    "TaskSearch",
    "beam",
    "beam_harness",
    "best_of_n_rate",
    "mean_pass_at_k",
    "parse_rule",
    "pass_at_k",
    "report_ks",
    "sample",
    "sample_harness",
]
