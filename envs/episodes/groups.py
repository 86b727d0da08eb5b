"""GRPO groups: n episodes of one task that start from one prepared state.

``group(task, n)`` opens the task with :func:`swebox.envs.episodes.task_episodes.open_task`, which holds its layers and
prepares its start state once (setup commands, hidden-test removal, the base git tree) in a template sandbox
frozen with ``Sandbox.snapshot()``; then n sandboxes start over the task's layers plus that snapshot. Each
episode owns its sandbox; its later resets drop its overlay (milliseconds) and land on the same prepared state.
Closing the group closes them all, then the snapshot folder and the layers go.
"""

from __future__ import annotations

from collections.abc import Iterator

from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.grade_cache import GradeCache
from swebox.envs.episodes.layers_resolver import LayerSource
from swebox.envs.episodes.task_episodes import TaskEpisodes, open_task, prepare_group
from swebox.envs.tasks.schema import Task

__all__ = ["EpisodeGroup", "group", "prepare_group"]


class EpisodeGroup:
    """n episodes of one task; iterate over it, and close it (or use ``with``) to stop every sandbox."""

    def __init__(self, opened: TaskEpisodes) -> None:
        self.task = opened.task
        self.start = opened.start
        self.episodes: list[SWEEpisode] = list(opened.episodes)
        self._opened = opened

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[SWEEpisode]:
        return iter(self.episodes)

    def __getitem__(self, index: int) -> SWEEpisode:
        return self.episodes[index]

    def close(self) -> None:
        """Close every episode's sandbox and release the task's layers; safe to call twice."""
        self._opened.close()

    def __enter__(self) -> EpisodeGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def group(
    task: Task,
    n: int,
    *,
    layers: list | None = None,
    source: LayerSource | dict | None = None,
    config: EpisodeConfig | dict | None = None,
    grade_cache: GradeCache | None = None,
) -> EpisodeGroup:
    """n independent episodes of ``task`` forked from one prepared start state (call ``reset()`` on each).

    ``layers``: the task's layer folders (env first); otherwise they are acquired from ``source`` (a layer
    store through this node's cache, see :mod:`swebox.envs.episodes.layers_resolver`) and released on ``close()``.
    ``grade_cache``: the episodes reuse the verdicts of diffs already graded (:mod:`swebox.envs.episodes.grade_cache`).
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"group(n=...): expected a whole number of episodes >= 1; found {n!r}.")
    opened = open_task(task, list(layers) if layers is not None else source, config, prepare=True)
    try:
        for _ in range(n):
            opened.episode(started=True, grade_cache=grade_cache)
    except BaseException:
        opened.close()
        raise
    return EpisodeGroup(opened)
