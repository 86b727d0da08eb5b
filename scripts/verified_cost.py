"""What a Verified row costs here, measured as the paper reports it: environment preparation per rollout and
storage for the split (issue 32, item 4; docs/verified.md).

    swebox bench verified-cost ROWS.parquet STORE [--reps 5] [--verified VERIFIED.parquet]

For each row of ``ROWS`` whose layers the store holds:

- **cold start**: from a node cache that holds nothing (a fresh LayerCache folder: every layer is copied from
  the store and mounted), the row's whole stack (interpreter and toolchain layers, env layer, starting tree)
  acquired the way an episode acquires it, a sandbox started over it and ``true`` run in it; the median of
  ``--reps`` runs. The page cache is not dropped (the machine is shared), so the store's files may be read from
  memory; the paper's 23.62 s is its per-rollout unpack of a venv tarball, 88.86 s its container start.
- **storage**: the packed size of each layer the row needs. The layers a store holds once (interpreters, env
  layers shared by a repository's version) are counted once for the sample; for the whole split, with
  ``--verified``, the split's distinct env keys and starting trees are counted from its rows (swebox's own
  keys) and priced at the sample's mean sizes, against the paper's 89 GB (MiniSandbox) and 605 GB (containers)
  for its 500 rows.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PAPER_PREP_S = {"SWE-MiniSandbox": 23.62, "containers": 88.86}
"""The paper's environment preparation per rollout (seconds)."""
PAPER_STORAGE_GB = {"SWE-MiniSandbox": 89.0, "containers": 605.0}
"""The paper's storage for SWE-bench Verified's 500 rows (GB)."""


@dataclass
class RowCost:
    """One row's layers and cold start."""

    instance_id: str
    layers: dict[str, tuple[str, int]]
    """kind ('python:NAME', 'toolchain:NAME', 'env', 'task') -> (layer key, packed bytes)."""
    cold_ms: list[float]
    """Each cold start, milliseconds."""


def row_layers(task, store) -> dict[str, tuple[str, int]] | None:
    """The row's layers in the store with their packed sizes, lowest first; None when one is missing."""
    from swebox.envs.cache.toolchains import ToolchainMissing, env_toolchains

    if not task.env_key or store.get(task.env_key) is None:
        return None
    try:
        under = env_toolchains(store, task.env_key)
    except ToolchainMissing:
        return None
    keys = [*(("python:" + n, k) for n, k in under.interpreter.items())]
    keys += [*(("toolchain:" + n, k) for n, k in under.toolchains.items()), ("env", task.env_key)]
    if task.task_layer_key:
        keys.append(("task", task.task_layer_key))
    manifests = {kind: (key, store.get(key)) for kind, key in keys}
    if any(m is None for _, m in manifests.values()):
        return None
    return {kind: (key, m.size) for kind, (key, m) in manifests.items()}


def cold_start_ms(task, store_root: Path, work: Path) -> float:
    """One cold start of ``task``'s stack from an empty node cache in ``work`` (removed after)."""
    from swebox.envs.episodes.layers_resolver import LayerSource, acquire_layers, close_shared_caches
    from swebox.envs.sandbox import Sandbox, SandboxPolicy
    from swebox.envs.sandbox.policy import DEFAULT_ENV

    source = LayerSource(store=str(store_root), cache_root=str(work))
    try:
        started = time.perf_counter()
        with acquire_layers(task, source) as layers:
            policy = SandboxPolicy(env={**DEFAULT_ENV, **layers.env})
            with Sandbox(list(layers.paths), policy) as sb:
                sb.exec("true", timeout=120)
                return (time.perf_counter() - started) * 1000
    finally:
        close_shared_caches()
        shutil.rmtree(work, ignore_errors=True)


def projection(sample: list[RowCost], env_keys: int, task_layers: int) -> dict[str, float]:
    """Bytes for a split of ``env_keys`` distinct env layers and ``task_layers`` starting trees, priced at the
    sample's mean env and task layer sizes, plus the sample's interpreter and toolchain layers (a store holds
    each once whatever the split's size)."""
    envs = {key: size for row in sample for kind, (key, size) in row.layers.items() if kind == "env"}
    tasks = {key: size for row in sample for kind, (key, size) in row.layers.items() if kind == "task"}
    shared = {key: size for row in sample for kind, (key, size) in row.layers.items() if ":" in kind}
    env_bytes = statistics.mean(envs.values()) * env_keys if envs else 0.0
    task_bytes = statistics.mean(tasks.values()) * task_layers if tasks else 0.0
    return {"env": env_bytes, "task": task_bytes, "shared": float(sum(shared.values()))}


