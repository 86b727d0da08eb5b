"""``swebox eval --out FILE``: records that survive Ctrl-C, a full disk and a rerun.

Each task's record is appended to FILE the moment its episode (or search) ends, as one whole, fsynced JSON line
(:func:`swebox.envs.cache.durable.append_line`: a write that fails half-way is cut back), so an interrupted or
crashed evaluation keeps every finished task. A rerun with the same ``--out`` reads the records already there
and plays only the tasks that have none (resume), saying so; records of another policy are refused rather than
mixed. When every task is done the file is rewritten in task order, atomically (temporary file, then rename).

Ctrl-C ends the evaluation at once with one line, ``interrupted: N of M written to FILE``, and exit status 130;
episodes in flight are dropped (their sandboxes die with the process: nsinit's parent-death signal, and the next
sandbox start sweeps their folders) and a rerun plays them again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from swebox.envs.cache.durable import DISK_FULL, append_line, write_atomic
from swebox.trainers.run.trajectories import dumps

INTERRUPTED = 130
"""Exit status after Ctrl-C, as shells report a process ended by SIGINT."""


class RecordsError(Exception):
    """``--out`` cannot be read or written; the message is one line that says what to do."""


@dataclass
class EvalOut:
    """The ``--out`` file of one ``swebox eval`` run: the records found there and the ones appended."""

    path: Path
    """The JSON-lines file."""
    policy: str
    """``--policy`` of this run; stored in each record so that a rerun with another policy is refused."""
    previous: dict[str, dict[str, Any]] = field(default_factory=dict)
    """instance_id -> record already in the file when the run started (those tasks are not played again)."""
    written: int = 0
    """Records appended by this run."""

    @classmethod
    def open(cls, path: str | Path, policy: str) -> EvalOut:
        """Read what a previous run left in ``path`` (nothing if it does not exist) and make its folder."""
        path = Path(path)
        out = cls(path, policy)
        if path.is_dir():
            raise RecordsError(
                f"--out {path}: expected a file for the records; found a folder. Name a file, "
                "e.g. --out runs/eval/gold.jsonl"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        for n, record in enumerate(_read(path), 1):
            iid = record.get("instance_id") if isinstance(record, dict) else None
            if not isinstance(iid, str):
                raise RecordsError(
                    f"--out {path}: line {n}: expected a record of swebox eval (with an "
                    f"instance_id); found {str(record)[:60]!r}. Choose another --out file"
                )
            if record.get("policy", policy) != policy:
                raise RecordsError(
                    f"--out {path}: holds records of --policy {record['policy']}; found --policy "
                    f"{policy}. Choose another --out (or delete {path} to start over)"
                )
            out.previous[iid] = record
        return out

    def todo(self, tasks: Iterable[Any]) -> list[Any]:
        """The tasks that have no record yet."""
        return [t for t in tasks if t.instance_id not in self.previous]

    @property
    def count(self) -> int:
        """Records in the file now."""
        return len(self.previous) + self.written

    def append(self, record: dict[str, Any], total: int) -> None:
        """Add one finished task's record, durably; ``total`` (the run's task count) goes in a disk-full error.

        Ctrl-C during the append takes effect once the record is written and counted: a record whose line is
        already in the file is never cut back (nor left uncounted) because fsync was still running."""
        with _interrupt_deferred():
            try:
                append_line(self.path, dumps({**record, "policy": self.policy}))
            except OSError as exc:
                raise RecordsError(self._write_error(exc, total)) from exc
            self.written += 1

    def finish(self, records: dict[str, dict[str, Any]], order: list[str]) -> None:
        """Rewrite the file atomically: the run's tasks in ``order`` (new ``records`` or previous ones), then
        records of tasks not in this run, as they were."""
        merged = {**self.previous, **{k: {**v, "policy": self.policy} for k, v in records.items()}}
        ordered = [merged[i] for i in order if i in merged] + [r for i, r in merged.items() if i not in order]
        try:
            write_atomic(self.path, "".join(dumps(r) + "\n" for r in ordered))
        except OSError as exc:
            raise RecordsError(self._write_error(exc, len(order))) from exc

    def _write_error(self, exc: OSError, total: int) -> str:
        what = "no space left" if exc.errno in DISK_FULL else "cannot write"
        return (
            f"--out {self.path}: {what} ({exc.strerror or exc}) with {self.count} of {total} records "
            "written (all whole); free space and rerun the same command: it resumes"
        )


@contextlib.contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """Hold SIGINT (Ctrl-C) until the block ends, then raise KeyboardInterrupt if one came; only the main thread
    can change signal handlers, elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pending:
        raise KeyboardInterrupt


