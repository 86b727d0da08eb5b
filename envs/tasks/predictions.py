"""Scoring an agent's predictions the way SWE-bench's harness does: ``swebox eval --predictions preds.jsonl``
(the command: scripts/eval_cli.py).

Predictions are SWE-bench's format: objects with ``instance_id``, ``model_name_or_path`` and ``model_patch``,
as a JSON list, a JSON object keyed by instance id, or JSON lines. Each patch is graded with its task's own
grader (:func:`swebox.envs.tasks.graders.grading.grade`: fresh sandbox, filtered diff, restored tests; JUnit or the
repository's log parser), ``jobs`` at a time. The report has the harness's shape (``make_run_report``): counts
and the resolved / unresolved / error / empty-patch id lists, plus, per instance, the harness's per-instance
report (``patch_exists``, ``patch_successfully_applied``, ``resolved``, ``tests_status`` with success/failure
lists for FAIL_TO_PASS and PASS_TO_PASS) and swebox's per-test statuses.

An empty patch is not graded (``empty_patch_ids``); an instance that could not be graded (no such task, no
layers, a patch that does not apply, a crash) is an error, as in the harness.

The file is input, not trusted: ids, names and messages are printed ``ascii()``-escaped (no terminal control
sequence or lone surrogate reaches the terminal), the report's file name is derived from
``model_name_or_path`` safely (:func:`report_name`: no path separators or traversal, bounded length, a hash
of the original when anything was changed, so two names never share a file), whatever goes wrong in one
row becomes that row's error entry, and the report is written atomically (a temporary file renamed).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swebox.envs.cache.durable import write_atomic
from swebox.envs.tasks import progress, selection
from swebox.envs.tasks.graders.grading import GradeReport, grade
from swebox.envs.tasks.graders.log_grading import FAILING, PASSING
from swebox.envs.tasks.graders.provenance import datasets, swebox_version
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.validate import LayerResolver

KEYS = ("instance_id", "model_name_or_path", "model_patch")
MAX_NAME_PART = 100
"""Longest model or run-id part of a report's file name (a file name is at most 255 bytes)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def shown(text: object) -> str:
    """``text`` safe for a terminal: ascii()-escaped (control sequences, lone surrogates, bidi marks)."""
    return ascii(str(text))[1:-1]


def name_part(name: str) -> str:
    """A file-name part from ``name``, SWE-bench's way ('/' as '__'), with nothing but [A-Za-z0-9._+-], no
    leading dot, at most MAX_NAME_PART characters; a name that had to change ends in a hash of the original."""
    wanted = name.replace("/", "__")
    safe = _UNSAFE.sub("_", wanted).lstrip(".")
    if safe == wanted and 0 < len(safe) <= MAX_NAME_PART:
        return safe
    digest = hashlib.sha256(name.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]
    return f"{safe[: MAX_NAME_PART - 17]}-{digest}" if safe else digest


def report_name(model: str, run_id: str) -> str:
    """The report's default file name, the harness's ``<model>.<run id>.json`` made safe (:func:`name_part`)."""
    return f"{name_part(model)}.{name_part(run_id)}.json"


def write_report(report: dict[str, Any], out: Path) -> None:
    """Write ``report`` as JSON (non-ASCII escaped: lone surrogates too) atomically: a reader sees the old
    file or the whole new one."""
    write_atomic(out, json.dumps(report, indent=2) + "\n")  # fsynced too: whole after a crash as well


class PredictionError(ValueError):
    """A predictions file that cannot be read; the message names the entry and what to fix."""


@dataclass
class Prediction:
    """One model patch for one instance."""

    instance_id: str
    """The task it is for."""
    model_name_or_path: str
    """Who made it (names the report file)."""
    model_patch: str | None
    """The diff; '' or None is an empty patch."""


@dataclass
class Outcome:
    """One prediction after evaluation."""

    prediction: Prediction
    """What was graded."""
    report: GradeReport | None = None
    """The grade (None for empty patches and errors before grading)."""
    error: str = ""
    """Why it could not be graded; '' otherwise."""

    @property
    def kind(self) -> str:
        """resolved | unresolved | error | empty_patch."""
        if not (self.prediction.model_patch or "").strip():
            return "empty_patch"
        if self.error or self.report is None:
            return "error"
        return "resolved" if self.report.resolved else "unresolved"