def measure(rows_file: str, store_root: str, reps: int) -> tuple[list[RowCost], list[str]]:
    """Each row's cost; and the ids of rows whose layers the store lacks (listed, not dropped silently)."""
    from swebox.envs.cache import LayerStore
    from swebox.envs.tasks import load

    store = LayerStore(Path(store_root))
    costs, missing = [], []
    with tempfile.TemporaryDirectory(prefix="swebox-cold-") as tmp:
        for task in load(rows_file):
            layers = row_layers(task, store)
            if layers is None:
                missing.append(task.instance_id)
                continue
            colds = [cold_start_ms(task, store.root, Path(tmp) / f"node-{i}") for i in range(reps)]
            costs.append(RowCost(task.instance_id, layers, colds))
    return costs, missing


def report(costs: list[RowCost], missing: list[str], verified: str = "", out=None) -> None:
    """The markdown tables of docs/verified.md's cost section, to ``out`` (default stdout)."""
    out = out or sys.stdout
    mb = 1e6
    print(
        "| row | layers | interpreter + toolchains MB | env MB | starting tree MB | cold start ms (median) |", file=out
    )
    print("|---|---:|---:|---:|---:|---:|", file=out)
    for c in costs:
        shared = sum(size for kind, (_, size) in c.layers.items() if ":" in kind)
        env, task = c.layers["env"][1], c.layers.get("task", ("", 0))[1]
        print(
            f"| {c.instance_id} | {len(c.layers)} | {shared / mb:.1f} | {env / mb:.1f} | {task / mb:.2f} | "
            f"{statistics.median(c.cold_ms):.0f} |",
            file=out,
        )
    if missing:
        print(f"\nnot measured (a layer missing from the store): {', '.join(missing)}", file=out)
    if not costs:
        return
    cold_s = statistics.median(statistics.median(c.cold_ms) for c in costs) / 1000
    prep = ", ".join(f"{name} {s} s ({s / cold_s:.0f}x ours)" for name, s in PAPER_PREP_S.items())
    print(f"\ncold start, median over the rows: {cold_s:.3f} s; the paper: {prep}", file=out)
    unique = {key: size for c in costs for key, size in c.layers.values()}
    print(f"sample store: {len(unique)} layers, {sum(unique.values()) / mb:.0f} MB for {len(costs)} rows", file=out)
    if verified:
        from swebox.envs.tasks import load

        tasks = list(load(verified, skip_invalid=True))
        env_keys = len({t.env_key for t in tasks if t.env_key})
        task_layers = len({t.task_layer_key for t in tasks if t.task_layer_key})
        parts = projection(costs, env_keys, task_layers)
        total_gb = sum(parts.values()) / 1e9
        paper = ", ".join(f"{name} {gb:.0f} GB ({gb / total_gb:.0f}x ours)" for name, gb in PAPER_STORAGE_GB.items())
        print(
            f"projected for {len(tasks)} rows ({env_keys} env layers x mean {parts['env'] / max(env_keys, 1) / mb:.0f} "
            f"MB, {task_layers} starting trees x mean {parts['task'] / max(task_layers, 1) / mb:.1f} MB, "
            f"{parts['shared'] / mb:.0f} MB interpreters/toolchains): {total_gb:.1f} GB; the paper: {paper}",
            file=out,
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rows", help="the rows measured (a parquet or jsonl of Verified rows)")
    parser.add_argument("store", help="the layer store `swebox cache build` built them into")
    parser.add_argument("--reps", type=int, default=5, help="cold starts per row (default 5)")
    parser.add_argument("--verified", default="", help="the whole split, for the storage projection")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.reps < 1:
        raise SystemExit(f"swebox bench verified-cost: --reps: expected >= 1, found {args.reps}")
    costs, missing = measure(args.rows, args.store, args.reps)
    report(costs, missing, args.verified)
    return 0 if costs else 1
