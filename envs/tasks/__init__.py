"""Task instances (a SWE-bench superset), loaders for public datasets, and tamper-resistant grading.

See docs/tasks.md for the schema, the grading procedure and its anti-tampering guarantees.
"""

from __future__ import annotations

from swebox.envs.tasks.loaders import LoadError, RowError, TaskSet, load, save_jsonl
from swebox.envs.tasks.schema import DEFAULT_TEST_CMD, Task, TaskError

__all__ = ["DEFAULT_TEST_CMD", "LoadError", "RowError", "Task", "TaskError", "TaskSet", "load", "save_jsonl"]
