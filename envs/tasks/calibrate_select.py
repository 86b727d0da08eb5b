"""Using a calibration file (``swebox tasks calibrate``): which tasks to train or evaluate on, and why not the rest.

:func:`load_calibration` reads the file; :func:`select` keeps the usable tasks, leaves out the unsolvable ones
(gold not always resolved), the trivial ones (the empty diff resolved) and those that could not be graded, and
quarantines flaky tests (drops them from the task's F2P/P2P lists, the reason in ``Selection.quarantined``).
Nothing is left out silently: :meth:`Selection.summary` is one line naming every count and the first few ids,
which the trainer and ``swebox eval`` print. A task the file does not cover, or covers for another version of
the task (another content digest), is kept and counted as uncalibrated.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from swebox.envs.tasks.calibrate import FORMAT, TaskCalibration
from swebox.envs.tasks.graders.provenance import task_digest
from swebox.envs.tasks.schema import Task


class CalibrationError(ValueError):
    """A calibration file that cannot be used; the message says what was expected and how to fix it."""


@dataclass
class Selection:
    """What a calibration file made of a task list."""

    source: str
    """The calibration file."""
    kept: list[Task] = field(default_factory=list)
    """The tasks to use, in their order; flaky tests quarantined."""
    left_out: list[tuple[str, str]] = field(default_factory=list)
    """(task id, why) for each task left out."""
    quarantined: dict[str, list[str]] = field(default_factory=dict)
    """Task id -> its flaky tests taken out of the verdict."""
    uncalibrated: list[str] = field(default_factory=list)
    """Kept tasks the file has no (or a stale) calibration for."""

    def summary(self) -> str:
        """One line: kept, left out (with the reasons and ids), quarantined, uncalibrated."""
        total = len(self.kept) + len(self.left_out)
        parts = [f"calibration {self.source}: kept {len(self.kept)} of {total} tasks"]
        if self.left_out:
            shown = "; ".join(f"{tid} ({why})" for tid, why in self.left_out[:5])
            more = f"; and {len(self.left_out) - 5} more" if len(self.left_out) > 5 else ""
            parts.append(f"left out {len(self.left_out)}: {shown}{more}")
        else:
            parts.append("left out 0")
        n_tests = sum(len(v) for v in self.quarantined.values())
        parts.append(f"quarantined {n_tests} flaky tests in {len(self.quarantined)} tasks")
        parts.append(
            f"uncalibrated {len(self.uncalibrated)}"
            + (f" ({', '.join(self.uncalibrated[:5])})" if self.uncalibrated else "")
        )
        return "; ".join(parts)


def load_calibration(path: str | Path) -> dict[str, TaskCalibration]:
    """The file's calibrations by task id; a clear CalibrationError for anything else."""
    where = f"--calibration {path}"
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CalibrationError(
            f"{where}: expected a calibration file; found no file there (write one with "
            "`swebox tasks calibrate TASKS --out FILE`)"
        ) from None
    except (OSError, UnicodeError, json.JSONDecodeError) as exc:
        raise CalibrationError(
            f"{where}: expected a JSON calibration file; found unreadable content ({exc}); "
            "write it again with `swebox tasks calibrate`"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("tasks"), list):
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise CalibrationError(
            f"{where}: expected a swebox calibration file of format {FORMAT} (a JSON object "
            f"with format and tasks); found format {found!r}; write it again with "
            "`swebox tasks calibrate`"
        )
    out: dict[str, TaskCalibration] = {}
    for i, entry in enumerate(doc["tasks"]):
        try:
            cal = TaskCalibration.from_dict(entry)
        except TypeError as exc:
            raise CalibrationError(
                f"{where}: tasks[{i}]: expected the fields of a task calibration; found "
                f"{exc}; write the file again with `swebox tasks calibrate`"
            ) from None
        out[cal.instance_id] = cal
    return out


def quarantine(task: Task, tests: list[str]) -> Task:
    """The task with ``tests`` left out of its F2P/P2P lists and expected statuses."""
    drop = set(tests)
    return dataclasses.replace(
        task,
        FAIL_TO_PASS=tuple(t for t in task.FAIL_TO_PASS if t not in drop),
        PASS_TO_PASS=tuple(t for t in task.PASS_TO_PASS if t not in drop),
        expected_status={k: v for k, v in task.expected_status.items() if k not in drop},
    )


def select(tasks: list[Task], calibration: dict[str, TaskCalibration], source: str = "") -> Selection:
    """Keep the usable tasks (flaky tests quarantined), leave out the rest with their reasons."""
    sel = Selection(source)
    for task in tasks:
        cal = calibration.get(task.instance_id)
        if cal is None or cal.task_digest != task_digest(task):
            sel.uncalibrated.append(task.instance_id + ("" if cal is None else " (stale)"))
            sel.kept.append(task)
            continue
        why = cal.unusable()
        if why:
            sel.left_out.append((task.instance_id, why))
            continue
        if cal.flaky_tests:
            flaky = sorted(cal.flaky_tests)
            sel.quarantined[task.instance_id] = flaky
            task = quarantine(task, flaky)
        sel.kept.append(task)
    return sel


def apply_calibration(tasks: list[Task], path: str | Path, echo=print, order: str = "none") -> list[Task]:
    """The trainer's and ``swebox eval``'s entry: load, order (``order``: :func:`order_by_solve_rate`, on the
    tasks as given so that digests compare), select, print the one-line summary (and the order's line unless
    ``none``), return the kept tasks. Raises CalibrationError when the file is unusable or no task is left."""
    calibration = load_calibration(path)
    tasks, order_line = order_by_solve_rate(tasks, calibration, order)
    sel = select(tasks, calibration, str(path))
    echo(sel.summary())
    if order != "none":
        echo(order_line)
    if not sel.kept:
        raise CalibrationError(
            f"--calibration {path}: expected at least one usable task; found none of "
            f"{len(tasks)} ({sel.summary()}); fix the tasks or calibrate again"
        )
    return sel.kept


ORDERS = ("none", "easy_first", "hard_first")


def order_by_solve_rate(
    tasks: list[Task],
    calibration: dict[str, TaskCalibration],
    order: str,
) -> tuple[list[Task], str]:
    """A curriculum: the tasks by the policy's solve rate (``easy_first``: highest first; ``hard_first``: lowest
    first; ties by task id), then the tasks the file has no current policy entry for in their own order; and the
    one line saying so. ``none`` returns the tasks as they are."""
    if order not in ORDERS:
        raise CalibrationError(f"calibration_order: expected one of {', '.join(ORDERS)}; found {order!r}")
    if order == "none":
        return list(tasks), "calibration order: none (the tasks' own order)"
    rated: list[tuple[float, str, Task]] = []
    unrated: list[Task] = []
    for task in tasks:
        cal = calibration.get(task.instance_id)
        # a stale entry (another content digest) rates another version of the task
        rate = cal.solve_rate() if cal is not None and cal.task_digest == task_digest(task) else None
        if rate is None:
            unrated.append(task)
        else:
            rated.append((rate, task.instance_id, task))
    sign = -1.0 if order == "easy_first" else 1.0
    rated.sort(key=lambda r: (sign * r[0], r[1]))
    shown = ", ".join(f"{tid} {rate:.2f}" for rate, tid, _ in rated[:5]) + (" ..." if len(rated) > 5 else "")
    line = (
        f"calibration order: {order} by the policy's solve rate over {len(rated)} tasks ({shown or 'none'}); "
        f"{len(unrated)} without a policy entry last"
    )
    return [t for _, _, t in rated] + unrated, line
