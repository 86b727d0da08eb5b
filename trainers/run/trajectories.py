"""Rollouts on disk: what every episode did, for people (``swebox view``) and for fine-tuning (``swebox sft``).

A training run writes, every ``logging.trajectories_every`` steps, ``<run_dir>/trajectories/step_NNNNNN.jsonl.gz``
(gzip-compressed JSON lines, one record per rollout of the step, written to a temporary name and renamed, so a
reader never sees half a file) and appends one short line per rollout to ``trajectories/index.jsonl`` (what the
viewer's lists and filters read without opening the step files). ``logging.trajectories_keep_last`` keeps only
the newest step files; their index lines stay. ``swebox eval --out FILE`` writes the same episode fields, one
JSON line per task, plus its own. The format is in docs/training.md ("Trajectories on disk").

No torch here: the viewer reads these files without the training stack.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FOLDER = "trajectories"
INDEX = "index.jsonl"
STEP_FILE = re.compile(r"^step_(\d{6,})\.jsonl\.gz$")
FORMAT_VERSION = 1
INDEX_FIELDS = (
    "step",
    "index",
    "task_id",
    "group_id",
    "reward",
    "advantage",
    "valid",
    "resolved",
    "failed",
    "truncated",
    "format_errors",
    "timeouts",
    "num_turns",
    "reason",
    "grade_cached",
    "episode_s",
    "audit_flagged",
    "audit_rules",
    "cpu_s",
    "peak_mb",
)
"""The fields of an index line (a subset of the step record)."""


def step_file(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / FOLDER / f"step_{step:06d}.jsonl.gz"


def episode_fields(traj: Any) -> dict[str, Any]:
    """The fields a rollout record and an eval record share, from a rollout.Trajectory."""
    metrics = dict(traj.metrics)
    return {
        "task_id": traj.task_id,
        "reward": float(traj.reward),
        "resolved": bool(metrics.get("env/resolved", 0.0)),
        "failed": bool(traj.failed),
        "truncated": bool(traj.truncated),
        "error": traj.error,
        "num_turns": int(traj.num_turns),
        "num_model_tokens": int(traj.num_model_tokens),
        "reason": traj.reason,
        "prompt": list(traj.prompt),
        "turns": list(traj.turns),
        "diff": traj.diff,
        "grade": traj.grade,
        "metrics": metrics,
        "audit": traj.audit,
        "provenance": traj.provenance,
        "cost": traj.cost,
    }


def step_records(
    step: int, trajs: Sequence[Any], rewards: Sequence[float], advantages: Sequence[float], valid: Sequence[bool]
) -> list[dict[str, Any]]:
    """The step's rollout records: the episode fields plus the step, the reward used and the advantage."""
    out = []
    for i, traj in enumerate(trajs):
        record = {"format": FORMAT_VERSION, "step": step, "index": i, "group_id": traj.group_id, **episode_fields(traj)}
        record.update(reward=float(rewards[i]), advantage=float(advantages[i]), valid=bool(valid[i]))
        out.append(record)
    return out


def cost_summary(cost: dict[str, Any] | None) -> dict[str, float | None]:
    """``cpu_s`` (the episode's sandbox and its grading's) and ``peak_mb`` (the larger) of a record's ``cost``;
    None where not measured."""
    cost = cost or {}
    cpus = [cost[k] for k in ("cpu_s", "grade_cpu_s") if isinstance(cost.get(k), (int, float))]
    peaks = [cost[k] for k in ("peak_mb", "grade_peak_mb") if isinstance(cost.get(k), (int, float))]
    return {"cpu_s": sum(cpus) if cpus else None, "peak_mb": max(peaks) if peaks else None}


def index_line(record: dict[str, Any]) -> dict[str, Any]:
    metrics = record.get("metrics") or {}
    extra = {
        "format_errors": metrics.get("env/format_errors", 0.0),
        "timeouts": metrics.get("env/timeouts", 0.0),
        "grade_cached": bool(metrics.get("env/grade_cache_hits", 0.0)),
        "episode_s": metrics.get("timing/episode_s", 0.0),
        "audit_flagged": bool((record.get("audit") or {}).get("flagged", False)),
        "audit_rules": list((record.get("audit") or {}).get("rules", [])),
        **cost_summary(record.get("cost")),
    }
    return {k: record.get(k, extra.get(k)) for k in INDEX_FIELDS}


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: they become null (as in metrics.jsonl)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(_clean(record), ensure_ascii=False, allow_nan=False)


class TrajectoryWriter:
    """Writes the step files and the index of one run; ``every`` 0 writes nothing."""

    def __init__(self, run_dir: str | Path, every: int = 1, keep_last: int = 0) -> None:
        self.folder = Path(run_dir) / FOLDER
        self.every, self.keep_last = every, keep_last
        self._first = True  # steps only grow within a process: stale index lines can exist only at the first write

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def write(self, step: int, records: list[dict[str, Any]]) -> Path | None:
        """The step's file (atomic: temporary name, then rename) and its index lines; returns the file."""
        if not self.due(step):
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        path = step_file(self.folder.parent, step)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as out:
                for record in records:
                    out.write(dumps(record) + "\n")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        if self._first:
            self._drop_stale_index(step)
            self._first = False
        with open(self.folder / INDEX, "a", encoding="utf-8") as index:
            index.write("".join(dumps(index_line(r)) + "\n" for r in records))
            index.flush()
        self._retain()
        return path

    def _drop_stale_index(self, step: int) -> None:
        """A resumed run writes a step again: its (and later) index lines from before the crash go."""
        index = self.folder / INDEX
        if not index.exists():
            return
        lines = index.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if _line_step(line) < step]
        if len(kept) != len(lines):
            tmp = index.with_name(f".{INDEX}.tmp")
            tmp.write_text("".join(kept), encoding="utf-8")
            os.replace(tmp, index)

    def _retain(self) -> None:
        if self.keep_last <= 0:
            return
        for _, path in step_files(self.folder.parent)[: -self.keep_last]:
            path.unlink(missing_ok=True)


def _line_step(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return -1  # a torn line: dropped with the rest of the stale tail


# ------------------------------------------------------------------------------------------------ reading


@dataclass
class ReadResult:
    """Records read from one file, and what could not be read (file, line, why)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def step_files(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of the run's step files, oldest first."""
    folder = Path(run_dir) / FOLDER
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := STEP_FILE.match(p.name))]
    return sorted(found)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        yield from enumerate(f, 1)


def read_jsonl(path: str | Path) -> ReadResult:
    """Every record of a .jsonl or .jsonl.gz file; a corrupt line, a truncated or unreadable file is reported
    in ``problems`` (naming the file and line) and the records before it (and, for lines, after it) are kept."""
    path = Path(path)
    out = ReadResult()
    try:
        for number, line in _lines(path):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                out.problems.append(f"{path}: line {number}: not JSON ({exc.msg}); the line was skipped")
                continue
            if isinstance(record, dict):
                out.records.append(record)
            else:
                out.problems.append(f"{path}: line {number}: expected a JSON object; found {type(record).__name__}")
    except (EOFError, OSError, zlib.error) as exc:
        out.problems.append(
            f"{path}: the file is truncated or corrupt ({type(exc).__name__}: {exc}); "
            f"showing the {len(out.records)} records before the damage"
        )
    return out
