"""What the benches over a task file share: its arguments (--tasks, --store, --limit, --reps) and its tasks."""

from __future__ import annotations

import argparse

from swebox.envs.episodes.layers_resolver import LayerSource
from swebox.envs.tasks import load
from swebox.envs.tasks.schema import Task


def add_task_arguments(
    parser: argparse.ArgumentParser, *, limit: int, limit_help: str, reps: int, reps_help: str
) -> None:
    """--tasks, --store, --limit (``limit_help``, default ``limit``) and --reps (``reps_help``, default ``reps``)."""
    parser.add_argument("--tasks", required=True, help="tasks file whose layers are in the store")
    parser.add_argument("--store", default="", help="layer store (default $SWEBOX_LAYER_STORE or runs/layers)")
    parser.add_argument("--limit", type=int, default=limit, help=f"{limit_help} (default {limit})")
    parser.add_argument("--reps", type=int, default=reps, help=f"{reps_help} (default {reps})")


def bench_tasks(args: argparse.Namespace) -> tuple[list[Task], LayerSource]:
    """The first ``--limit`` tasks of ``--tasks`` (at least one) and where their layers are."""
    tasks = list(load(args.tasks))[: args.limit]
    if not tasks:
        raise SystemExit(f"--tasks {args.tasks}: expected at least one task; found none")
    return tasks, LayerSource(store=args.store)
