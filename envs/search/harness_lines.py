"""Search over harness episodes: an agent program plays each line, its model calls through the gateway.

``sample_harness(task, n, policy)`` plays n independent harness episodes from one prepared start state; they
are graded, scored and selected exactly as text lines are (:mod:`.tree`). ``beam_harness`` forks by replay
(:mod:`swebox.envs.gateway.replay`): a running program cannot be copied, so a line forked at call k is a fresh
harness run from the start state whose first k calls the gateway answers from the line's records, prompts
checked; it then samples one call of its own and is paused (its next call refused) so the selection rule can
value the state it left. The kept lines play to the end the same way: replay, then sample until the harness
exits. Each run pays the harness's own commands again (``SearchResult.replayed`` counts the calls replayed).
A child whose prompts leave the parent's (time, randomness, a command whose output varies) has diverged: it
ends as a failed attempt (reason ``diverged``, reward 0, the error says where), is never graded, and is picked
only when every attempt diverged.

A tree node here is a line of calls: kid 0 of a fork is its parent's node playing on (as in the text beam),
the others are new nodes forked at the parent's call count; a node's turns are the calls it sampled itself.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from swebox.envs.episodes.loop import TextPolicy
from swebox.envs.gateway.calls import CallRecord, ChatModel
from swebox.envs.gateway.harness import HarnessConfig, HarnessRun, end_harness, run_harness, turn_records
from swebox.envs.gateway.replay import ReplayModel
from swebox.envs.gateway.turns import audit_calls
from swebox.envs.search.nodes import Node
from swebox.envs.search.results import Attempt, SearchResult
from swebox.envs.search.select import pick
from swebox.envs.search.tree import SearchLine, TaskSearch, sample_lines
from swebox.envs.tasks.schema import Task

SEED_STRIDE = 100_003
"""Run r samples with seed + r * SEED_STRIDE (+ the call's index, the gateway's rule): siblings differ."""


@dataclass
class HarnessPolicy:
    """Who plays a search's harness lines."""

    harness: HarnessConfig
    """The agent program, its install and its per-episode gateway limits."""
    model_for: Callable[[int], ChatModel]
    """The gateway's model for the line with this number (a fresh scripted model per line, or one policy)."""
    seed: int | None = None
    """Sampling seed of the search's runs (None: the model's own randomness)."""


@dataclass
class _HarnessLine(SearchLine):
    records: list[CallRecord] = field(default_factory=list)
    """The answered calls of the line's run, replayed ones first: a child's replay prefix."""


def _no_text_turns(messages: list[dict[str, str]]) -> str:
    raise RuntimeError("a harness search plays no text turns: its lines are agent programs")


