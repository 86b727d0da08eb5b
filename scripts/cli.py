"""The ``swebox`` command: one sub-command per job (bench, cache, tasks, skyrl, train, sft, eval, plot, demo)."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swebox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    from swebox.scripts import bench_cache, bench_grading, bench_sandbox

    bench = sub.add_parser("bench", help="run a benchmark and print its table")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    bench_sandbox.add_arguments(bench_sub.add_parser("sandbox", help="sandbox start/reset/exec: overlay vs extract"))
    bench_cache.add_arguments(bench_sub.add_parser("cache", help="layer storage and restore times by format"))
    bench_grading.add_arguments(bench_sub.add_parser("grading", help="grading overhead over a direct test run"))

    from swebox.envs.cache import cli as cache_cli

    cache_cli.add_arguments(sub)

    from swebox.envs.tasks import cli as tasks_cli
    from swebox.envs.tasks import synth_cli

    tasks = sub.add_parser("tasks", help="task files: synthesise and validate")
    tasks_sub = tasks.add_subparsers(dest="tasks", required=True)
    tasks_cli.add_arguments(tasks_sub)
    synth_cli.add_arguments(tasks_sub)

    from swebox.envs import skyrl_prepare

    skyrl_prepare.add_arguments(sub)

    try:
        from swebox.scripts import demo
        from swebox.trainers import cli as train_cli
        from swebox.trainers import plot
    except ImportError as exc:  # the `train` extra is not installed
        for name in ("train", "sft", "eval", "plot", "demo"):
            sub.add_parser(name, help=f"unavailable: {exc}; pip install 'swebox[train]'")
    else:
        train_cli.add_arguments(sub)
        plot.add_arguments(sub)
        demo.add_arguments(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not hasattr(args, "func"):
        raise SystemExit(f"swebox {args.command}: unavailable here (see `swebox --help`)")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
