"""The ``swebox`` command: one sub-command per job (doctor, bench, cache, tasks, skyrl, view, train, sft, eval, plot,
demo)."""

from __future__ import annotations

import argparse
import os
import sys

DEBUG_ENV = "SWEBOX_DEBUG"


class UserError(Exception):
    """A mistake in what the user gave a command (a path, a value): printed as one line, no traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swebox", description=__doc__)
    parser.add_argument("--debug", action="store_true", help=f"show the traceback of an error (also ${DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", required=True)

    from swebox.scripts import (
        bench_cache,
        bench_cost,
        bench_cost_demo,
        bench_gateway,
        bench_grade_cache,
        bench_grading,
        bench_images,
        bench_sandbox,
        bench_search,
        verified_cost,
    )

    bench = sub.add_parser("bench", help="run a benchmark and print its table")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    bench_sandbox.add_arguments(bench_sub.add_parser("sandbox", help="sandbox start/reset/exec: overlay vs extract"))
    bench_cache.add_arguments(bench_sub.add_parser("cache", help="layer storage and restore times by format"))
    bench_grading.add_arguments(bench_sub.add_parser("grading", help="grading overhead over a direct test run"))
    bench_images.add_arguments(bench_sub.add_parser("images", help="images: pull+convert, size, cold start, reset"))
    bench_grade_cache.add_arguments(
        bench_sub.add_parser(
            "grade-cache", help="GRPO rollouts with and without grade memoisation (a converged policy)"
        )
    )
    bench_gateway.add_arguments(bench_sub.add_parser("gateway", help="the model gateway's overhead per call"))
    bench_search.add_arguments(bench_sub.add_parser("search", help="fork at turn k vs replay; forked vs cold starts"))
    bench_cost.add_arguments(bench_sub.add_parser("cost", help="rollouts with and without measuring their cost"))
    bench_cost_demo.add_arguments(
        bench_sub.add_parser(
            "cost-demo", help="the demo's GRPO steps with audit, provenance and cost on vs off (needs a demo run)"
        )
    )

    verified_cost.add_arguments(
        bench_sub.add_parser("verified-cost", help="Verified rows: cold start of the whole stack, storage projected")
    )

    from swebox.scripts import cache_cli, doctor

    cache_cli.add_arguments(sub)
    doctor.add_arguments(sub)

    from swebox.scripts import harbor_cli, synth_cli, tasks_cli

    tasks = sub.add_parser("tasks", help="task files: synthesise, validate, Harbor import/export")
    tasks_sub = tasks.add_subparsers(dest="tasks", required=True)
    tasks_cli.add_arguments(tasks_sub)
    synth_cli.add_arguments(tasks_sub)
    harbor_cli.add_arguments(tasks_sub)

    from swebox.scripts import skyrl_cli

    skyrl_cli.add_arguments(sub)

    from swebox.scripts.viewer import app as viewer

    viewer.add_arguments(sub)

    try:
        from swebox.scripts import demo, plot_cli, train_cli
    except ImportError as exc:  # the `train` extra is not installed: its commands say how to install it
        missing = exc  # `exc` is unbound when the except block ends; the commands below raise it later

        def needs_train(args: argparse.Namespace) -> int:
            raise missing

        for name in ("train", "sft", "plot", "demo"):
            unavailable = sub.add_parser(name, help=f"unavailable: {exc}; pip install 'swebox[train]'")
            unavailable.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            unavailable.set_defaults(func=needs_train)
        from swebox.scripts import eval_cli

        def eval_predictions(args: argparse.Namespace) -> int:
            if args.policy:  # playing a policy is the trainer's work
                raise missing
            return eval_cli.run_scoring(args)

        ev = sub.add_parser("eval", help="score SWE-bench predictions (policies need pip install 'swebox[train]')")
        ev.add_argument("--policy", default="", help="needs pip install 'swebox[train]'")
        ev.add_argument("--tasks", required=True, help="the dataset the predictions are for")
        ev.add_argument("--layers", default="", help="layer store (default $SWEBOX_LAYER_STORE or runs/layers)")
        ev.add_argument("--out", default="", help="the report (default <model>.<run-id>.json)")
        eval_cli.add_score_options(ev)
        ev.set_defaults(func=eval_predictions)
    else:
        train_cli.add_arguments(sub)
        plot_cli.add_arguments(sub)
        demo.add_arguments(sub)
    return parser


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exceptions that mean the input was wrong, not that swebox is broken: a config, a task file, a path.

    Imported only once an error happened, so that a command's start does not pay for the trainer's imports.
    """
    import yaml
    from swebox.envs.cache.interpreters import InterpreterNotFound
    from swebox.envs.episodes.layers_resolver import LayersMissing
    from swebox.envs.tasks.loaders import LoadError
    from swebox.envs.tasks.schema import TaskError
    from swebox.envs.tasks.selection import SelectionError
    from swebox.envs.tasks.synth.recipe import RecipeError

    kinds: list[type[BaseException]] = [
        UserError,
        LoadError,
        TaskError,
        RecipeError,
        LayersMissing,
        SelectionError,
        InterpreterNotFound,
        yaml.YAMLError,
        FileNotFoundError,
        NotADirectoryError,
        IsADirectoryError,
        PermissionError,
    ]  # a store of another user's, a layer packed for one
    try:
        from swebox.scripts.demo import DemoError
        from swebox.trainers.run.config import ConfigError
    except ImportError:  # the train extra is not installed: none of its errors can happen
        pass
    else:
        kinds += [ConfigError, DemoError]
    return tuple(kinds)


def one_line(exc: BaseException) -> str:
    """The error as one line: what was expected, what was found, how to fix it."""
    if isinstance(exc, OSError) and exc.filename:
        if exc.errno is not None and exc.strerror != os.strerror(exc.errno):
            return f"{exc.filename}: {exc.strerror}"  # a message of ours, not the OS's
        kind = {
            FileNotFoundError: "not found",
            IsADirectoryError: "is a folder, expected a file",
            NotADirectoryError: "is not a folder",
        }.get(type(exc), exc.strerror or "cannot be read")
        return f"{exc.filename}: {kind}; check the path (relative paths start at {os.getcwd()})"
    text = str(exc).strip() or type(exc).__name__
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not hasattr(args, "func"):
        raise SystemExit(f"swebox {args.command}: unavailable here (see `swebox --help`)")
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C where the command has no message of its own (train and eval have)
        if debug:
            raise
        print(f"swebox {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from swebox.scripts.extras import hint, missing_extra

        if not debug and missing_extra(exc, args.command):
            print(hint(exc, args.command), file=sys.stderr)
            return 2
        if not debug and disk_full(exc):
            print(
                f"swebox {args.command}: error: {disk_full(exc)} [swebox --debug shows the traceback]", file=sys.stderr
            )
            return 1
        if debug or not isinstance(exc, user_error_types()):
            raise
        print(f"swebox {args.command}: error: {one_line(exc)} [swebox --debug shows the traceback]", file=sys.stderr)
        return 2


def disk_full(exc: BaseException) -> str:
    """The one line for an error caused by a full disk or quota (found along the exception's causes), or ''."""
    from swebox.envs.cache.durable import DISK_FULL

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL:
            where = f" writing {exc.filename}" if exc.filename else ""
            return (
                f"no space left on the disk{where} ({exc.strerror or os.strerror(exc.errno)}); free space, or "
                "point the command's output (--out, logging.run_dir, checkpoint.dir) at a larger disk, and rerun"
            )
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return ""


if __name__ == "__main__":
    sys.exit(main())
