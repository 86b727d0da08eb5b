"""Grading slots: bound the gradings running at once on a node, across every process on it.

Grading runs a task's tests and is CPU-bound, so with more parallel episodes than cores each grading gets
slower until the slowest pass ``grade_timeout_s`` and are scored as errors that the machine caused. Instead a
grading waits for one of ``slots`` (default: the CPUs this process may use) node-wide slots, like the I/O budget
bounds unpacking: the wait is reported (``env/grade_wait_s``) and the grading's own time limit starts only once
it holds a slot.

A slot is an exclusive ``flock`` on one of ``slots`` files in a node-local folder (``$SWEBOX_GRADE_SLOTS_DIR``,
else ``grade-slots`` in the sandboxes' work root, ``$SWEBOX_WORK_ROOT`` or ``/tmp/swebox-<uid>``), so every
rollout actor and evaluation process of the node's sandboxes shares the bound, and a process that dies frees
its slot with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

POLL_S = 0.05
"""How often a waiting grading tries the slots again."""


def default_slots() -> int:
    """The CPUs this process may run on: one grading per core."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def slots_dir() -> Path:
    if os.environ.get("SWEBOX_GRADE_SLOTS_DIR"):
        return Path(os.environ["SWEBOX_GRADE_SLOTS_DIR"])
    return Path(os.environ.get("SWEBOX_WORK_ROOT") or f"/tmp/swebox-{os.getuid()}") / "grade-slots"


@contextlib.contextmanager
def grade_slot(slots: int = 0) -> Iterator[float]:
    """Hold one of ``slots`` node-wide grading slots (0: :func:`default_slots`); yields the seconds waited for
    one: exactly 0.0 when a slot was free at the first look (so a report never counts the look itself)."""
    count = slots or default_slots()
    if count < 1:
        raise ValueError(f"grade slots: expected at least 1; found {count}; use 0 for one per CPU")
    folder = slots_dir()
    folder.mkdir(parents=True, exist_ok=True)
    started, polled = time.monotonic(), False
    while True:
        for i in range(count):
            f = open(folder / f"slot-{i}.lock", "a+")  # noqa: SIM115 - held until the grading ends
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield time.monotonic() - started if polled else 0.0
            finally:
                f.close()  # drops the lock
            return
        polled = True
        time.sleep(POLL_S)
