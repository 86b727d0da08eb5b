"""Opening a task on this node: its layers held, its start state, and the episodes over it.

:func:`open_task` is the one place where task -> layers -> start state -> :class:`SWEEpisode` is assembled; the
Gymnasium env, the SkyRL env, GRPO groups, search and (through groups) the trainer's rollouts all open their
episodes with it. The :class:`TaskEpisodes` it returns owns the layers' lifetime: layer-cache handles taken by
:func:`swebox.envs.episodes.layers_resolver.acquire_layers` are released when it closes, or at once when opening fails
half way (a setup command that fails while preparing, say), so a node's cache never keeps a layer pinned for
an episode that no longer exists.
"""

from __future__ import annotations

from collections.abc import Callable

from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.episode_state import StartState, prepare_start
from swebox.envs.episodes.grade_cache import GradeCache
from swebox.envs.episodes.layers_resolver import LayerSource, TaskLayers, acquire_layers
from swebox.envs.sandbox import Sandbox, SandboxPolicy
from swebox.envs.tasks.schema import Task

Layers = LayerSource | dict | list | tuple | Callable[[Task], list] | None
"""Where a task's layers come from: a LayerSource (or its dict; None: the default store) through this node's
cache, the layer folders themselves (env first), or a function from the task to its layer folders."""


def prepare_group(task: Task, task_layers: list, policy: SandboxPolicy, timeout: float = 600.0) -> StartState:
    """Prepare the start state once; the returned StartState stacks its snapshot on the task's layers."""
    with Sandbox(list(task_layers), policy) as template:
        base_tree = prepare_start(template, task, timeout)
        snapshot = template.snapshot()
    return StartState(
        layers=[*task_layers, snapshot], grade_layers=list(task_layers), prepared=True, base_tree=base_tree
    )


class TaskEpisodes:
    """A task opened on this node (made by :func:`open_task`): the config its episodes run with, their start
    state, the episodes made so far; ``close()`` (or ``with``) closes them and releases the layers."""

    def __init__(self, task: Task, config: EpisodeConfig, start: StartState, held: TaskLayers | None) -> None:
        self.task = task
        self.config = config
        """The given config with the task's image's sandbox fields over it (when its row names an image)."""
        self.start = start
        self.policy = config.policy()
        self.episodes: list[SWEEpisode] = []
        """Every episode made by :meth:`episode`, closed with the task."""
        self._held = held
        self._snapshot = start.layers[-1] if start.prepared else None
        if self._snapshot is not None:  # held here, so it outlives a moment with no sandbox on it
            self._snapshot.acquire()

    def episode(self, *, started: bool = False, grade_cache: GradeCache | None = None) -> SWEEpisode:
        """A new episode over the start state. ``started``: its sandbox starts now (for a prepared start, so
        its first ``reset()`` is already there); otherwise the first ``reset()`` starts it."""
        sandbox = Sandbox(list(self.start.layers), self.policy).start() if started else None
        episode = SWEEpisode(self.task, self.start, self.config, sandbox=sandbox, grade_cache=grade_cache)
        self.episodes.append(episode)
        return episode

    def close(self) -> None:
        """Close every episode, then let go of the prepared snapshot and the layers; safe to call twice. The
        layers are released even when closing an episode raises (which is then raised)."""
        episodes, self.episodes = self.episodes, []
        snapshot, self._snapshot = self._snapshot, None
        held, self._held = self._held, None
        try:
            for episode in episodes:
                episode.close()
        finally:
            if snapshot is not None:
                snapshot.release()
            if held is not None:
                held.release()

    def __enter__(self) -> TaskEpisodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_task(
    task: Task, layers: Layers = None, config: EpisodeConfig | dict | None = None, *, prepare: bool = False
) -> TaskEpisodes:
    """Hold ``task``'s layers on this node and make its start state; episodes then come from ``.episode()``.

    ``layers``: see :data:`Layers`; from a LayerSource the handles are released when the result closes, and a
    task whose row names a container image brings that image's sandbox fields into ``config``.
    ``prepare``: run the setup commands and the hidden-test removal once now, in a template sandbox, and start
    every episode from a snapshot of it (GRPO groups, search); otherwise each episode's reset prepares its own.
    """
    config = EpisodeConfig.from_dict(config)
    held = None
    if isinstance(layers, (list, tuple)):
        paths = list(layers)
    elif callable(layers):
        paths = list(layers(task))
    else:
        held = acquire_layers(task, LayerSource.from_dict(layers))
        paths = list(held.paths)
        config = held.configure(config)
    try:
        start = (
            prepare_group(task, paths, config.policy(), config.setup_timeout_s)
            if prepare
            else StartState(layers=list(paths), grade_layers=list(paths))
        )
        return TaskEpisodes(task, config, start, held)
    except BaseException:
        if held is not None:
            held.release()
        raise
