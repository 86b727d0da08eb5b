"""What ``swebox demo`` reports from its run's own numbers: whether GRPO raised the reward, where a training
step's time went, and ``summary.md`` (pure functions of the metrics records and the run's summary)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def learning(records: Sequence[dict[str, Any]], k: int = 2) -> dict[str, float]:
    """reward/mean over the first ``k`` and the last ``k`` GRPO steps (what the reward curve shows)."""
    rewards = [float(r["reward/mean"]) for r in records if isinstance(r.get("reward/mean"), (int, float))]
    if not rewards:
        return {}
    k = max(1, min(k, len(rewards) // 2 or 1))
    return {
        "first": sum(rewards[:k]) / k,
        "last": sum(rewards[-k:]) / k,
        "steps": float(len(rewards)),
        "window": float(k),
    }


def time_summary(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean seconds per training step of each part, and the environment's share of a step.

    env share = (timing/env_s + timing/grade_s) / timing/step_s: the part of a step's wall-clock time during
    which some episode was resetting, running a command or being graded (unions over concurrent episodes; the
    policy may be generating for another episode at the same time, so shares of parts can add up past 1).
    """
    steps = [r for r in records if isinstance(r.get("timing/step_s"), (int, float))]
    if not steps:
        return {}
    names = (
        "timing/step_s",
        "timing/rollout_s",
        "timing/generate_s",
        "timing/env_s",
        "timing/grade_s",
        "timing/update_s",
        "timing/sync_s",
        "env/reset_s",
        "env/exec_s",
        "env/grade_s",
    )
    out = {}
    for name in names:
        values = [float(r[name]) for r in steps if isinstance(r.get(name), (int, float))]
        if values:
            out[name] = sum(values) / len(values)
    parts = sum(out.get(f"timing/{k}_s", 0.0) for k in ("generate", "env", "grade"))
    out["timing/rollout_other_s"] = max(0.0, out.get("timing/rollout_s", 0.0) - parts)
    step = out.get("timing/step_s", 0.0) or 1.0
    out["share/env"] = (out.get("timing/env_s", 0.0) + out.get("timing/grade_s", 0.0)) / step
    out["share/generate"] = out.get("timing/generate_s", 0.0) / step
    out["share/update"] = (out.get("timing/update_s", 0.0) + out.get("timing/sync_s", 0.0)) / step
    return out


def summary_markdown(summary: dict[str, Any]) -> str:
    """``summary.md``: the stages, the time of a training step by part, and the evaluation."""
    made = ", ".join(f"{p['label']} ({p['tasks']})" for p in summary["projects"] if p["tasks"]) or "no project"
    lines = [
        "# swebox demo",
        "",
        f"Tasks: {summary['tasks']} from {made} ({summary['train_tasks']} for training, "
        f"{summary['held_out_tasks']} held out); a warm start of {summary['sft']['steps']} SFT steps on expert "
        f"episodes, then {summary['steps']} GRPO steps on {summary['nodes']} Ray node(s).",
    ]
    for p in summary["projects"]:  # a project that gave nothing is said, never left out silently
        if not p["tasks"] or p["error"]:
            lines.append(f"**{p['label']}: {p['tasks']} tasks** ({p['error'] or 'no candidate validated'}).")
    lines += ["", "## What this shows", ""]
    lines += shows(summary)
    lines += ["", "## Stages", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {name} | {sec:.1f} |" for name, sec in summary["stages"].items()]
    lines += [
        f"| **total** | **{sum(summary['stages'].values()):.1f}** |",
        "",
        "## A training step (mean)",
        "",
        "| part | seconds | share of the step |",
        "|---|---|---|",
    ]
    step = summary["step"]
    total = step.get("timing/step_s", 0.0) or 1.0
    for name in (
        "timing/step_s",
        "timing/rollout_s",
        "timing/generate_s",
        "timing/env_s",
        "timing/grade_s",
        "timing/rollout_other_s",
        "timing/update_s",
        "timing/sync_s",
    ):
        if name in step:
            lines.append(f"| `{name}` | {step[name]:.2f} | {step[name] / total:.0%} |")
    lines += [
        "",
        "`timing/rollout_other_s` is the rollout's time outside generation, commands and grading: preparing "
        "each group's start state (task layer, setup, the fork of G sandboxes) and the calls to the Ray actors.",
    ]
    lines += [
        "",
        f"Environment share of a step (resets + commands + grading): **{step.get('share/env', 0):.0%}**; "
        f"generation {step.get('share/generate', 0):.0%}; update + weight sync "
        f"{step.get('share/update', 0):.0%}. Per episode: reset {step.get('env/reset_s', 0):.2f} s, "
        f"commands {step.get('env/exec_s', 0):.2f} s, grading {step.get('env/grade_s', 0):.2f} s.",
        "",
        "## Evaluation (one episode per task, trained policy)",
        "",
    ]
    for part, title in (("train", "training tasks"), ("held_out", "held-out tasks (never trained on)")):
        lines += [f"### {title}", ""] + [f"- `{k}`: {v:.3f}" for k, v in summary["eval"][part].items()] + [""]
    return "\n".join(lines)


def shows(summary: dict[str, Any]) -> list[str]:
    """The plain statement of what the run shows, from its own numbers (a curve that did not rise is said so)."""
    rise, ev, warm = summary.get("learning") or {}, summary["eval"], summary.get("sft") or {}
    rose = bool(rise) and rise["last"] >= rise["first"] + 0.2
    out = []
    if warm:
        out.append(
            f"- Warm start: {warm['steps']} SFT steps on {warm['kept']} expert episodes (each task's gold "
            f"patch played in a sandbox and graded), stopped once the policy samples them exactly with a "
            f"mean probability of {warm['sequence_prob']:.2f}: partly right on purpose, so that a GRPO "
            "group holds both resolved and unresolved episodes."
        )
    if rise:
        w = int(rise["window"])
        verdict = "rises" if rose else "does NOT rise clearly in this run"
        out.append(
            f"- GRPO on the training tasks: `reward/mean` {verdict}, {rise['first']:.2f} over the first {w} "
            f"steps -> {rise['last']:.2f} over the last {w} (`plots/reward.png`). Every reward is the verdict "
            "of the task's tests run in a sandbox on the episode's diff (a diff already graded in this run "
            "reuses its verdict: `env/grade_cache_hits`)."
        )
    out.append(
        f"- After training: resolved {ev['train'].get('reward/resolved_rate', 0):.0%} of the training tasks "
        f"and {ev['held_out'].get('reward/resolved_rate', 0):.0%} of the held-out tasks (never trained on; "
        "one episode per task). A tiny model can at best memorise the fixes it was trained on; it does "
        "not generalise to bugs it has not seen. "
        + (
            "The demo shows that the loop learns, not a useful agent."
            if rose
            else "This run does not show learning by GRPO; it shows the pipeline and where the time goes."
        )
    )
    return out
