"""``swebox eval``'s report: the per-task table (terminal and Markdown), the summary line and its wandb run.

Moved out of scripts/train_cli.py, which plays the episodes; this module only presents what they gave.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TABLE_COLUMNS = ("task_id", "resolved", "reward", "turns", "time_s", "cpu_s", "peak_mb", "error")


def log_eval_to_wandb(
    results: list[dict[str, Any]], *, out: str | Path, tasks: str, policy: str, mode: str, group: str
) -> None:
    """The per-task table as the wandb Table ``eval`` and the summary as ``eval/*``, in ``<OUT stem>-wandb/``
    (``out``: the records file; ``tasks``, ``policy``: what was evaluated; ``mode``, ``group``: wandb's)."""
    from swebox.trainers.run.tracking import Tracker

    out = Path(out)
    run_dir = out.parent / f"{report_path(out).stem}-wandb"
    n = max(1, len(results))
    with Tracker(
        run_dir,
        {"tasks": tasks, "policy": policy},
        run_name=f"eval-{run_dir.name}",
        mode=mode,
        group=group,
        job_type="eval",
    ) as tracker:
        rows = [
            (
                r["instance_id"],
                bool(r["resolved"]),
                float(r["reward"]),
                int(r.get("num_turns", 0)),
                float(r["total_s"]),
                *_cost_numbers(r),
                str(r.get("error") or "")[:500],
            )
            for r in results
        ]
        tracker.log_table("eval", TABLE_COLUMNS, rows, step=0)
        tracker.log(
            0,
            {
                "eval/resolved_rate": sum(r["resolved"] for r in results) / n,
                "eval/reward_mean": sum(r["reward"] for r in results) / n,
                "eval/errors": float(sum(bool(r["error"]) for r in results)),
            },
        )


def report_path(out: str | Path) -> Path:
    """Where the Markdown table of ``swebox eval --out OUT`` goes: next to OUT, OUT's name with ``.md``."""
    out = Path(out)
    return out.with_name(out.name.removesuffix(".jsonl").removesuffix(".json") + ".md")


def task_table(results: list[dict[str, Any]]) -> str:
    """One Markdown row per task: resolved, reward, turns, time, CPU seconds (the episode's sandbox and its
    grading's), peak memory, and the error if any ('-': not measured)."""
    lines = [
        "| task | resolved | reward | turns | time (s) | cpu (s) | peak (MB) | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in _task_rows(results)]
    return "\n".join(lines)


def _cost_numbers(r: dict[str, Any]) -> tuple[float | None, float | None]:
    """(CPU seconds of the episode and its grading, the larger peak in MB) of a record; None: not measured."""
    from swebox.trainers.run.trajectories import cost_summary

    found = cost_summary(r.get("cost"))
    return found["cpu_s"], found["peak_mb"]


def _task_rows(results: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows = []
    for r in results:
        turns = r.get("num_turns", r.get("metrics", {}).get("env/turns", 0))
        error = str(r.get("error") or "").splitlines()[0][:80] if r.get("error") else ""
        cpu, peak = _cost_numbers(r)
        rows.append(
            (
                r["instance_id"],
                "yes" if r["resolved"] else "no",
                f"{r['reward']:.3f}",
                str(int(turns)),
                f"{r['total_s']:.2f}",
                "-" if cpu is None else f"{cpu:.2f}",
                "-" if peak is None else f"{peak:.0f}",
                error,
            )
        )
    return rows


def print_task_table(results: list[dict[str, Any]], file=None) -> None:
    """The per-task table on the terminal, through rich: columns keep their alignment whatever an id's length
    (hand-padded columns drifted on long ids), and a narrow terminal folds cells instead of cutting them."""
    from rich.console import Console
    from rich.table import Table

    table = Table(
        "task", "resolved", "reward", "turns", "time (s)", "cpu (s)", "peak (MB)", "error", box=None, pad_edge=False
    )
    for row in _task_rows(results):
        table.add_row(*row)
    Console(file=file, width=200 if file is not None else None, highlight=False).print(table)


def summary(results: list[dict[str, Any]], policy: str) -> str:
    """Resolved rate and the time breakdown (sums over episodes) as printed by ``swebox eval``."""
    n = max(1, len(results))
    resolved = sum(r["resolved"] for r in results)
    errors = sum(bool(r["error"]) for r in results)
    parts = {
        "env reset": sum(r["metrics"].get("env/reset_s", 0.0) for r in results),
        "commands": sum(r["metrics"].get("env/exec_s", 0.0) for r in results),
        "model": sum(r["model_s"] for r in results),
        "grading": sum(r["metrics"].get("env/grade_s", 0.0) for r in results),
    }
    total = sum(r["total_s"] for r in results)
    breakdown = ", ".join(f"{k} {v:.2f}s ({v / total if total else 0:.0%})" for k, v in parts.items())
    return (
        f"policy {policy}: resolved {resolved}/{len(results)} ({resolved / n:.1%}), "
        f"mean reward {sum(r['reward'] for r in results) / n:.3f}, errors {errors}, "
        f"audit-flagged {sum(bool((r.get('audit') or {}).get('flagged')) for r in results)}\n"
        f"time over all episodes ({total:.2f}s): {breakdown}"
    )
