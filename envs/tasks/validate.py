"""Validating a task file: the gold patch must resolve each task and an empty diff must not.

Works on any task file. Layers come from a resolver (task -> list of layer folders): :class:`StoreLayers`
serves a LayerStore through the node's layer cache, :func:`layers_from_dirs` folders named after env/task
keys; each is a :class:`LayerResolver`, whose ``release(task)`` is called once the task's grading is done.
Tasks are graded ``jobs`` at a time (threads: the tests run in the sandboxes' processes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from swebox.envs.cache.toolchains import env_toolchains
from swebox.envs.tasks import progress
from swebox.envs.tasks.graders.grading import GradeReport, grade
from swebox.envs.tasks.graders.log_confirm import PREFIX as CONFIRM
from swebox.envs.tasks.graders.log_parsers import normal_status
from swebox.envs.tasks.schema import Task

CONFIRM_ONLY = (
    "gold resolves by the log but not under the runner: set confirm='off' for this task "
    "(the targeted gap then stays open; docs/tasks.md)"
)
"""The problem shown when the gold patch fails only at the log verdict's confirmation (log_confirm.py)."""
NETWORK_ERRORS = re.compile(
    r"Temporary failure in name resolution|Name or service not known|Network is unreachable|No route to host"
    r"|Failed to establish a new connection|getaddrinfo failed|nodename nor servname"
)
"""What a test that reached for the network in a sandbox without one fails with (urllib, requests, socket)."""


class LayerResolver(Protocol):
    """Where a task's layer folders come from while it is graded."""

    def __call__(self, task: Task) -> list:
        """The task's layer folders, lowest first (held until ``release``)."""
        ...

    def release(self, task: Task) -> None:
        """The task's grading is done: let go of what ``__call__`` holds for it."""
        ...


@dataclass
class Validation:
    """One task's validation."""

    instance_id: str
    """The task."""
    gold: GradeReport | None
    """The gold patch's grade (None when grading could not start)."""
    empty: GradeReport | None
    """The empty diff's grade."""
    problem: str = ""
    """'' when the task passed; otherwise what was wrong."""

    @property
    def passed(self) -> bool:
        """Gold resolves and the empty diff does not."""
        return not self.problem


class DirLayers:
    """Resolver for a folder holding ``<env_key>/`` and ``<task_layer_key>/`` layer folders (nothing to hold)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __call__(self, task: Task) -> list:
        if not task.env_key:
            raise ValueError(f"task {task.instance_id}: expected an env spec to find its layer; found none.")
        layers = [self.root / task.env_key] + ([self.root / task.task_layer_key] if task.task_layer_key else [])
        missing = [str(p) for p in layers if not p.is_dir()]
        if missing:
            raise ValueError(
                f"task {task.instance_id}: expected layer folders {missing}; build them first "
                f"(swebox cache build / swebox tasks synth)."
            )
        return layers

    def release(self, task: Task) -> None:
        """Nothing is held: the folders are there for good."""


def layers_from_dirs(root: str | Path) -> DirLayers:
    """Resolver for a folder holding ``<env_key>/`` and ``<task_layer_key>/`` layer folders."""
    return DirLayers(root)


class StoreLayers:
    """Resolver over a LayerStore folder: layers are materialised in the node-local cache and held until release."""

    def __init__(self, store_root: str | Path) -> None:
        from swebox.envs.cache import LayerCache, LayerStore

        self.cache = LayerCache(LayerStore(Path(store_root)))
        self._held: dict[str, list] = {}  # instance id -> its layer handles

    def __call__(self, task: Task) -> list:
        keys = [task.env_key] + ([task.task_layer_key] if task.task_layer_key else [])
        missing = [k for k in keys if not k or self.cache.store.get(k) is None]
        if missing:
            raise ValueError(
                f"task {task.instance_id}: expected layers {missing} in the store "
                f"{self.cache.store.root}; build them with `swebox cache --store {self.cache.store.root} "
                "build --tasks TASKS` (or `swebox tasks synth`)."
            )
        # the toolchain layers the env layer was built on (its manifest names them) go below it, as in episodes
        keys = [*env_toolchains(self.cache.store, task.env_key).layers.values(), *keys]
        held, paths = self._held.setdefault(task.instance_id, []), []
        for key in keys:  # held one by one: if the task layer fails, release() still frees the env layer
            handle = self.cache.acquire(key)
            held.append(handle)
            paths.append(handle.path)
        return paths

    def release(self, task: Task) -> None:
        """Let go of the task's layers (a long task file must not hold every layer it has seen)."""
        for handle in self._held.pop(task.instance_id, []):
            handle.release()

    def close(self) -> None:
        self._held.clear()
        self.cache.close()


def is_layer_store(root: str | Path) -> bool:
    """A LayerStore folder (manifests/ inside) rather than a folder of unpacked layer folders."""
    return (Path(root) / "manifests").is_dir()


def layers_flag_error(value: str | Path) -> str:
    """'' when ``--layers VALUE`` is a folder; else the one-line error that names the flag and how to fix it."""
    if Path(value).is_dir():
        return ""
    return (
        f"--layers {value}: expected a layer store (a folder with manifests/, which `swebox cache build` and "
        "`swebox tasks synth` write) or a folder of layer folders named by key; found no folder there "
        f"(relative paths start at {Path.cwd()}); fix the path, or build the layers first"
    )


