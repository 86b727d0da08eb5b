"""``swebox tasks validate``: grade every task's gold patch and an empty diff; exit 1 on any mismatch.
``swebox tasks calibrate``: grade each N times, find flaky tests, write a calibration file (calibrate.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(subparsers) -> None:
    """Add the ``validate`` sub-command to the ``tasks`` sub-parsers."""
    p = subparsers.add_parser("validate", help="check that gold patches resolve and empty diffs do not")
    p.add_argument("tasks", help="task file (.jsonl/.json/.parquet), dataset folder or dataset name")
    p.add_argument(
        "--layers",
        default=os.environ.get("SWEBOX_LAYER_STORE", "runs/layers"),
        help="a layer store (as written by `swebox cache build` / `swebox tasks synth`; default "
        "$SWEBOX_LAYER_STORE or runs/layers), or a folder of layer folders named by env and task layer key",
    )
    p.add_argument("--skip-invalid", action="store_true", help="skip malformed rows (listed) instead of failing")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per test run (default 900)")
    p.add_argument("--limit", type=int, default=0, help="validate only the first N tasks (0 = all)")
    p.add_argument("--jobs", type=int, default=1, help="tasks graded at once (default 1; up to the cores)")
    p.add_argument(
        "--report",
        action="store_true",
        help="under each task, its tests: what the dataset says next to the gold and empty statuses",
    )
    p.add_argument("--json", dest="json_out", default="", help="also write per-task reports to this .jsonl")
    p.set_defaults(func=run_validate)
    c = subparsers.add_parser("calibrate", help="grade gold and empty N times each: pass rates, flaky tests")
    c.add_argument("tasks", help="task file (.jsonl/.json/.parquet), dataset folder or dataset name")
    c.add_argument(
        "--layers",
        default=os.environ.get("SWEBOX_LAYER_STORE", "runs/layers"),
        help="a layer store or a folder of layer folders (as for `swebox tasks validate`)",
    )
    c.add_argument("--out", required=True, help="the calibration file to write (JSON; train/eval --calibration)")
    c.add_argument("--runs", type=int, default=3, help="grades of the gold patch, and of the empty diff (default 3)")
    c.add_argument("--timeout", type=float, default=900.0, help="seconds per test run (default 900)")
    c.add_argument("--limit", type=int, default=0, help="calibrate only the first N tasks (0 = all)")
    c.add_argument("--jobs", type=int, default=1, help="tasks calibrated at once (default 1)")
    c.add_argument(
        "--policy",
        default="",
        help="also play this policy (as swebox eval --policy: gold, empty, "
        "hf:MODEL_FOLDER, openai:BASE_URL) --policy-runs times per task; its solve rate orders "
        "env.calibration_order",
    )
    c.add_argument("--policy-runs", type=int, default=3, help="episodes of --policy per task (default 3)")
    c.add_argument("--model", default="", help="with --policy openai:URL: the model name sent to the server")
    c.add_argument(
        "--config",
        default=None,
        help="with --policy: a training config whose env/generation "
        "sections the episodes use (as swebox eval --config)",
    )
    c.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --policy: a dotted config override, e.g. --set env.max_turns=10 (repeatable; an "
        "option, not a trailing word, since TASKS is positional)",
    )
    c.set_defaults(func=run_calibrate)


def run_validate(args: argparse.Namespace) -> int:
    from swebox.envs.tasks.loaders import LoadError, load
    from swebox.envs.tasks.validate import (
        StoreLayers,
        header,
        is_layer_store,
        layers_flag_error,
        layers_from_dirs,
        report_lines,
        row,
        summary,
        validate,
    )

    if args.jobs < 1:
        print(f"error: --jobs: expected a number >= 1; found {args.jobs}.", file=sys.stderr)
        return 2
    if layers_flag_error(args.layers):
        print(f"error: {layers_flag_error(args.layers)}", file=sys.stderr)
        return 2
    try:
        tasks = load(args.tasks, skip_invalid=args.skip_invalid)
    except LoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for err in tasks.skipped:
        print(f"skipped: {err}", file=sys.stderr)
    if not tasks:
        print(
            f"error: {args.tasks}: no tasks to validate (0 rows loaded{', all skipped' if tasks.skipped else ''}); "
            "expected one task per line",
            file=sys.stderr,
        )
        return 2
    selected = list(tasks)[: args.limit] if args.limit else list(tasks)
    by_id = {t.instance_id: t for t in selected}
    width = max([40, *(len(t.instance_id) for t in selected)])  # long ids would push their row out of line

    def show(v) -> None:
        lines = [row(v, width), *(report_lines(by_id[v.instance_id], v) if args.report else [])]
        print("\n".join(lines), flush=True)

    print(header(width))
    resolver = StoreLayers(args.layers) if is_layer_store(args.layers) else layers_from_dirs(args.layers)
    try:
        results = validate(
            selected,
            resolver,
            timeout=args.timeout,
            jobs=args.jobs,
            on_result=show,
        )
    finally:
        if isinstance(resolver, StoreLayers):
            resolver.close()
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            for v in results:
                fh.write(
                    json.dumps(
                        {
                            "instance_id": v.instance_id,
                            "passed": v.passed,
                            "problem": v.problem,
                            "gold": v.gold.to_dict() if v.gold else None,
                            "empty": v.empty.to_dict() if v.empty else None,
                        }
                    )
                    + "\n"
                )
    print(summary(results))
    return 0 if all(v.passed for v in results) and not tasks.skipped else 1


def run_calibrate(args: argparse.Namespace) -> int:
    """Calibrate, print a row per task and the summary, write ``--out``; exit 0 (unusable tasks are data)."""
    from swebox.envs.tasks import calibrate as cb
    from swebox.envs.tasks.loaders import LoadError, load
    from swebox.envs.tasks.validate import StoreLayers, is_layer_store, layers_flag_error, layers_from_dirs

    for flag, value in (("--runs", args.runs), ("--jobs", args.jobs), ("--policy-runs", args.policy_runs)):
        if value < 1:
            print(f"error: {flag}: expected a number >= 1; found {value}.", file=sys.stderr)
            return 2
    if layers_flag_error(args.layers):
        print(f"error: {layers_flag_error(args.layers)}", file=sys.stderr)
        return 2
    if args.overrides and not args.policy:
        print(
            f"error: --set {args.overrides[0]}: expected config overrides only with --policy; found no --policy",
            file=sys.stderr,
        )
        return 2
    policy_cfg = None
    if args.policy:
        from swebox.scripts.calibrate_policy import policy_config

        policy_cfg = policy_config(args)  # a wrong policy or override fails before minutes of grading, not after
    try:
        tasks = load(args.tasks)
    except LoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    selected = list(tasks)[: args.limit] if args.limit else list(tasks)
    if not selected:
        print(f"error: {args.tasks}: expected at least one task; found none", file=sys.stderr)
        return 2
    width = max([40, *(len(t.instance_id) for t in selected)])
    print(cb.header(width))
    resolver = StoreLayers(args.layers) if is_layer_store(args.layers) else layers_from_dirs(args.layers)
    try:
        results = cb.calibrate(
            selected,
            resolver,
            runs=args.runs,
            timeout=args.timeout,
            jobs=args.jobs,
            on_result=lambda c: print(cb.row(c, width), flush=True),
        )
    finally:
        if isinstance(resolver, StoreLayers):
            resolver.close()
    if args.policy:
        from swebox.scripts.calibrate_policy import play_policy

        play_policy(selected, results, args, policy_cfg)
    cb.write_calibration(args.out, results, source=str(args.tasks))
    print(cb.summary(results))
    print(
        f"calibration: {args.out} (swebox train env.calibration={args.out}; swebox eval --calibration "
        f"{args.out}; swebox view {args.out})"
    )
    return 0
