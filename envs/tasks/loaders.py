"""``load(source)``: tasks from a .jsonl/.json/.parquet file, a dataset folder, or a Hugging Face dataset.

A folder holding ``task.toml`` (a Harbor task), or whose subfolders do (a Harbor dataset), loads as
Harbor tasks (:mod:`swebox.envs.tasks.harbor_format.folders`).

Rows from SWE-bench, SWE-Gym, SWE-smith, R2E-Gym and swebox's own files are recognised per row (see
:mod:`swebox.envs.tasks.adapters`). A bad row raises an error naming the row index, the field and what was
expected; with ``skip_invalid=True`` such rows are skipped and listed in ``TaskSet.skipped`` instead.

A split of a Hugging Face dataset (or of a folder saved by ``DatasetDict.save_to_disk``, or of files named by
split) is chosen with ``split=`` or, where only a source string travels (command lines, configs), a ``:SPLIT``
suffix: ``SWE-Gym/SWE-Gym:train``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swebox.envs.tasks.adapters import to_task
from swebox.envs.tasks.graders.provenance import set_origin, source_digest
from swebox.envs.tasks.harbor_format import folders as harbor
from swebox.envs.tasks.schema import Task, TaskError

_FIELD = re.compile(r"^Task\.(\w+):")
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class RowError:
    """Why one row could not become a task."""

    index: int
    """0-based row index in the source (for .jsonl, the line number minus one; blank lines count)."""
    field: str
    """The offending field ('' when the row as a whole is wrong)."""
    message: str
    """expected / found / how to fix."""
    source: str = ""
    """The file the row came from."""

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return (
            f"{where}{place(self.source, self.index)}"
            + (f", field {self.field!r}" if self.field else "")
            + f": {self.message}"
        )


def place(source: str, index: int) -> str:
    """A row as a person finds it: a JSONL line as editors count (1-based), any other row by its index."""
    return f"line {index + 1}" if str(source).endswith(".jsonl") else f"row {index}"


class LoadError(ValueError):
    """A source that cannot be read, or a bad row when skip_invalid is False."""

    def __init__(self, message: str, row: RowError | None = None) -> None:
        super().__init__(message)
        self.row = row
        """The row that failed, when the error is about one row."""


class TaskSet(list):
    """A list of tasks plus the rows that were skipped (only with skip_invalid=True)."""

    def __init__(self, tasks: list[Task], skipped: list[RowError]) -> None:
        super().__init__(tasks)
        self.skipped = skipped
        """Rows that failed validation, in source order."""

    def report(self) -> str:
        """A human-readable summary of the skipped rows."""
        lines = [f"{len(self)} tasks loaded, {len(self.skipped)} rows skipped"]
        return "\n".join(lines + [f"  {err}" for err in self.skipped])


def _read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as fh:
        for index, raw in enumerate(fh):
            if not raw.strip():
                continue
            try:
                yield index, json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                yield index, TaskError(f"expected UTF-8 text; found invalid bytes ({exc.reason}).")
            except json.JSONDecodeError as exc:  # its own "line 1" would contradict the file's line number
                yield (
                    index,
                    TaskError(
                        f"expected one JSON object per line; found invalid JSON at column {exc.colno} ({exc.msg})."
                    ),
                )


def _read_json(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LoadError(f"{path}: expected a JSON list of task objects; found invalid JSON ({exc}).") from None
    if isinstance(data, dict):
        for key in ("tasks", "instances", "data", "rows"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            data = [data]
    if not isinstance(data, list):
        raise LoadError(f"{path}: expected a JSON list of task objects; found {type(data).__name__}.")
    yield from enumerate(data)


def _read_parquet(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise LoadError(
            f"{path}: reading .parquet needs pyarrow; install it with `pip install pyarrow` "
            f"(or `pip install 'swebox[skyrl]'`)."
        ) from None
    yield from enumerate(pq.read_table(path).to_pylist())


SYNTH_TASKS, SYNTH_REJECTED = "tasks.jsonl", "rejected.jsonl"
"""What ``swebox tasks synth --out DIR`` writes (besides DIR/layers/, a layer store): the folder's tasks are
DIR/tasks.jsonl; rejected.jsonl holds the candidates that failed validation, in another shape."""


def _files_of(folder: Path, split: str) -> list[Path]:
    if (folder / SYNTH_TASKS).is_file() and (folder / SYNTH_REJECTED).is_file():  # a synthesis output folder
        return [folder / SYNTH_TASKS]
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.suffix in _DATA_SUFFIXES
        and p.is_file()
        and not p.name.startswith(".")
        and p.name != "dataset_info.json"
        and p.name != SYNTH_REJECTED
        and "manifests" not in p.relative_to(folder).parts[:-1]  # a layer store's manifests/ (e.g. DIR/layers)
    )
    by_split = [
        p for p in files if p.name.startswith(split) or f"/{split}/" in p.as_posix() or p.name.startswith(f"{split}-")
    ]
    return by_split or files


def _read_folder(folder: Path, split: str) -> Iterator[tuple[int, Any]]:
    # what `Dataset.save_to_disk` (state.json, *.arrow) and `DatasetDict.save_to_disk` (dataset_dict.json) write
    if any((folder / name).exists() for name in ("dataset_dict.json", "dataset_info.json", "state.json")) or any(
        folder.glob("*.arrow")
    ):
        yield from _read_hf(str(folder), split, local=True)
        return
    files = _files_of(folder, split)
    if not files:
        raise LoadError(f"{folder}: expected .jsonl, .json or .parquet files in the folder; found none.")
    offset = 0
    for file in files:
        count = 0
        for index, row in _READERS[file.suffix](file):
            count = index + 1
            yield offset + index, row
        offset += count


def _read_hf(name: str, split: str, *, local: bool = False) -> Iterator[tuple[int, Any]]:
    try:
        import datasets
    except ImportError:
        what = "a dataset folder saved by `datasets`" if local else f"the Hugging Face dataset {name!r}"
        raise LoadError(
            f"loading {what} needs the `datasets` package, which is not installed; install it "
            f"with `pip install datasets`, or export the rows to .jsonl/.parquet first."
        ) from None
    what = f"the dataset folder {name}" if local else f"the Hugging Face dataset {name!r}"
    try:
        ds = datasets.load_from_disk(name) if local else datasets.load_dataset(name)
    except Exception as exc:  # offline, unknown name, gated, corrupt folder: datasets raises many kinds
        raise LoadError(
            f"could not load {what}: {type(exc).__name__}: {exc}. Check the name (and HF_TOKEN for gated "
            f"datasets); without network, save it where there is network (`save_to_disk` or .jsonl/.parquet) "
            f"and load that."
        ) from exc
    if isinstance(ds, (datasets.DatasetDict, dict)):
        if split not in ds:
            raise LoadError(
                f"{what}: expected a split {split!r}; found {sorted(ds)}. Pick one with a :SPLIT suffix on "
                f"the source (e.g. {name}:{sorted(ds)[0] if ds else 'train'}) or load(..., split=...)."
            )
        ds = ds[split]
    yield from enumerate(ds)


_READERS = {".jsonl": _read_jsonl, ".json": _read_json, ".parquet": _read_parquet}


def _split_suffix(source: str | Path, split: str) -> tuple[str | Path, str]:
    """``"NAME:train"`` -> ``("NAME", "train")`` unless the whole string names an existing path."""
    if isinstance(source, str) and not Path(source).exists():
        head, colon, tail = source.rpartition(":")
        if colon and head and re.fullmatch(r"[\w.-]+", tail):
            return head, tail
    return source, split


def _rows(source: str | Path, split: str) -> Iterator[tuple[int, Any]]:
    source, split = _split_suffix(source, split)
    path = Path(source)
    if path.is_dir():
        return _read_folder(path, split)
    if path.is_file():
        if path.suffix not in _READERS:
            raise LoadError(f"{path}: expected a .jsonl, .json or .parquet file; found suffix {path.suffix!r}.")
        return _READERS[path.suffix](path)
    if isinstance(source, str) and re.match(r"^[\w.-]+/[\w.-]+$", source) and not path.suffix:
        return _read_hf(source, split)
    raise LoadError(
        f"{source}: expected an existing file or folder, or a Hugging Face dataset name like "
        f"'princeton-nlp/SWE-bench_Verified'; found nothing at that path."
    )


def load(source: str | Path, *, skip_invalid: bool = False, split: str = "test") -> TaskSet:
    """All tasks of ``source``; see the module docstring for formats and error handling.

    ``split`` picks the split of a Hugging Face dataset or of a folder whose files are named by split.
    Duplicate instance ids are bad rows too (a task id must identify one task).
    """
    tasks: list[Task] = []
    skipped: list[RowError] = []
    seen: dict[str, int] = {}
    if isinstance(source, (str, Path)) and harbor.task_dirs(Path(source)):
        return _load_harbor(Path(source), skip_invalid)
    digest = source_digest(_split_suffix(source, split)[0])
    for index, row in _rows(source, split):
        try:
            if isinstance(row, Exception):
                raise row
            task = to_task(row)
            if task.instance_id in seen:
                raise TaskError(
                    f"Task.instance_id: expected a unique id; found {task.instance_id!r} again "
                    f"(first at {place(str(source), seen[task.instance_id])}). Drop or rename the duplicate."
                )
        except (TaskError, KeyError, TypeError, ValueError) as exc:
            message = str(exc) if not isinstance(exc, KeyError) else f"missing key {exc}"
            match = _FIELD.match(message)
            err = RowError(index, match.group(1) if match else "", message, str(source))
            if not skip_invalid:
                raise LoadError(
                    f"{err}\n(to skip bad rows and list them: `swebox tasks validate {source} --skip-invalid`, or "
                    f"load(..., skip_invalid=True))",
                    err,
                ) from None
            skipped.append(err)
            continue
        seen[task.instance_id] = index
        tasks.append(set_origin(task, source, digest, index))  # provenance: the dataset's digest and row
    return TaskSet(tasks, skipped)


def _load_harbor(folder: Path, skip_invalid: bool) -> TaskSet:
    """A Harbor task folder, or a folder of them (each subfolder with a task.toml is one task)."""
    tasks: list[Task] = []
    skipped: list[RowError] = []
    for index, task_dir in enumerate(harbor.task_dirs(folder)):
        try:
            tasks.append(set_origin(harbor.load_task(task_dir), task_dir, source_digest(task_dir), index))
        except TaskError as exc:
            err = RowError(index, "", str(exc), str(task_dir))
            if not skip_invalid:
                raise LoadError(str(exc), err) from None
            skipped.append(err)
    return TaskSet(tasks, skipped)


def save_jsonl(tasks: list[Task], path: str | Path) -> None:
    """Write tasks one JSON object per line (the inverse of loading a .jsonl file)."""
    Path(path).write_text("".join(t.to_json() + "\n" for t in tasks), encoding="utf-8")
