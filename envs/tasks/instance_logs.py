"""Per-instance logs of ``swebox eval --predictions`` in SWE-bench's harness layout.

The harness writes, for each instance it evaluates, ``logs/run_evaluation/<run_id>/<model>/<instance_id>/``
with ``patch.diff`` (the prediction's patch), ``report.json`` (``{instance_id: per-instance report}``) and
``test_output.txt`` (the test run's output). swebox writes the same three files in the same layout, under the
folder of the report (``--out``), each atomically the moment its instance is graded: tools that read the
harness's logs read these, and a run cut short keeps the logs of what it graded. The model and instance parts
of the path are made safe the way the report's name is (:func:`swebox.envs.tasks.predictions.name_part`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swebox.envs.cache.durable import write_atomic


def log_root(report: Path, run_id: str, model: str) -> Path:
    """``<report's folder>/logs/run_evaluation/<run_id>/<model>``: the harness's layout."""
    from swebox.envs.tasks.predictions import name_part

    return report.parent / "logs" / "run_evaluation" / name_part(run_id) / name_part(model or "none")


def test_output(entry: dict[str, Any], output_tail: str) -> str:
    """What ``test_output.txt`` holds: the end of the test run's output, then swebox's per-test statuses and
    errors (the run's full output is not kept; the statuses are what the verdict used)."""
    lines = [output_tail.rstrip(), ""] if output_tail.strip() else []
    lines += [f"{status:<8} {test}" for test, status in (entry.get("tests") or {}).items()]
    lines += [f"error: {e}" for e in [*(entry.get("errors") or []), *([entry["error"]] if entry.get("error") else [])]]
    return "\n".join(lines) + "\n"


def write_instance_logs(
    root: Path, instance_id: str, patch: str | None, entry: dict[str, Any], output_tail: str
) -> Path:
    """Write one instance's three files under ``root/<instance_id>``; returns that folder."""
    from swebox.envs.tasks.predictions import name_part

    folder = root / name_part(instance_id)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "patch.diff", patch or "")
    write_atomic(folder / "report.json", json.dumps({instance_id: entry}, indent=2) + "\n")
    write_atomic(folder / "test_output.txt", test_output(entry, output_tail))
    return folder
