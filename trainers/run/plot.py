"""PNG plots of a run from its metrics.jsonl: reward curves, policy curves, the per-step time breakdown.

``swebox plot RUN_DIR`` (scripts/plot_cli.py) writes ``RUN_DIR/plots/{reward,policy,timing}.png``. Matplotlib
draws through its Agg canvas (``matplotlib.figure.Figure``), so no display and no global backend state are
involved.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swebox.trainers.run.tracking import read_metrics

# A step's wall clock, bottom to top: parts that run one after another, so they add up to timing/step_s.
WALL_PARTS = (("rollout", "timing/rollout_s"), ("update", "timing/update_s"), ("weight sync", "timing/sync_s"))
# Inside the rollout, episodes run in parallel: their generate/env/grade seconds are sums over episodes that
# overlap in time, so they are drawn as a bar of their own beside the wall clock, never stacked into it.
EPISODE_PARTS = (("generate", "timing/generate_s"), ("env", "timing/env_s"), ("grade", "timing/grade_s"))
COLORS = {
    "rollout": "#c9c9c9",
    "update": "#8172b3",
    "weight sync": "#937860",
    "other": "#e5e5e5",
    "generate": "#4c72b0",
    "env": "#dd8452",
    "grade": "#55a868",
}
POLICY_CURVES = (
    ("policy/loss", "loss"),
    ("policy/kl", "KL to the reference"),
    ("policy/clip_frac", "fraction of tokens clipped"),
    ("policy/entropy", "nats per token"),
    ("policy/grad_norm", "gradient L2 norm"),
    ("policy/lr", "learning rate"),
)


def series(records: Sequence[dict[str, Any]], name: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric over the steps that logged a number for it."""
    pairs = [(r["step"], r[name]) for r in records if isinstance(r.get(name), (int, float))]
    return [s for s, _ in pairs], [v for _, v in pairs]


def _get(record: dict[str, Any], name: str) -> float:
    value = record.get(name)
    return float(value) if isinstance(value, (int, float)) else 0.0


def wall_breakdown(record: dict[str, Any]) -> dict[str, float]:
    """One step's wall-clock seconds in parts that add up to ``timing/step_s`` (missing metrics count 0;
    ``other`` is logging, checkpoints and the rest, clipped at 0)."""
    parts = {label: _get(record, name) for label, name in WALL_PARTS}
    parts["other"] = max(0.0, _get(record, "timing/step_s") - sum(parts.values()))
    return parts


def episode_breakdown(record: dict[str, Any]) -> dict[str, float]:
    """One step's episode seconds summed over its episodes (parallel episodes overlap: the sum may exceed the
    rollout's wall clock)."""
    return {label: _get(record, name) for label, name in EPISODE_PARTS}


def mean_breakdown(records: Sequence[dict[str, Any]], parts=wall_breakdown) -> dict[str, float]:
    """Mean seconds per step of each part (``parts``: wall_breakdown or episode_breakdown) over the steps that
    logged ``timing/step_s``."""
    steps = [r for r in records if isinstance(r.get("timing/step_s"), (int, float))]
    if not steps:
        return {}
    rows = [parts(r) for r in steps]
    return {part: sum(row[part] for row in rows) / len(rows) for part in rows[0]}


def flat_reasons(records: Sequence[dict[str, Any]]) -> list[str]:
    """Why the policy curves carry no learning signal on some steps, as notes for the reader."""

    def steps_where(name: str) -> list[int]:
        return [s for s, v in zip(*series(records, name), strict=True) if v >= 1.0]

    notes = []
    for name, why in (
        ("batch/masked_frac", "every trajectory was masked out (e.g. context overflow)"),
        ("reward/frac_zero_std_groups", "every group had zero reward spread (no advantage)"),
    ):
        steps = steps_where(name)
        if steps:
            shown = ", ".join(map(str, steps[:8])) + (", ..." if len(steps) > 8 else "")
            notes.append(f"step{'s' if len(steps) > 1 else ''} {shown}: {why}, so loss, KL and clipping are 0")
    return notes


def _figure(rows: int, cols: int, width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).flatten()
    return fig, axes


def _step_axis(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _curve(ax, records, name: str, ylabel: str, band: str | None = None, ylim=None) -> None:
    steps, values = series(records, name)
    ax.set_title(name)
    ax.set_ylabel(ylabel)
    _step_axis(ax)
    ax.grid(alpha=0.3)
    if not steps:
        ax.text(0.5, 0.5, f"no {name} logged", ha="center", va="center", transform=ax.transAxes)
        return
    ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3)
    by_step = dict(zip(*series(records, band), strict=True)) if band is not None else {}
    if any(by_step.get(s, 0.0) > 0 for s in steps):  # a band of zero width would only add a legend
        lo = [v - by_step.get(s, 0.0) for s, v in zip(steps, values, strict=True)]
        hi = [v + by_step.get(s, 0.0) for s, v in zip(steps, values, strict=True)]
        ax.fill_between(steps, lo, hi, alpha=0.2, label=f"± {band}")
        ax.legend(loc="best", fontsize="small")
    if ylim is not None:
        ax.set_ylim(*ylim)


def plot_rewards(records: Sequence[dict[str, Any]], path: Path) -> Path:
    fig, (ax_reward, ax_resolved) = _figure(1, 2, 11, 4)
    _curve(ax_reward, records, "reward/mean", "mean reward of the step's rollouts", band="reward/std")
    _curve(ax_resolved, records, "reward/resolved_rate", "fraction of rollouts resolved", ylim=(-0.02, 1.02))
    fig.savefig(path, dpi=110)
    return path


def plot_policy(records: Sequence[dict[str, Any]], path: Path) -> Path:
    fig, axes = _figure(2, 3, 13, 7)
    for ax, (name, ylabel) in zip(axes, POLICY_CURVES, strict=True):
        _curve(ax, records, name, ylabel)
    notes = flat_reasons(records)
    if notes:
        fig.suptitle("\n".join(notes), fontsize="medium", color="#a03030")
    fig.savefig(path, dpi=110)
    return path


def _stack(ax, x: list[float], rows: list[dict[str, float]], hatch: str | None = None) -> None:
    bottom = [0.0] * len(rows)
    for part in rows[0]:
        heights = [row[part] for row in rows]
        ax.bar(
            x,
            heights,
            bottom=bottom,
            color=COLORS[part],
            label=part,
            width=0.4,
            hatch=hatch,
            edgecolor="white" if hatch else None,
        )
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]


def plot_timing(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """Per step, side by side: the wall clock in parts that add up to the step, and the episodes' time summed
    over parallel episodes (which overlap, so that bar may be taller)."""
    steps = [r for r in records if isinstance(r.get("timing/step_s"), (int, float))]
    fig, (ax,) = _figure(1, 1, 11, 4.5)
    ax.set_title("time per step: wall clock (left bar) and episode time summed over episodes (right, hatched)")
    _step_axis(ax)
    ax.set_ylabel("seconds")
    if not steps:
        ax.text(0.5, 0.5, "no timing/step_s logged", ha="center", va="center", transform=ax.transAxes)
    else:
        x = [r["step"] for r in steps]
        _stack(ax, [s - 0.2 for s in x], [wall_breakdown(r) for r in steps])
        _stack(ax, [s + 0.2 for s in x], [episode_breakdown(r) for r in steps], hatch="//")
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
