"""Which tasks of a dataset a command runs: ``--instance-ids`` and ``--limit``, SWE-bench's harness's way.

The harness (``swebench.harness.run_evaluation``) takes ``--instance_ids`` (space separated) to run a subset of
the dataset and refuses, before anything runs, ids the dataset does not hold and predictions for instances it
does not hold. swebox does the same for ``swebox eval`` (policies and ``--predictions``): an unknown id is one
line naming it (and the ids the dataset does hold, when it is small), never an error row found after the run.
``--limit N`` keeps the first N tasks (after ``--instance-ids``), in the dataset's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

SHOWN = 5
"""Unknown ids (and dataset ids offered instead) named in the error line; the rest are counted."""


class SelectionError(ValueError):
    """``--instance-ids`` names ids the dataset lacks, or ``--limit`` is not a positive number."""


def _named(ids: Sequence[str]) -> str:
    shown = ", ".join(ascii(i)[1:-1] for i in ids[:SHOWN])
    return shown + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def unknown_ids_error(flag: str, unknown: Sequence[str], known: Sequence[str], tasks_flag: str) -> SelectionError:
    """The one line for ids that ``tasks_flag``'s dataset does not hold."""
    offer = f"; it holds {_named(list(known))}" if known else "; it holds no task"
    return SelectionError(
        f"{flag}: expected ids of --tasks {tasks_flag}; found {len(unknown)} it does not hold: "
        f"{_named(list(unknown))}{offer}. Fix the ids or the dataset"
    )


def select(tasks: Sequence[T], ids: Sequence[str], limit: int, tasks_flag: str, key=lambda t: t.instance_id) -> list[T]:
    """The tasks named by ``ids`` (all when empty), in the dataset's order, then the first ``limit`` (0: all)."""
    if limit < 0:
        raise SelectionError(f"--limit: expected a number >= 0 (0: all tasks); found {limit}")
    if ids:
        held = {key(t) for t in tasks}
        unknown = list(dict.fromkeys(i for i in ids if i not in held))
        if unknown:
            raise unknown_ids_error("--instance-ids", unknown, [key(t) for t in tasks], tasks_flag)
        wanted = set(ids)
        tasks = [t for t in tasks if key(t) in wanted]
    return list(tasks[:limit] if limit else tasks)