class HarnessSearch(TaskSearch):
    """One task's search whose lines are harness runs (see the module's docstring)."""

    def __init__(self, task: Task, policy: HarnessPolicy, **options: Any) -> None:
        super().__init__(task, _no_text_turns, **options)
        self.policy = policy
        self._runs = 0

    def run(self, node: Node, prefix: list[CallRecord], stop_after: int | None) -> _HarnessLine | None:
        """Play ``node``'s line in a fresh sandbox: replay ``prefix``, then sample until the harness exits, or
        until ``stop_after`` calls are answered. Returns the live line when it was paused; None when it ended
        (graded, or failed when it diverged, and closed)."""
        episode = self._opened.episode(started=True)
        self.result.sandboxes += 1
        line = _HarnessLine(episode, TextPolicy(_no_text_turns, []), node)  # its loop plays no turns
        self._live.append(line)
        model = ReplayModel(prefix, self.policy.model_for(node.index), stop_after)
        seed = None if self.policy.seed is None else self.policy.seed + SEED_STRIDE * self._runs
        self._runs += 1
        harness, imposed = self._limited(len(prefix))
        done = run_harness(episode, model, harness, seed)
        line.records = [r for r in done.records if r.completion is not None]
        if line.records:
            last = line.records[-1]
            assert last.completion is not None
            line.policy.messages = [*last.messages, {"role": "assistant", "content": last.completion.text}]
            self.result.prompt = self.result.prompt or [dict(m) for m in line.records[0].messages]
        self.result.replayed += model.replayed
        if not model.finished_replay() or model.paused:
            # not graded now: its turns carry the rules that fire on them all the same, read by a copy of the
            # episode's audit (a paused line's own audit reads its calls when it ends: finish())
            probe = episode.audit.copy()
            audit_calls(probe, done.records)
            self._played(node, done, len(prefix), probe.findings)
            if not model.finished_replay():
                self._fail(line, f"replay diverged: {model.diverged}")
                return None
            return line
        reward, info = end_harness(episode, harness, done, imposed)  # cut by the search's limits: "budget"
        self._played(node, done, len(prefix), (info.get("audit") or {}).get("findings"))
        self._finish(line, reward, info)
        return None

    def _played(self, node: Node, done: HarnessRun, replayed: int, findings: list[dict[str, Any]] | None) -> None:
        """Add the calls ``node``'s run sampled itself (past the ``replayed`` prefix) to its turns, each with the
        rules of the episode's audit ``findings`` that fired on it, as a plain harness episode's turns."""
        new = turn_records(done.records, findings)[replayed:]
        node.turns += new
        self.result.turns += len(new)
        if self.budget.max_turns and self.result.turns >= self.budget.max_turns:
            self.hit("max_turns")

    def _limited(self, replayed: int) -> tuple[HarnessConfig, tuple[str, ...]]:
        """The harness with the search's budget folded into its gateway limits (the turns left, replayed calls
        not being turns, and the seconds left), and the GatewayLimits fields the budget tightened."""
        own = limits = self.policy.harness.limits
        if self.budget.max_turns:
            left = max(1, self.budget.max_turns - self.result.turns)
            limits = dataclasses.replace(limits, max_calls=min(limits.max_calls, replayed + left))
        if self.budget.wall_s:
            left_s = max(1.0, self.budget.wall_s - (time.monotonic() - self._t0))
            limits = dataclasses.replace(limits, wall_s=min(limits.wall_s, left_s))
        tightened = (("max_calls", limits.max_calls < own.max_calls), ("wall_s", limits.wall_s < own.wall_s))
        imposed = tuple(name for name, tight in tightened if tight)
        return dataclasses.replace(self.policy.harness, limits=limits), imposed

    def retire(self, line: _HarnessLine) -> None:
        """Close a paused line whose node plays on in a new run (kid 0 of its fork)."""
        self._live.remove(line)
        line.episode.close()

    def _fail(self, line: _HarnessLine, error: str) -> None:
        """End a diverged line as a failed attempt: reward 0, not graded, not scored."""
        node = line.node
        self._live.remove(line)
        line.episode.close()
        node.status, node.attempt = "ended", len(self.result.attempts)
        self.result.attempts.append(
            Attempt(line.index, node.parent, node.forked_at, len(line.records), "diverged", 0.0, False, "", error=error)
        )

    def finish(self) -> SearchResult:
        """As a text search's; a diverged attempt is picked only when every attempt diverged. A paused line
        ends here graded as it stands, its calls read by its episode's audit first (as end_harness does)."""
        for line in self._live:
            audit_calls(line.episode.audit, cast(_HarnessLine, line).records)
        result = super().finish()
        attempts = result.attempts
        played = [i for i, a in enumerate(attempts) if a.reason != "diverged"]
        if played and result.picked not in played:
            result.picked = played[pick([attempts[i].score for i in played])]
        return result


def sample_harness(task: Task, n: int, policy: HarnessPolicy, **options: Any) -> SearchResult:
    """n independent harness episodes from one prepared start state, each played to its end (pass@k,
    best-of-n); ``options`` as :func:`swebox.envs.search.sample`'s."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"sample_harness(n=...): expected a whole number of attempts >= 1; found {n!r}.")
    with HarnessSearch(task, policy, **options) as search:
        return sample_lines(search, n, lambda: search.run(search.new_node(None, 0), [], None))


def beam_harness(task: Task, policy: HarnessPolicy, *, width: int, depth: int, **options: Any) -> SearchResult:
    """A beam over model calls, forking by replay: at each of ``depth`` levels every live line becomes
    ``width`` runs that replay it and sample one call each; the ``width`` best by the rule's value live on."""
    if not isinstance(width, int) or width < 1 or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"beam_harness(width, depth): expected width >= 1 and depth >= 0; found {width!r}, {depth!r}")
    with HarnessSearch(task, policy, **options) as search:
        # a frontier entry: the node, its calls so far, and its paused run (None for the root before it plays)
        frontier: list[tuple[Node, list[CallRecord], _HarnessLine | None]] = [(search.new_node(None, 0), [], None)]
        for level in range(1, depth + 1):
            children: list[_HarnessLine] = []
            for node, prefix, paused in frontier:
                for k in range(width):
                    hit = search.out_of_budget(more_sandboxes=1)
                    if hit:
                        search.hit(hit)
                        if k == 0 and paused is not None:
                            children.append(paused)  # ends below, graded as it stands
                        break
                    if k == 0:
                        if paused is not None:
                            search.retire(paused)
                        kid = node
                    else:
                        search.result.forks += k == 1
                        kid = search.new_node(node.index, len(prefix))
                    line = search.run(kid, prefix, stop_after=len(prefix) + 1)
                    if line is not None:
                        children.append(line)
            if search.out_of_budget() or not children:
                frontier = [(c.node, c.records, c) for c in children]
                break
            kept = cast(list[_HarnessLine], search.keep(list(children), width, level))
            frontier = [(c.node, c.records, c) for c in kept]
        for node, prefix, paused in frontier:
            hit = search.out_of_budget(more_sandboxes=0 if paused else 1)
            if hit:
                search.hit(hit)
                break  # the paused lines end in finish(), graded as they stand
            if paused is not None:
                search.retire(paused)
            search.run(node, prefix, stop_after=None)
        return search.finish()
