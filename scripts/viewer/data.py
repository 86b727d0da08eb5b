"""What ``swebox view`` shows, read from a run folder or an eval output, lazily and read-only.

A *training run* is a folder with ``metrics.jsonl`` and ``trajectories/`` (trainers/run/trajectories.py): the run
page and every list read only ``metrics.jsonl`` and ``trajectories/index.jsonl``; a step page reads that step's
file; nothing reads every step file. An *eval output* is the file of ``swebox eval --out`` (or a folder holding
such files): its records are the rollouts of one pseudo-step, 0. Files are re-read when their size or mtime
changes, so a run still being written shows its new steps on reload. A damaged file is never fatal: its
problems (file, line, why) are shown on the page, with whatever could be read.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swebox.trainers.run.trajectories import FOLDER, INDEX, index_line, read_jsonl, step_file

FILTERS = {
    "resolved": lambda r: bool(r.get("resolved")),
    "unresolved": lambda r: not r.get("resolved") and not r.get("failed"),
    "format_errors": lambda r: (r.get("format_errors") or 0) > 0,
    "timeouts": lambda r: (r.get("timeouts") or 0) > 0,
    "errors": lambda r: bool(r.get("failed")),
}
"""The rollout filters of the lists (query ``?filter=NAME``)."""


@dataclass
class Loaded:
    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class _Files:
    """read_jsonl with a cache keyed by (path, size, mtime): unchanged files are parsed once."""

    def __init__(self, max_files: int = 16) -> None:
        self.max_files, self._cache, self._lock = max_files, {}, threading.Lock()

    def read(self, path: Path) -> Loaded:
        try:
            st = path.stat()
        except OSError:
            return Loaded(
                problems=[f"{path}: not found (deleted by logging.trajectories_keep_last, or not written yet)"]
            )
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        result = read_jsonl(path)
        loaded = Loaded(result.records, result.problems)
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if k[0] != str(path)}
            self._cache[key] = loaded
            while len(self._cache) > self.max_files:
                self._cache.pop(next(iter(self._cache)))
        return loaded


def diff_groups(records: list[dict[str, Any]]) -> dict[int, str]:
    """A letter per rollout index so identical final diffs share it ('-' for no diff)."""
    letters: dict[str, str] = {}
    out = {}
    for r in records:
        diff = r.get("diff") or ""
        if not diff:
            out[r.get("index")] = "-"
            continue
        digest = hashlib.sha256(diff.encode("utf-8", errors="replace")).hexdigest()
        out[r.get("index")] = letters.setdefault(digest, chr(ord("A") + len(letters) % 26))
    return out


class RunData:
    """One training run folder or eval output, as the viewer's pages need it."""

    def __init__(
        self, path: str | Path, tasks_file: str | Path | None = None, calibration_file: str | Path | None = None
    ) -> None:
        """``tasks_file``: where task pages find statements and gold patches (default: config.yaml's env.tasks);
        ``calibration_file``: a ``swebox tasks calibrate`` file (default: config.yaml's env.calibration)."""
        self.path = Path(path).resolve()
        self.calibration_file = Path(calibration_file) if calibration_file else None
        if self.calibration_file is not None and not self.calibration_file.is_file():
            raise FileNotFoundError(
                f"swebox view --calibration: expected a calibration file (swebox tasks "
                f"calibrate --out); found nothing at {self.calibration_file}"
            )
        self.tasks_file = Path(tasks_file) if tasks_file else None
        if self.tasks_file is not None and not self.tasks_file.is_file():
            raise FileNotFoundError(
                f"swebox view --tasks: expected a tasks.jsonl file; found nothing at {self.tasks_file}"
            )
        if not self.path.exists():
            raise FileNotFoundError(
                f"swebox view: expected a run folder or an eval --out file; found nothing at {self.path}"
            )
        self.files = _Files()
        if self.path.is_file():
            self.kind, self.eval_files = "eval", [self.path]
        elif (self.path / FOLDER).is_dir() or (self.path / "metrics.jsonl").exists():
            self.kind, self.eval_files = "train", []
        else:
            self.eval_files = sorted(p for p in self.path.glob("*.jsonl") if p.is_file())
            self.kind = "eval" if self.eval_files else "train"  # an empty folder: a run not started yet

    @property
    def title(self) -> str:
        return self.path.name

    # -- the run --------------------------------------------------------------------------------------
    def metrics(self) -> Loaded:
        if self.kind == "eval":
            return Loaded()
        path = self.path / "metrics.jsonl"
        return self.files.read(path) if path.exists() else Loaded()

    def index(self) -> Loaded:
        """One short row per rollout (trajectories/index.jsonl; an eval output's own records)."""
        if self.kind == "eval":
            loaded = self._eval_records()
            return Loaded([index_line(r) for r in loaded.records], loaded.problems)
        path = self.path / FOLDER / INDEX
        return self.files.read(path) if path.exists() else Loaded()

    def steps(self) -> list[dict[str, Any]]:
        """Per step: its metrics (if logged) and its rollout count, resolved count, reward."""
        metrics = {r["step"]: r for r in self.metrics().records if isinstance(r.get("step"), int)}
        counts: dict[int, list[dict[str, Any]]] = {}
        for row in self.index().records:
            if isinstance(row.get("step"), int):  # a line of another shape is skipped, not fatal
                counts.setdefault(row["step"], []).append(row)
        out = []
        for step in sorted(set(metrics) | set(counts)):
            rows = counts.get(step, [])
            out.append(
                {
                    "step": step,
                    "metrics": metrics.get(step, {}),
                    "rollouts": len(rows),
                    "resolved": sum(bool(r.get("resolved")) for r in rows),
                    "reward": (sum(r.get("reward") or 0.0 for r in rows) / len(rows)) if rows else None,
                    "on_disk": self.kind == "eval" or step_file(self.path, step).exists(),
                }
            )
        return out

    # -- a step and a rollout --------------------------------------------------------------------------
    def step_records(self, step: int) -> Loaded:
        if self.kind == "eval":
            return self._eval_records()
        return self.files.read(step_file(self.path, step))

    def _eval_records(self) -> Loaded:
        """The eval files' records as the rollouts of step 0, numbered in order, task_id filled in."""
        out = Loaded()
        for path in self.eval_files:
            loaded = self.files.read(path)
            out.problems += loaded.problems
            for record in loaded.records:
                out.records.append(
                    {
                        **record,
                        "step": 0,
                        "index": len(out.records),
                        "task_id": record.get("task_id") or record.get("instance_id", ""),
                        "num_turns": record.get("num_turns", len(record.get("turns") or [])),
                    }
                )
        return out

    def rollout(self, step: int, index: int) -> tuple[dict[str, Any] | None, list[str]]:
        loaded = self.step_records(step)
        found = next((r for r in loaded.records if r.get("index") == index), None)
        return found, loaded.problems

    def rows(self, filter_name: str = "", query: str = "") -> list[dict[str, Any]]:
        """The index rows passing a filter (FILTERS) and a task id search (substring, case-insensitive)."""
        rows = self.index().records
        if filter_name in FILTERS:
            rows = [r for r in rows if FILTERS[filter_name](r)]
        if query:
            q = query.lower()
            rows = [r for r in rows if q in str(r.get("task_id", "")).lower()]
        return rows

    # -- a task ------------------------------------------------------------------------------------------
    def task(self, task_id: str) -> dict[str, Any]:
        """The task's statement and gold patch (from the run's task file when it can be found)."""
        info: dict[str, Any] = {"instance_id": task_id, "problem_statement": "", "patch": "", "source": ""}
        tasks_file = self._tasks_file()
        if tasks_file is not None:
            for line in tasks_file.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    task = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if task.get("instance_id") == task_id:
                    info.update(
                        problem_statement=task.get("problem_statement", ""),
                        patch=task.get("patch", ""),
                        FAIL_TO_PASS=task.get("FAIL_TO_PASS", []),
                        PASS_TO_PASS=task.get("PASS_TO_PASS", []),
                        source=str(tasks_file),
                    )
                    break
        return info

    def calibration(self) -> tuple[dict[str, dict[str, Any]], str, list[str]]:
        """(task id -> its calibration with ``unusable``, the file, problems) ({}, '', [] without a file)."""
        path = self.calibration_file or self._config_file("calibration", (".json",))
        if path is None:
            return {}, "", []
        from swebox.envs.tasks.calibrate_select import CalibrationError, load_calibration

        try:
            found = load_calibration(path)
        except CalibrationError as exc:
            return {}, str(path), [str(exc)]
        return {k: {**c.to_dict(), "unusable": c.unusable()} for k, c in found.items()}, str(path), []

    def _tasks_file(self) -> Path | None:
        return self.tasks_file or self._config_file("tasks", (".jsonl",))

    def _config_file(self, key: str, suffixes: tuple[str, ...]) -> Path | None:
        """The file a training run's config.yaml names under env.KEY, when it is there."""
        config = self.path / "config.yaml"
        if self.kind != "train" or not config.exists():
            return None
        import yaml

        try:
            value = (yaml.safe_load(config.read_text()) or {}).get("env", {}).get(key, "")
        except yaml.YAMLError:
            return None
        path = Path(value) if value else None
        if path is not None and not path.is_absolute():
            path = Path.cwd() / path
        return path if path is not None and path.is_file() and path.suffix in suffixes else None
