"""GRPO groups: n episodes of one task that start from one prepared state.

``group(task, n)`` prepares the task's start state once (setup commands, hidden-test removal, the base git
tree) in a template sandbox, freezes it with ``Sandbox.snapshot()`` and starts n sandboxes over the task's
layers plus that snapshot. Each episode then owns its sandbox; its later resets drop its overlay
(milliseconds) and land on the same prepared state. The snapshot folder goes away when the last of the n
sandboxes closes.
"""

from __future__ import annotations

from collections.abc import Iterator

from swebox.envs.episode_state import StartState, prepare_start
from swebox.envs.grade_cache import GradeCache
from swebox.envs.layers_resolver import LayerSource, TaskLayers, acquire_layers
from swebox.envs.sandbox import Sandbox, SandboxPolicy
from swebox.envs.swe_env import EpisodeConfig, SWEEpisode
from swebox.envs.tasks.schema import Task


def prepare_group(task: Task, task_layers: list, policy: SandboxPolicy, timeout: float = 600.0) -> StartState:
    """Prepare the start state once; the returned StartState stacks its snapshot on the task's layers."""
    with Sandbox(list(task_layers), policy) as template:
        base_tree = prepare_start(template, task, timeout)
        snapshot = template.snapshot()
    return StartState(layers=[*task_layers, snapshot], grade_layers=list(task_layers), prepared=True,
                      base_tree=base_tree)


class EpisodeGroup:
    """n episodes of one task; iterate over it, and close it (or use ``with``) to stop every sandbox."""

    def __init__(self, task: Task, episodes: list[SWEEpisode], start: StartState,
                 layers: TaskLayers | None) -> None:
        self.task = task
        self.episodes = episodes
        self.start = start
        self._layers = layers

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[SWEEpisode]:
        return iter(self.episodes)

    def __getitem__(self, index: int) -> SWEEpisode:
        return self.episodes[index]

    def close(self) -> None:
        """Close every episode's sandbox and release the task's layers; safe to call twice."""
        for episode in self.episodes:
            episode.close()
        if self._layers is not None:
            self._layers.release()
            self._layers = None

    def __enter__(self) -> EpisodeGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def group(task: Task, n: int, *, layers: list | None = None, source: LayerSource | dict | None = None,
          config: EpisodeConfig | dict | None = None, grade_cache: GradeCache | None = None) -> EpisodeGroup:
    """n independent episodes of ``task`` forked from one prepared start state (call ``reset()`` on each).

    ``layers``: the task's layer folders (env first); otherwise they are acquired from ``source`` (a layer
    store through this node's cache, see :mod:`swebox.envs.layers_resolver`) and released on ``close()``.
    ``grade_cache``: the episodes reuse the verdicts of diffs already graded (:mod:`swebox.envs.grade_cache`).
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"group(n=...): expected a whole number of episodes >= 1; found {n!r}.")
    config = EpisodeConfig.from_dict(config)
    held = None if layers is not None else acquire_layers(task, LayerSource.from_dict(source))
    task_layers = list(layers) if layers is not None else list(held.paths)
    config = held.configure(config) if held is not None else config  # a task's image brings its policy
    episodes: list[SWEEpisode] = []
    try:
        policy = config.policy()
        start = prepare_group(task, task_layers, policy, config.setup_timeout_s)
        for _ in range(n):
            episodes.append(SWEEpisode(task, start, config, sandbox=Sandbox(list(start.layers), policy).start(),
                                       grade_cache=grade_cache))
    except BaseException:
        for episode in episodes:
            episode.close()
        if held is not None:
            held.release()
        raise
    return EpisodeGroup(task, episodes, start, held)
