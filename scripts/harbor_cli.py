"""``swebox tasks harbor-import`` and ``swebox tasks export --format harbor``: Harbor task folders in and out."""

from __future__ import annotations

import argparse
import os
import sys


def add_arguments(subparsers) -> None:
    """Add ``harbor-import`` and ``export`` to the ``tasks`` sub-parsers."""
    p = subparsers.add_parser(
        "harbor-import", help="load Harbor task folders, build their environments, write a task file"
    )
    p.add_argument("folder", help="a Harbor task folder (with task.toml) or a folder of them")
    p.add_argument(
        "--store",
        default=os.environ.get("SWEBOX_LAYER_STORE", "runs/layers"),
        help="the layer store holding the FROM images (swebox cache pull IMAGE); the environment "
        "layers are built into it (default $SWEBOX_LAYER_STORE or runs/layers)",
    )
    p.add_argument("--out", required=True, help="the task file to write (.jsonl)")
    p.add_argument(
        "--network",
        default="none",
        choices=("none", "user"),
        help="network of the Dockerfile's RUN lines (user: outbound through slirp4netns)",
    )
    p.add_argument("--skip-invalid", action="store_true", help="skip bad task folders (listed) instead of failing")
    p.set_defaults(func=run_import)
    e = subparsers.add_parser("export", help="write tasks in another format (harbor: Harbor task folders)")
    e.add_argument("--format", required=True, choices=("harbor",), help="the output format")
    e.add_argument("--tasks", required=True, help="task file (.jsonl/.json/.parquet), dataset folder or name")
    e.add_argument("--out", required=True, help="the folder to write one task folder per task into")
    e.add_argument("--skip-invalid", action="store_true", help="skip malformed rows (listed) instead of failing")
    e.set_defaults(func=run_export)


def run_import(args: argparse.Namespace) -> int:
    from swebox.envs.cache.store import BuildFailure
    from swebox.envs.tasks.harbor_format.dockerfile import DockerfileError
    from swebox.envs.tasks.harbor_format.folders import build_layers
    from swebox.envs.tasks.loaders import LoadError, load, save_jsonl
    from swebox.envs.tasks.schema import TaskError

    try:
        tasks = load(args.folder, skip_invalid=args.skip_invalid)
    except LoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for err in tasks.skipped:
        print(f"skipped: {err}", file=sys.stderr)
    try:
        built = build_layers(list(tasks), args.store, network=args.network)
    except (DockerfileError, BuildFailure, TaskError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    save_jsonl(built, args.out)
    print(f"{len(built)} Harbor tasks written to {args.out} (environments in {args.store})")
    return 0 if not tasks.skipped else 1


def run_export(args: argparse.Namespace) -> int:
    from swebox.envs.tasks.harbor_format.export import export
    from swebox.envs.tasks.loaders import LoadError, load

    try:
        tasks = load(args.tasks, skip_invalid=args.skip_invalid)
    except LoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    written, refused = export(list(tasks), args.out)
    for line in [*(str(e) for e in tasks.skipped), *refused]:
        print(f"skipped: {line}", file=sys.stderr)
    print(f"{len(written)} Harbor task folders written to {args.out}")
    return 0 if written and not refused and not tasks.skipped else 1
