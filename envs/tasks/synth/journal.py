"""The synthesis journal: ``tasks.jsonl`` (validated tasks) and ``rejected.jsonl`` (rejected candidates) of an
output folder, appended a line at a time and fsynced, read back on restart so a resumed run skips both.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from swebox.envs.tasks.schema import Task

TASKS_FILE = "tasks.jsonl"
REJECTED_FILE = "rejected.jsonl"


class Journal:
    """tasks.jsonl and rejected.jsonl: append-only, flushed per line, read back on restart."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.tasks_path = out / TASKS_FILE
        self.rejected_path = out / REJECTED_FILE
        self._lock = threading.Lock()
        self.done: dict[str, str] = {}  # candidate key -> project label
        self.rejected: set[str] = set()
        for row in self._read(self.tasks_path):
            meta = row.get("metadata", {}).get("synth", {})
            if meta.get("candidate_key"):
                self.done[meta["candidate_key"]] = meta.get("project", "")
        self.rejected = {row.get("key", "") for row in self._read(self.rejected_path)}

    @staticmethod
    def _read(path: Path) -> Iterator[dict]:
        if not path.exists():
            return
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):  # a crash mid-line: drop the partial row before appending
            data = data[: data.rfind(b"\n") + 1]
            path.write_bytes(data)
        for line in data.decode("utf-8", errors="replace").splitlines():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue

    def count(self, label: str) -> int:
        return sum(1 for v in self.done.values() if v == label)

    def seen(self, key: str) -> bool:
        return key in self.done or key in self.rejected

    def add_task(self, task: Task, key: str, label: str) -> None:
        self._append(self.tasks_path, task.to_json())
        self.done[key] = label

    def add_rejected(self, key: str, label: str, reason: str) -> None:
        self._append(self.rejected_path, json.dumps({"key": key, "project": label, "reason": reason}))
        self.rejected.add(key)

    def _append(self, path: Path, line: str) -> None:
        with self._lock, open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
