"""``swebox skyrl prepare``: a task file -> SkyRL-ready parquet files (the columns: envs/frameworks/skyrl_prepare.py).

The command's parser and its checks of what the user gave; the rows are built and written by
:func:`swebox.envs.frameworks.skyrl_prepare.prepare`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from swebox.envs.episodes.episode import EpisodeConfig
from swebox.envs.episodes.layers_resolver import LayerSource, missing_layers
from swebox.envs.frameworks.skyrl_prepare import prepare
from swebox.envs.tasks.calibrate_select import ORDERS, CalibrationError, apply_calibration


def add_arguments(subparsers: argparse._SubParsersAction) -> None:
    """Add ``skyrl`` and its sub-commands to the top-level ``swebox`` sub-parsers."""
    skyrl = subparsers.add_parser("skyrl", help="SkyRL integration: dataset preparation")
    sub = skyrl.add_subparsers(dest="skyrl_command", required=True)
    p = sub.add_parser("prepare", help="write SkyRL parquet files (train/validation) from a task file")
    p.add_argument("--tasks", required=True, help="task file (JSONL/JSON/parquet, see docs/tasks.md)")
    p.add_argument("--out", required=True, help="output folder for train.parquet / validation.parquet")
    p.add_argument(
        "--store",
        default="",
        help="layer store the env reads layers from, as the training nodes "
        "see it (default: the tasks' own store TASKS_FOLDER/layers when there is one, as `swebox tasks "
        "synth` writes it, else $SWEBOX_LAYER_STORE or runs/layers); recorded in every row",
    )
    p.add_argument(
        "--no-layer-check",
        action="store_true",
        help="write the rows even when their layers are not "
        "in --store here (a store that exists only on the training nodes)",
    )
    p.add_argument("--max-turns", type=int, default=EpisodeConfig.max_turns, help="turns per episode")
    p.add_argument("--style", default=EpisodeConfig.style, help="bash_block | xml_function | json_tool_call")
    p.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another EpisodeConfig field (VALUE is JSON, or a plain string), e.g. time_limit_s=900",
    )
    p.add_argument("--val-size", type=int, default=0, help="tasks held out in validation.parquet (default 0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the validation draw")
    p.add_argument("--data-source", default="swebox", help="data_source column (default swebox)")
    p.add_argument(
        "--calibration",
        default="",
        help="a `swebox tasks calibrate` file: leave out unsolvable and "
        "trivial tasks and quarantine flaky tests in the rows written (each row holds its whole task)",
    )
    p.add_argument(
        "--calibration-order",
        default="none",
        choices=ORDERS,
        help="with --calibration: write the "
        "train rows by the calibrated policy's solve rate (a curriculum), unrated tasks last",
    )
    p.set_defaults(func=run_prepare)


def _parse_set(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set: expected KEY=VALUE; found {item!r}.")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def run_prepare(args: argparse.Namespace) -> int:
    from swebox.envs.tasks import load

    tasks = list(load(args.tasks))
    if args.calibration_order != "none" and not args.calibration:
        print(
            f"error: --calibration-order {args.calibration_order}: expected a --calibration FILE to order by; "
            "found none; run `swebox tasks calibrate --policy ...` first",
            file=sys.stderr,
        )
        return 2
    if args.calibration:
        try:
            tasks = apply_calibration(tasks, args.calibration, order=args.calibration_order)
        except CalibrationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    settings: dict[str, Any] = {"max_turns": args.max_turns, "style": args.style, **_parse_set(args.extra)}
    store = LayerSource(store=args.store, tasks_file=args.tasks).store_root
    layers = {"tasks_file": str(Path(args.tasks).absolute()), "store": str(store)}
    settings["layers"] = layers
    try:  # the settings first: a wrong value is the user's first problem, whatever the layers
        EpisodeConfig.from_dict({k: v for k, v in settings.items() if k != "layers"})
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.no_layer_check:
        missing = [m for m in (missing_layers(t, LayerSource(store=str(store))) for t in tasks) if m is not None]
        if missing:
            for problem in missing[:20]:
                print(f"error: {problem}", file=sys.stderr)
            print(
                f"error: {len(missing)} of {len(tasks)} tasks have no layers in {store}; no rows written (the "
                "env could not start them). Build them, pass --store, or --no-layer-check for a store that "
                "exists only on the training nodes.",
                file=sys.stderr,
            )
            return 2
    try:
        counts = prepare(
            tasks, args.out, settings, val_size=args.val_size, seed=args.seed, data_source=args.data_source
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, count in counts.items():
        print(f"{Path(args.out) / (name + '.parquet')}: {count} tasks")
    return 0