def validate_task(task: Task, resolve: LayerResolver, *, timeout: float = 900.0) -> Validation:
    """Grade the gold patch and the empty diff of one task."""
    try:
        layers = resolve(task)
        gold = grade(task, task.patch, layers=layers, timeout=timeout)
        empty = grade(task, "", layers=layers, timeout=timeout)
    except Exception as exc:  # a broken task must not stop the others
        return Validation(task.instance_id, None, None, f"could not grade: {type(exc).__name__}: {exc}")
    finally:
        resolve.release(task)
    problems = []
    if gold.confirm == "failed":  # the log's own verdict resolved (the confirmation runs only then)
        why = [e for e in gold.errors + gold.tampered if e.startswith(CONFIRM)]
        problems.append(f"{CONFIRM_ONLY} ({'; '.join(why[:3])})")
    elif not gold.resolved:
        why = gold.errors + gold.tampered + [f"{i}: {p}" for i, p in gold.unknown_ids]
        failing = [t for t, o in gold.tests.items() if o.status not in ("passed", "xfailed")]
        cause = needs_network(task, gold)
        problems += [cause] if cause else []
        problems.append(f"gold patch does not resolve ({'; '.join((why + failing)[:3]) or 'tests fail'})")
    if empty.resolved:
        problems.append("empty diff resolves (no test fails before the fix)")
    return Validation(task.instance_id, gold, empty, "; ".join(problems))


def needs_network(task: Task, report: GradeReport) -> str:
    """'needs network: ...' when a test that did not pass, or the run's output, failed on a name lookup or a
    connection (NETWORK_ERRORS); '' otherwise."""
    texts = [o.message for o in report.tests.values() if o.status not in ("passed", "xfailed")]
    found = next((m.group(0) for t in [*texts, report.output_tail] for m in [NETWORK_ERRORS.search(t)] if m), "")
    if not found:
        return ""
    if task.network == "user":
        return f"needs network: its tests failed on {found!r} with network='user': this host reaches no internet"
    return (
        f"needs network: its tests failed on {found!r} in a sandbox without network; grade it with the task's "
        "network='user' where the host has the internet (SWE-bench's harness runs every row with network)"
    )


def validate(
    tasks: Iterable[Task],
    resolve: LayerResolver,
    *,
    timeout: float = 900.0,
    jobs: int = 1,
    on_result: Callable[[Validation], None] | None = None,
) -> list[Validation]:
    """Validate every task, ``jobs`` at a time; results in the tasks' order, ``on_result`` sees each as it ends."""
    if jobs < 1:
        raise ValueError(f"validate(jobs=...): expected jobs >= 1; found {jobs}.")
    tasks = list(tasks)
    results: dict[int, Validation] = {}  # by input position: every future fills its slot or raises
    with (
        ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="validate") as pool,
        progress.bar(len(tasks), "validate", "task") as shown,
    ):
        futures = {pool.submit(validate_task, task, resolve, timeout=timeout): i for i, task in enumerate(tasks)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if on_result is not None:
                with progress.above():
                    on_result(results[futures[future]])
            shown.update()
    return [results[i] for i in range(len(tasks))]


def row(v: Validation, width: int = 40) -> str:
    """One table row: id (in a column ``width`` wide), verdict, gold F2P/P2P, empty F2P, problem."""

    def counts(r: GradeReport | None) -> str:
        return f"{r.f2p_passed}/{r.f2p_total} {r.p2p_passed}/{r.p2p_total}" if r else "-"

    verdict = "ok" if v.passed else "FAIL"
    return f"{v.instance_id:<{width}} {verdict:<5} {counts(v.gold):<14} {counts(v.empty):<14} {v.problem}"


def report_lines(task: Task, v: Validation) -> list[str]:
    """``--report``: one line per test of the task: what the dataset says next to the gold and empty statuses.

    F2P tests must fail before the fix (empty diff) and pass after it (gold); P2P tests pass in both;
    ``expected_status`` entries must end (gold) with the status given. A line that disagrees is marked DIFFERS.
    """

    def status(r: GradeReport | None, test_id: str) -> str:
        return r.tests[test_id].status if r is not None and test_id in r.tests else "-"

    passing = ("passed", "xfailed")
    rows: list[tuple[str, str, str, Callable[..., bool]]]
    rows = [("F2P", t, "fail->pass", lambda g, e: g in passing and e not in passing) for t in task.FAIL_TO_PASS]
    rows += [("P2P", t, "pass->pass", lambda g, e: g in passing and e in passing) for t in task.PASS_TO_PASS]
    rows += [
        ("EXP", t, f"->{want}", lambda g, e, want=want: g == normal_status(want))
        for t, want in task.expected_status.items()
    ]
    out = [f"  {'':<4} {'dataset':<12} {'gold':<9} {'empty':<9} {'':<8} test"]
    for kind, test_id, says, agrees in rows:
        gold, empty = status(v.gold, test_id), status(v.empty, test_id)
        mark = "ok" if agrees(gold, empty) else "DIFFERS"
        out.append(f"  {kind:<4} {says:<12} {gold:<9} {empty:<9} {mark:<8} {test_id}")
    return out


def header(width: int = 40) -> str:
    """The table's first line; ``width``: the id column's, the longest id's (rows stream as tasks finish, so
    the width comes from the task list, not from the results)."""
    return f"{'task':<{width}} {'':<5} {'gold F2P P2P':<14} {'empty F2P P2P':<14} problem"


def summary(results: list[Validation]) -> str:
    """Exactly ``N passed, M failed``."""
    passed = sum(v.passed for v in results)
    return f"{passed} passed, {len(results) - passed} failed"
