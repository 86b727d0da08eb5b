"""Search over attempts at one task: N samples from one prepared start state, or a beam over tool calls.

Every line of play is an episode in a sandbox of its own. ``sample`` starts N of them from one prepared
start (no repeated setup: each is a new overlay over the same snapshot). ``beam`` plays one line, and at each
of ``depth`` levels forks every live line into ``width`` children (:meth:`SWEEpisode.fork`: a snapshot of
the line's files, milliseconds), lets each child take one policy turn, keeps the ``width`` best children by
the selection rule's value of their current state, and plays the survivors to the end. Ended lines are
graded by the hidden tests (that is the evaluation) and scored by the rule (that is the selection); the
attempt the rule picks is best-of-N's answer. ``SearchResult.tree`` keeps every line as a node
(:mod:`.nodes`): its turns, its values and whether the beam kept it, how it ended. Budgets bound the total
turns, the sandboxes alive at once and the wall time; when one runs out, the live lines end there and are
graded as they stand.

A policy here is ``reply(messages) -> str``: the conversation so far (system, user, then assistant and tool
turns) in, the next model reply out. Processes are not part of a fork: a child's shell starts afresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.episode_state import StartState
from swebox.envs.episodes.layers_resolver import LayerSource
from swebox.envs.episodes.loop import EpisodeLoop, TextPolicy
from swebox.envs.episodes.task_episodes import open_task
from swebox.envs.search.nodes import Node
from swebox.envs.search.results import Attempt, SearchBudget, SearchResult
from swebox.envs.search.select import Candidate, SelectRule, majority_scores, parse_rule, pick
from swebox.envs.tasks.schema import Task

Reply = Callable[[list[dict[str, str]]], str]


@dataclass
class SearchLine:
    """One live line of a search: its episode, its policy and its node in the tree."""

    episode: SWEEpisode
    policy: TextPolicy
    """The conversation so far (``policy.messages``: the first messages, then each reply and observation)."""
    node: Node
    loop: EpisodeLoop = field(init=False)
    """Plays the line's turns (the episode layer's one loop), one at a time."""

    def __post_init__(self) -> None:
        self.loop = EpisodeLoop(self.episode, self.policy, played=self.episode.turns)

    @property
    def index(self) -> int:
        return self.node.index

    @property
    def messages(self) -> list[dict[str, str]]:
        return self.policy.messages


class TaskSearch:
    """One task's search state: its layers, its prepared start, its live lines and its budget."""

    def __init__(
        self,
        task: Task,
        reply: Reply,
        *,
        layers: list | None = None,
        source: LayerSource | dict | None = None,
        config: EpisodeConfig | dict | None = None,
        rule: str | SelectRule = "visible_tests",
        budget: SearchBudget | None = None,
    ) -> None:
        self.task, self.reply = task, reply
        self.config = EpisodeConfig.from_dict(config)
        self.rule = rule if isinstance(rule, SelectRule) else parse_rule(rule, self.config.grade_timeout_s)
        self.budget = budget or SearchBudget()
        self.result = SearchResult(task.instance_id, self.rule.name, self.rule.oracle)
        self._t0 = time.monotonic()
        self._live: list[SearchLine] = []
        self._scores: list[float] = []
        self._index = -1  # the last line's number
        # the task opened once: its layers and its prepared start (whose snapshot it holds between lines)
        self._opened = open_task(task, list(layers) if layers is not None else source, self.config, prepare=True)
        self.config = self._opened.config  # with the sandbox fields of the task's image, when it has one
        self._policy = self._opened.policy
        self.start: StartState = self._opened.start

    # -- budget -------------------------------------------------------------------------------------------
    def hit(self, budget: str) -> None:
        """Record that ``budget`` stopped or narrowed the search."""
        if budget not in self.result.budgets_hit:
            self.result.budgets_hit.append(budget)

    def out_of_budget(self, more_sandboxes: int = 0) -> str:
        """Which budget a turn (or ``more_sandboxes`` new sandboxes) would exceed; '' when none."""
        b, r = self.budget, self.result
        if b.max_turns and r.turns >= b.max_turns:
            return "max_turns"
        if b.wall_s and time.monotonic() - self._t0 >= b.wall_s:
            return "wall_s"
        if more_sandboxes and b.max_sandboxes and len(self._live) + more_sandboxes > b.max_sandboxes:
            return "max_sandboxes"
        return ""

    # -- lines ----------------------------------------------------------------------------------------------
    def new_line(self) -> SearchLine:
        """A line from the prepared start state (a fresh overlay over its snapshot)."""
        episode = self._opened.episode(started=True)
        self.result.sandboxes += 1
        messages = list(episode.reset())
        self.result.prompt = self.result.prompt or [dict(m) for m in messages]
        line = SearchLine(episode, TextPolicy(self.reply, messages), self.new_node(None, 0))
        self._live.append(line)
        return line

    def new_node(self, parent: int | None, forked_at: int) -> Node:
        """A new node of the search's tree (a line started or forked at turn ``forked_at`` of ``parent``)."""
        self._index += 1
        node = Node(self._index, parent, forked_at)
        self.result.tree.append(node)
        return node

    def fork(self, line: SearchLine, m: int) -> list[SearchLine]:
        """m live children of ``line`` at its current turn."""
        t0 = time.monotonic()
        episodes = line.episode.fork(m)
        self.result.fork_s += time.monotonic() - t0
        self.result.forks += 1
        self.result.sandboxes += m
        children = [SearchLine(e, line.policy.fork(), self.new_node(line.index, line.episode.turns)) for e in episodes]
        self._live += children
        return children

    def step(self, line: SearchLine) -> bool:
        """One policy turn of ``line``; True when the line ended (it is then graded, scored and closed)."""
        turns = len(line.loop.turns)
        ended = line.loop.step()
        line.node.turns += line.loop.turns[turns:]
        self.result.turns += 1
        if ended:
            last = line.loop.last
            if last is not None:  # a scorer sees the whole conversation, the last observation included
                line.messages.append({"role": "user", "content": last.observation})
            self._finish(line, line.loop.reward, line.loop.info)
        return ended

    def play_to_end(self, line: SearchLine) -> None:
        """Turns until the line ends or a budget stops it (then it ends there, graded as it stands)."""
        while True:
            hit = self.out_of_budget()
            if hit:
                self.hit(hit)
                reward, info = line.episode.end("budget")
                self._finish(line, reward, info)
                return
            if self.step(line):
                return

    def drop(self, line: SearchLine) -> None:
        """Close a live line without grading it (a beam pruned it)."""
        self._live.remove(line)
        line.episode.close()
        line.node.status = "pruned"
        self.result.pruned += 1

    def keep(self, lines: list[SearchLine], width: int, level: int) -> list[SearchLine]:
        """The ``width`` best of ``lines`` by the rule's value (ties: the earliest); the others are dropped.
        Each line's node records its value at this level and whether it was kept."""
        values = self.value(lines)
        ranked = sorted(range(len(lines)), key=lambda i: (-values[i], i))
        kept = set(ranked[:width])
        for i, line in enumerate(lines):
            line.node.values.append({"level": level, "turn": line.episode.turns, "value": values[i], "kept": i in kept})
        for i in ranked[width:]:
            self.drop(lines[i])
        return [lines[i] for i in ranked[:width]]

    def value(self, lines: list[SearchLine]) -> list[float]:
        """The rule's value of live lines' current states; per-line scorers run in a throwaway fork, so that
        scoring (running tests, say) never changes the line itself."""
        diffs = [line.episode.current_diff() for line in lines]
        if self.rule.scorer is None:
            return majority_scores(diffs)
        values = []
        for line, diff in zip(lines, diffs, strict=True):
            probe = line.episode.fork(1)[0]
            self.result.sandboxes += 1
            try:
                reward = self._oracle_reward(diff) if self.rule.oracle else 0.0
                values.append(
                    float(
                        self.rule.scorer(self.task, Candidate(line.index, diff, line.messages, probe.sandbox, reward))
                    )
                )
            finally:
                probe.close()
        return values

    def _oracle_reward(self, diff: str) -> float:
        from swebox.envs.tasks.graders.grading import grade

        return grade(
            self.task,
            diff,
            layers=list(self.start.grade_layers),
            policy=self._policy,
            timeout=self.config.grade_timeout_s,
            reward_mode=self.config.reward_mode,
        ).reward

    def _finish(self, line: SearchLine, reward: float, info: dict[str, Any]) -> None:
        grade = info.get("grade") or {}
        node = line.node
        attempt = Attempt(
            line.index,
            node.parent,
            node.forked_at,
            line.episode.turns,
            info.get("reason", ""),
            reward,
            bool(grade.get("resolved")),
            info.get("diff", ""),
            info.get("grade"),
            error=info.get("error", ""),
            audit=info.get("audit"),
        )
        try:
            if self.rule.scorer is not None:  # scored in place: the diff is taken, the state may change now
                attempt.score = float(
                    self.rule.scorer(
                        self.task, Candidate(line.index, attempt.diff, line.messages, line.episode.sandbox, reward)
                    )
                )
        finally:
            self._live.remove(line)
            line.episode.close()
        node.status, node.attempt = "ended", len(self.result.attempts)
        self.result.attempts.append(attempt)

    # -- the end ---------------------------------------------------------------------------------------
    def finish(self) -> SearchResult:
        """Pick the rule's best attempt and close what is still open."""
        for line in list(self._live):
            reward, info = line.episode.end("budget")
            self._finish(line, reward, info)
        attempts = self.result.attempts
        if attempts:
            if self.rule.scorer is None:
                for attempt, score in zip(attempts, majority_scores([a.diff for a in attempts]), strict=True):
                    attempt.score = score
            self.result.picked = pick([a.score for a in attempts])
        self.result.wall_s = time.monotonic() - self._t0
        return self.result

    def close(self) -> None:
        """Stop every sandbox and release the task's layers; safe to call twice."""
        for line in list(self._live):
            line.episode.close()
        self._live.clear()
        self._opened.close()

    def __enter__(self) -> TaskSearch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sample(task: Task, n: int, reply: Reply, **options: Any) -> SearchResult:
    """n attempts from one prepared start state, each played to its end (pass@k, best-of-n)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"sample(n=...): expected a whole number of attempts >= 1; found {n!r}.")
    with TaskSearch(task, reply, **options) as search:
        return sample_lines(search, n, lambda: search.play_to_end(search.new_line()))


def sample_lines(search: TaskSearch, n: int, play_one: Callable[[], object]) -> SearchResult:
    """``n`` independent lines of ``search``, each started and played to its end by ``play_one`` (a text line,
    a harness run), fewer when a budget has no room for another sandbox; then the rule's pick. The loop of
    :func:`sample` and :func:`swebox.envs.search.harness_lines.sample_harness`."""
    for _ in range(n):
        hit = search.out_of_budget(more_sandboxes=1)
        if hit:
            search.hit(hit)
            break
        play_one()
    return search.finish()


def beam(task: Task, reply: Reply, *, width: int, depth: int, **options: Any) -> SearchResult:
    """A breadth-limited tree search over tool calls: at each of ``depth`` levels every live line is forked
    into ``width`` children that take one turn each; the ``width`` best by the rule's value live on."""
    if not isinstance(width, int) or width < 1 or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"beam(width, depth): expected width >= 1 and depth >= 0; found {width!r}, {depth!r}")
    with TaskSearch(task, reply, **options) as search:
        frontier = [search.new_line()]
        for level in range(1, depth + 1):
            children: list[SearchLine] = []
            for line in frontier:
                room = width - 1
                while room and search.out_of_budget(more_sandboxes=room + 1):  # +1: a scoring fork
                    room -= 1
                if room < width - 1:
                    search.hit(search.out_of_budget(more_sandboxes=width) or "max_sandboxes")
                kids = [line, *(search.fork(line, room) if room else [])]
                for kid in kids:
                    hit = search.out_of_budget()
                    if hit:
                        search.hit(hit)
                        children.append(kid)  # ends below, graded as it stands
                    elif not search.step(kid):
                        children.append(kid)
            if search.out_of_budget() or not children:
                frontier = children
                break
            frontier = search.keep(children, width, level)
        for line in frontier:
            search.play_to_end(line)
        return search.finish()