def _entries(path: Path) -> list[tuple[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PredictionError(f"{path}: expected UTF-8 JSON; found undecodable bytes ({exc}).") from None
    if path.suffix == ".jsonl":
        out = []
        for n, line in enumerate(text.split("\n"), 1):  # JSON lines end at \n (a string may hold \u2028)
            if line.strip():
                try:
                    out.append((f"line {n}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise PredictionError(f"{path}: line {n}: expected one JSON object; found invalid JSON ({exc}).")
        return out
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PredictionError(
            f"{path}: expected JSON (a list or an object keyed by instance_id) or a .jsonl file; "
            f"found invalid JSON ({exc})."
        ) from None
    if isinstance(data, dict):
        return [(f"key {k!r}", v) for k, v in data.items()]
    if isinstance(data, list):
        return [(f"entry {i}", v) for i, v in enumerate(data)]
    raise PredictionError(
        f"{path}: expected a list of predictions or an object keyed by instance_id; found {type(data).__name__}."
    )


def load_predictions(path: str | Path) -> list[Prediction]:
    """Read a predictions file; every entry must have the three keys, each instance once."""
    path = Path(path)
    if not path.is_file():
        raise PredictionError(f"{path}: expected a predictions file (.json or .jsonl); it does not exist.")
    out: list[Prediction] = []
    seen: set[str] = set()
    for where, entry in _entries(path):
        if not isinstance(entry, dict) or any(k not in entry for k in KEYS):
            found = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise PredictionError(
                f"{path}: {where}: expected an object with keys {list(KEYS)}; found {found}. "
                f"This is SWE-bench's predictions format."
            )
        iid, patch = entry["instance_id"], entry["model_patch"]
        if not isinstance(iid, str) or not (patch is None or isinstance(patch, str)):
            raise PredictionError(
                f"{path}: {where}: expected a string instance_id and a string (or null) "
                f"model_patch; found {type(iid).__name__} and {type(patch).__name__}."
            )
        if iid in seen:
            raise PredictionError(f"{path}: {where}: instance {iid!r} is predicted twice; keep one.")
        seen.add(iid)
        out.append(Prediction(iid, str(entry["model_name_or_path"]), patch))
    return out


def evaluate(
    predictions: Iterable[Prediction],
    tasks: dict[str, Task],
    resolve: LayerResolver,
    *,
    jobs: int = 1,
    timeout: float = 1800.0,
    on_result: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Grade every non-empty prediction in fresh sandboxes, ``jobs`` at a time; results in input order."""
    if jobs < 1:
        raise ValueError(f"evaluate(jobs=...): expected jobs >= 1; found {jobs}.")

    def graded(pred: Prediction) -> Outcome:
        if not (pred.model_patch or "").strip():
            return Outcome(pred)
        task = tasks.get(pred.instance_id)
        if task is None:
            return Outcome(pred, error=f"no task {pred.instance_id!r} in the dataset")
        try:
            report = grade(task, pred.model_patch or "", layers=resolve(task), timeout=timeout)
        finally:
            resolve.release(task)
        return Outcome(pred, report, "" if report.applied else "; ".join(report.errors) or "the patch does not apply")

    def one(pred: Prediction) -> Outcome:
        try:
            return graded(pred)
        except Exception as exc:  # one broken instance must not end the evaluation
            return Outcome(pred, error=f"{type(exc).__name__}: {exc}")

    predictions = list(predictions)
    results: dict[int, Outcome] = {}  # by input position: every future fills its slot or raises
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="eval")
    shown_bar = progress.bar(len(predictions), "grade", "patch")
    try:
        futures = {pool.submit(one, p): i for i, p in enumerate(predictions)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if on_result is not None:
                try:
                    with progress.above():
                        on_result(results[futures[future]])
                except Exception as exc:  # showing a row must not lose the others
                    print(f"warning: showing a result failed: {type(exc).__name__}: {shown(exc)}", file=sys.stderr)
            shown_bar.update()
    except BaseException:  # Ctrl-C: grade nothing more (a `with` block would grade every queued patch first)
        shown_bar.close()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    shown_bar.close()
    pool.shutdown()
    return [results[i] for i in range(len(predictions))]


def tests_status(task: Task, report: GradeReport) -> dict[str, dict[str, list[str]]]:
    """The harness's ``tests_status``: success/failure ids for FAIL_TO_PASS and PASS_TO_PASS.

    With the log grader a SKIPPED test is in neither list (SWE-bench's rule); with JUnit it is a failure.
    """
    out = {}
    for name, ids in (("FAIL_TO_PASS", task.FAIL_TO_PASS), ("PASS_TO_PASS", task.PASS_TO_PASS)):
        statuses = [(t, report.tests[t].status if t in report.tests else "missing") for t in ids]
        failed = [t for t, s in statuses if s in FAILING or (task.grader != "log" and s not in PASSING)]
        out[name] = {"success": [t for t, s in statuses if s in PASSING], "failure": failed}
    return out


def run_report(outcomes: list[Outcome], tasks: dict[str, Task]) -> dict[str, Any]:
    """The report in the harness's shape, with per-instance details under ``instances``."""
    by_kind: dict[str, list[str]] = {"resolved": [], "unresolved": [], "error": [], "empty_patch": []}
    instances: dict[str, Any] = {}
    for o in outcomes:
        iid = o.prediction.instance_id
        by_kind[o.kind].append(iid)
        try:
            instances[iid] = instance_entry(o, tasks)
        except Exception as exc:  # the row gets an error entry; the report is still written
            instances[iid] = {"error": f"reporting this instance failed: {type(exc).__name__}: {exc}"}
    completed = by_kind["resolved"] + by_kind["unresolved"]
    submitted = [o.prediction.instance_id for o in outcomes]
    return {
        "total_instances": len(tasks),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed),
        "resolved_instances": len(by_kind["resolved"]),
        "unresolved_instances": len(by_kind["unresolved"]),
        "empty_patch_instances": len(by_kind["empty_patch"]),
        "error_instances": len(by_kind["error"]),
        "completed_ids": sorted(completed),
        "incomplete_ids": sorted(set(tasks) - set(submitted)),
        "empty_patch_ids": sorted(by_kind["empty_patch"]),
        "submitted_ids": sorted(submitted),
        "resolved_ids": sorted(by_kind["resolved"]),
        "unresolved_ids": sorted(by_kind["unresolved"]),
        "error_ids": sorted(by_kind["error"]),
        "schema_version": 2,
        "provenance": {"swebox": swebox_version(), "datasets": datasets(tasks.values())},
        "instances": instances,
    }


def instance_entry(o: Outcome, tasks: dict[str, Task]) -> dict[str, Any]:
    """The harness's per-instance report of one outcome, plus swebox's per-test statuses."""
    iid = o.prediction.instance_id
    entry: dict[str, Any] = {
        "patch_is_None": o.prediction.model_patch is None,
        "patch_exists": o.kind != "empty_patch",
        "patch_successfully_applied": bool(o.report and o.report.applied),
        "resolved": o.kind == "resolved",
    }
    if o.report is not None and iid in tasks:
        entry["tests_status"] = tests_status(tasks[iid], o.report)
        entry["tests"] = {t: out.status for t, out in o.report.tests.items()}
        entry["errors"] = o.report.errors
    if o.error:
        entry["error"] = o.error
    if o.report is not None:
        entry["provenance"] = o.report.provenance
    return entry


def chosen_predictions(
    preds: list[Prediction], dataset: list[Task], predictions_flag: str, tasks_flag: str
) -> list[Prediction]:
    """The predictions, refused before anything is graded when one is for an instance the dataset lacks (the
    harness's "Some prediction IDs not found in dataset!"); the flags name the files in the error line."""
    held = {t.instance_id for t in dataset}
    unknown = [p.instance_id for p in preds if p.instance_id not in held]
    if unknown:
        raise selection.unknown_ids_error(f"--predictions {predictions_flag}", unknown, sorted(held), tasks_flag)
    return preds


def write_report_or_reason(out: Path, report: dict[str, Any]) -> str | None:
    """Write the report atomically (a full disk leaves the previous file or none, never a cut one); the
    reason it could not be written, or None."""
    try:
        write_report(report, out)
    except OSError as exc:
        return f"{out}: cannot write the report ({exc.strerror or exc}); free space or choose another --out"
    return None
