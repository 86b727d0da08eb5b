"""The tasks a run trains on: read from ``env.tasks`` (or given as objects or rows), and the seeded order they are
taken in, reshuffled every epoch, whose position a checkpoint records (``TaskSampler.state``).
"""

from __future__ import annotations

import random
from typing import Any

from swebox.envs.tasks.schema import Task
from swebox.trainers.run.config import ConfigError


def load_tasks(path: str) -> list[Task]:
    """The task file ``env.tasks`` (the Task objects go to the rollout workers as they are)."""
    from swebox.envs.tasks import load

    if not path:
        raise ConfigError("env.tasks: expected a tasks.jsonl file; found ''; set env.tasks=PATH")
    return list(load(path))


def as_tasks(tasks: list[Task | dict[str, Any]]) -> list[Task]:
    """Tasks given to the trainer, as Task objects (a dict is a task row: Task.to_dict's keys)."""
    return [t if isinstance(t, Task) else Task.from_dict(dict(t)) for t in tasks]


class TaskSampler:
    """The tasks in a seeded random order, reshuffled every epoch; ``state()`` is the resumable position."""

    def __init__(self, num_tasks: int, seed: int, shuffle: bool = True) -> None:
        if num_tasks < 1:
            raise ValueError("TaskSampler: expected at least one task; found none; check env.tasks")
        self.num_tasks, self.seed, self.shuffle = num_tasks, seed, shuffle
        self.epoch, self.index = 0, 0

    def _order(self, epoch: int) -> list[int]:
        order = list(range(self.num_tasks))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, k: int) -> list[int]:
        """The next ``k`` task indices (an epoch boundary may fall inside; a small task set repeats)."""
        out = []
        while len(out) < k:
            out.append(self._order(self.epoch)[self.index])
            self.index += 1
            if self.index == self.num_tasks:
                self.epoch, self.index = self.epoch + 1, 0
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state.get("epoch", 0)), int(state.get("index", 0))
