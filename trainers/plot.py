"""PNG plots of a run from its metrics.jsonl: reward curves, policy curves, the per-step time breakdown.

``swebox plot RUN_DIR`` writes ``RUN_DIR/plots/{reward,policy,timing}.png``. Matplotlib draws through its
Agg canvas (``matplotlib.figure.Figure``), so no display and no global backend state are involved.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swebox.trainers.tracking import read_metrics

# The stacked bar of a step, bottom to top: the rollout's parts, the rest of the rollout, then the
# learner's phases and the rest of the step. Remainders are clipped at 0 (rollout parts can overlap).
ROLLOUT_PARTS = (("generate", "timing/generate_s"), ("env", "timing/env_s"), ("grade", "timing/grade_s"))
STEP_PARTS = (("update", "timing/update_s"), ("weight sync", "timing/sync_s"))
COLORS = {
    "generate": "#4c72b0", "env": "#dd8452", "grade": "#55a868", "rollout other": "#c9c9c9",
    "update": "#8172b3", "weight sync": "#937860", "other": "#e5e5e5",
}
POLICY_CURVES = ("policy/loss", "policy/kl", "policy/clip_frac", "policy/entropy", "policy/grad_norm",
                 "policy/lr")


def series(records: Sequence[dict[str, Any]], name: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric over the steps that logged a number for it."""
    pairs = [(r["step"], r[name]) for r in records if isinstance(r.get(name), (int, float))]
    return [s for s, _ in pairs], [v for _, v in pairs]


def timing_breakdown(record: dict[str, Any]) -> dict[str, float]:
    """One step's wall-clock seconds split into the parts of the stacked bar (missing metrics count 0)."""
    def get(name: str) -> float:
        value = record.get(name)
        return float(value) if isinstance(value, (int, float)) else 0.0

    parts = {label: get(name) for label, name in ROLLOUT_PARTS}
    parts["rollout other"] = max(0.0, get("timing/rollout_s") - sum(parts.values()))
    rollout = max(get("timing/rollout_s"), sum(parts.values()))
    parts.update({label: get(name) for label, name in STEP_PARTS})
    learner = sum(get(name) for _, name in STEP_PARTS)
    parts["other"] = max(0.0, get("timing/step_s") - rollout - learner)
    return parts


def mean_breakdown(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean seconds per step of each part over the steps that logged ``timing/step_s``."""
    steps = [r for r in records if isinstance(r.get("timing/step_s"), (int, float))]
    if not steps:
        return {}
    rows = [timing_breakdown(r) for r in steps]
    return {part: sum(row[part] for row in rows) / len(rows) for part in rows[0]}


def _figure(rows: int, cols: int, width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).flatten()
    return fig, axes


def _step_axis(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _curve(ax, records, name: str, title: str, band: str | None = None, ylim=None) -> None:
    steps, values = series(records, name)
    ax.set_title(title)
    _step_axis(ax)
    ax.grid(alpha=0.3)
    if not steps:
        ax.text(0.5, 0.5, f"no {name} logged", ha="center", va="center", transform=ax.transAxes)
        return
    ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3)
    if band is not None:
        by_step = dict(zip(*series(records, band), strict=True))
        lo = [v - by_step.get(s, 0.0) for s, v in zip(steps, values, strict=True)]
        hi = [v + by_step.get(s, 0.0) for s, v in zip(steps, values, strict=True)]
        ax.fill_between(steps, lo, hi, alpha=0.2, label=f"± {band}")
        ax.legend(loc="best", fontsize="small")
    if ylim is not None:
        ax.set_ylim(*ylim)


def plot_rewards(records: Sequence[dict[str, Any]], path: Path) -> Path:
    fig, (ax_reward, ax_resolved) = _figure(1, 2, 11, 4)
    _curve(ax_reward, records, "reward/mean", "reward/mean", band="reward/std")
    _curve(ax_resolved, records, "reward/resolved_rate", "reward/resolved_rate", ylim=(-0.02, 1.02))
    fig.savefig(path, dpi=110)
    return path


def plot_policy(records: Sequence[dict[str, Any]], path: Path) -> Path:
    fig, axes = _figure(2, 3, 13, 7)
    for ax, name in zip(axes, POLICY_CURVES, strict=True):
        _curve(ax, records, name, name)
    fig.savefig(path, dpi=110)
    return path


def plot_timing(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """Stacked bar per step of where its wall-clock time went."""
    steps = [r for r in records if isinstance(r.get("timing/step_s"), (int, float))]
    fig, (ax,) = _figure(1, 1, 11, 4.5)
    ax.set_title("time per step")
    _step_axis(ax)
    ax.set_ylabel("seconds")
    if not steps:
        ax.text(0.5, 0.5, "no timing/step_s logged", ha="center", va="center", transform=ax.transAxes)
    else:
        x = [r["step"] for r in steps]
        rows = [timing_breakdown(r) for r in steps]
        bottom = [0.0] * len(rows)
        for part, color in COLORS.items():
            heights = [row[part] for row in rows]
            ax.bar(x, heights, bottom=bottom, color=color, label=part, width=0.8)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
        ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, dpi=110)
    return path


def plot_run(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write reward.png, policy.png and timing.png for the run; return their paths."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file():
        raise FileNotFoundError(
            f"expected {run_dir / 'metrics.jsonl'}; found no such file; pass the run folder of a training "
            "run (logging.run_dir)"
        )
    records = read_metrics(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    return [
        plot_rewards(records, out / "reward.png"),
        plot_policy(records, out / "policy.png"),
        plot_timing(records, out / "timing.png"),
    ]


def add_arguments(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``swebox plot RUN_DIR [--out DIR]``."""
    parser = subparsers.add_parser("plot", help="write PNG curves and the time breakdown of a training run")
    parser.add_argument("run_dir", help="the run's folder (holds metrics.jsonl)")
    parser.add_argument("--out", default=None, help="folder for the PNGs (default: RUN_DIR/plots)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    for path in plot_run(args.run_dir, args.out):
        print(path)
    breakdown = mean_breakdown(read_metrics(args.run_dir))
    if breakdown:
        total = sum(breakdown.values()) or 1.0
        print("mean time per step: " + ", ".join(
            f"{part} {sec:.2f}s ({sec / total:.0%})" for part, sec in breakdown.items()))
    return 0
