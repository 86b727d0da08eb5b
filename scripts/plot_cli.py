"""``swebox plot RUN_DIR [--out DIR]``: the PNG curves of a training run and its mean time per step, printed.

The plots are drawn by :mod:`swebox.trainers.run.plot`; this is the command's parser and its printout.
"""

from __future__ import annotations

import argparse

from swebox.trainers.run import plot
from swebox.trainers.run.tracking import read_metrics


def add_arguments(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``swebox plot RUN_DIR [--out DIR]``."""
    parser = subparsers.add_parser("plot", help="write PNG curves and the time breakdown of a training run")
    parser.add_argument("run_dir", help="the run's folder (holds metrics.jsonl)")
    parser.add_argument("--out", default=None, help="folder for the PNGs (default: RUN_DIR/plots)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    for path in plot.plot_run(args.run_dir, args.out):
        print(path)
    records = read_metrics(args.run_dir)
    wall, episodes = plot.mean_breakdown(records), plot.mean_breakdown(records, plot.episode_breakdown)
    if wall:
        total = sum(wall.values()) or 1.0
        print(
            "mean wall-clock time per step: "
            + ", ".join(f"{part} {sec:.2f}s ({sec / total:.0%})" for part, sec in wall.items())
        )
        print(
            "mean episode time per step, summed over parallel episodes: "
            + ", ".join(f"{part} {sec:.2f}s" for part, sec in episodes.items())
        )
    for note in plot.flat_reasons(records):
        print(f"note: {note}")
    return 0
