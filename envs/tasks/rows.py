"""What every dataset adapter shares: the Task's field names, and readers of a row's columns."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from swebox.envs.tasks.schema import Task, TaskError

TASK_FIELDS = tuple(f.name for f in dataclasses.fields(Task))
# Bulky columns that only cost memory once a task exists (R2E-Gym's prompt even contains the gold patch).
_DROP = frozenset(
    {
        "prompt",
        "parsed_commit_content",
        "execution_result_content",
        "text",
        "input_ids",
        "labels",
        "modified_entity_summaries",
    }
)


def json_safe(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy arrays from parquet readers
        value = value.tolist()
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def id_list(row: dict[str, Any], key: str) -> list[str]:
    value = row.get(key, [])
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise TaskError(
                f"Task.{key}: expected a list of test ids or a JSON string of one; found "
                f"{value[:120]!r}. Fix the row's {key}."
            ) from None
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise TaskError(f"Task.{key}: expected a list of test ids; found {type(value).__name__}. Fix the row's {key}.")
    return list(value)


def extra(row: dict[str, Any], used: set[str]) -> dict[str, Any]:
    meta = dict(row.get("metadata") or {}) if isinstance(row.get("metadata"), dict) else {}
    for key, value in row.items():
        if key not in used and key not in TASK_FIELDS and key not in _DROP:
            meta[key] = json_safe(value)
    return meta


def loads(row: dict[str, Any], key: str) -> Any:
    value = row.get(key)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise TaskError(f"Task.{key}: expected a JSON string; found invalid JSON {value[:120]!r}.") from None
    return value
