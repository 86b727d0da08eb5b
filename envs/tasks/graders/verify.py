"""``swebox eval --verify RECORDS --tasks T --layers L``: grade recorded diffs again and say whether the verdict
is the same, and what differs in their provenance (docs/tasks.md "Provenance").

RECORDS holds JSON objects with ``task_id`` (or ``instance_id``), ``diff``, ``grade`` and ``provenance``: the
lines of ``swebox eval --out`` and of a training run's ``trajectories/step_*.jsonl.gz``. Each diff is graded in
a fresh sandbox over the task's layers, with the recorded reward mode; the verdict (resolved, reward) is compared
with the recorded one, and the task digest, the layers, the grader's versions and the sandbox policy digest of
now with those of the record (a difference is listed: it explains a changed verdict, or shows that the same
verdict came from something else). The command (scripts/eval_cli.py) exits 0 when every verdict is the same, 1
otherwise, 2 on bad input.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swebox.envs.sandbox import SandboxPolicy
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.graders.provenance import provenance
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.validate import LayerResolver

_LAYER_IDS = ("key", "sha256_prefix", "tree_sha256", "interpreters")


@dataclass
class Verification:
    """One record graded again."""

    task_id: str
    recorded: tuple[bool, float] | None = None
    """(resolved, reward) of the record."""
    now: tuple[bool, float] | None = None
    """(resolved, reward) graded now; None when it could not be graded."""
    differences: list[str] = field(default_factory=list)
    """What differs in the provenance (task, layers, grader, policy)."""
    error: str = ""

    @property
    def same(self) -> bool:
        return not self.error and self.now is not None and self.now == self.recorded


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a .jsonl / .jsonl.gz file (or one .json object or list); errors name the line."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    if path.suffix == ".json":
        data = json.loads(text)
        rows = data if isinstance(data, list) else [data]
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"{path}: line {number}: expected a JSON object; found invalid JSON ({exc.msg})"
                    ) from None
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not (row.get("task_id") or row.get("instance_id")) or "diff" not in row:
            raise ValueError(
                f"{path}: record {number}: expected an object with task_id and diff (a line of "
                f"`swebox eval --out` or of trajectories/step_*.jsonl.gz); found "
                f"{sorted(row) if isinstance(row, dict) else type(row).__name__}"
            )
    return rows


def _layer_differences(recorded: list, now: list) -> list[str]:
    """Layer by layer, the identities both records know (a folder of links named by key has a key that the
    layer folder it links to does not: only what both name is compared)."""
    if len(recorded) != len(now):
        return [f"layers differ: {len(recorded)} recorded, {len(now)} now"]
    out = []
    for i, (was, is_) in enumerate(zip(recorded, now, strict=True)):
        common = [k for k in _LAYER_IDS if k in was and k in is_]
        if not common:
            out.append(f"layer {i}: no digest to compare (recorded {sorted(was)}, now {sorted(is_)})")
        for k in common:
            if was[k] != is_[k]:
                out.append(f"layer {i} differs in {k} (recorded {was[k]}, now {is_[k]})")
    return out


def compare(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between a recorded provenance and the one of grading now."""
    out = []
    if recorded.get("task", {}).get("sha256") != now["task"]["sha256"]:
        out.append(
            f"task content differs (recorded {str(recorded.get('task', {}).get('sha256'))[:12]}, "
            f"now {now['task']['sha256'][:12]})"
        )
    out += _layer_differences(recorded.get("layers") or [], now["layers"])
    if recorded.get("grader") != now["grader"]:
        out.append(f"grader differs (recorded {recorded.get('grader')}, now {now['grader']})")
    if recorded.get("sandbox_policy_sha256") != now["sandbox_policy_sha256"]:
        out.append("sandbox policy differs (its digest; the record graded with other SandboxPolicy fields)")
    return out


def verify_record(
    record: dict[str, Any],
    tasks: dict[str, Task],
    resolve: LayerResolver,
    policy: SandboxPolicy | None = None,
    timeout: float = 900.0,
) -> Verification:
    """Grade ``record``'s diff again for its task; never raises for one record's trouble."""
    task_id = str(record.get("task_id") or record.get("instance_id"))
    recorded_grade = record.get("grade") or {}
    result = Verification(
        task_id,
        (
            bool(recorded_grade.get("resolved", record.get("resolved", False))),
            float(recorded_grade.get("reward", record.get("reward", 0.0))),
        ),
    )
    task = tasks.get(task_id)
    if task is None:
        result.error = f"no task {task_id!r} in --tasks"
        return result
    policy = policy or SandboxPolicy(network="none")
    try:
        layers = resolve(task)
        if record.get("provenance"):
            result.differences = compare(record["provenance"], provenance(task, list(layers), policy))
        else:
            result.differences = ["the record has no provenance (made before it was recorded)"]
        report = grade(
            task,
            str(record.get("diff") or ""),
            layers=layers,
            policy=policy,
            timeout=timeout,
            reward_mode=str(recorded_grade.get("reward_mode") or "binary"),
        )
        result.now = (bool(report.resolved), float(report.reward))
    except Exception as exc:
        result.error = f"could not grade: {type(exc).__name__}: {exc}"
    finally:
        resolve.release(task)
    return result