def _read(path: Path) -> list[Any]:
    """The records of an existing file; a cut last line (a crash of an older writer) is dropped from it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n") + 1
    if data[end:].strip():
        try:
            json.loads(data[end:])
        except ValueError:  # cut mid-record: the task is played again
            os.truncate(path, end)
            data = data[:end]
        else:  # whole, only its newline is missing
            append_line(path, "")
            data += b"\n"
    records = []
    for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            raise RecordsError(
                f"--out {path}: line {n}: expected one JSON record; found invalid JSON. Choose another --out file"
            ) from None
    return records


def run_tasks(
    todo: list[Any],
    one: Callable[[Any], Any],
    *,
    parallel: int,
    out: EvalOut | None,
    total: int,
    desc: str,
    record: Callable[[Any], dict[str, Any]] = lambda r: r,
) -> dict[str, Any]:
    """Run ``one(task)`` for each task, ``parallel`` at once, appending ``record(result)`` to ``out`` as each
    ends; returns instance_id -> result. Ctrl-C or a full disk ends the process with one line."""
    from tqdm import tqdm

    results: dict[str, Any] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    futures = {pool.submit(one, task): task.instance_id for task in todo}
    bar = tqdm(total=len(todo), desc=desc, unit="task")
    try:
        for future in as_completed(futures):
            result = future.result()
            if out is not None:
                out.append(record(result), total)
            results[futures[future]] = result
            bar.update()
    except KeyboardInterrupt:
        bar.close()
        where = f"written to {out.path}" if out is not None else "finished (pass --out FILE to keep them)"
        _stop(pool, futures, INTERRUPTED, f"interrupted: {out.count if out else len(results)} of {total} {where}")
    except RecordsError as exc:
        bar.close()
        _stop(pool, futures, 1, f"swebox eval: {exc}")
    bar.close()
    pool.shutdown()
    return results


def _stop(pool: ThreadPoolExecutor, futures: dict[Future, str], code: int, message: str) -> NoReturn:
    pool.shutdown(wait=False, cancel_futures=True)
    print(message, file=sys.stderr, flush=True)
    if not any(f.running() for f in futures):
        raise SystemExit(code)
    # an episode in flight cannot be interrupted (a command, a grading run) and a pool thread cannot be killed:
    # waiting for them would keep the user waiting for minutes, so the process ends now (see the module's note)
    sys.stdout.flush()
    os._exit(code)


def write_predictions(path: str | Path, records: list[dict[str, Any]], model: str) -> int:
    """``swebox eval --predictions-out FILE``: the records as SWE-bench predictions (JSON lines of
    ``instance_id``, ``model_name_or_path``, ``model_patch``: the episode's diff, '' when it made none), which
    ``swebox eval --predictions FILE`` and SWE-bench's harness score; written atomically. Records that ended in
    an error are left out (the harness would count them as empty patches). Returns the predictions written."""
    rows = [
        {"instance_id": r["instance_id"], "model_name_or_path": model, "model_patch": str(r.get("diff") or "")}
        for r in records
        if not r.get("error")
    ]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_atomic(path, "".join(json.dumps(row) + "\n" for row in rows))
    except OSError as exc:
        raise RecordsError(
            f"--predictions-out {path}: cannot write ({exc.strerror or exc}); free space or choose "
            "another file, and rerun the same command (with --out it plays nothing again)"
        ) from exc
    return len(rows)
