"""Plots of a synthetic run: the files are real PNGs and the stacked bars carry the logged times."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest
from matplotlib import colors as mcolors
from matplotlib import image as mimage
from swebox.scripts import plot_cli
from swebox.trainers.run import plot
from swebox.trainers.run.tracking import Tracker


def synthetic_run(run_dir, steps: int = 20) -> None:
    with Tracker(run_dir, mode="disabled") as tracker:
        for step in range(1, steps + 1):
            reward = 0.25 + 0.7 * (1 - math.exp(-step / 6))
            tracker.log(
                step,
                {
                    "reward/mean": reward,
                    "reward/std": 0.3 * (1 - reward) + 0.05,
                    "reward/resolved_rate": reward * 0.9,
                    "reward/frac_zero_std_groups": 0.2,
                    "policy/loss": 0.1 / step,
                    "policy/kl": 0.001 * step,
                    "policy/clip_frac": 0.05,
                    "policy/entropy": 2.0 - step / 20,
                    "policy/grad_norm": 1.0,
                    "policy/lr": 3e-4,
                    "timing/rollout_s": 10.0,
                    "timing/generate_s": 4.0,
                    "timing/env_s": 3.0,
                    "timing/grade_s": 1.0,
                    "timing/update_s": 5.0,
                    "timing/sync_s": 1.0,
                    "timing/step_s": 17.5,
                },
            )


def test_wall_breakdown_adds_up_to_the_step():
    record = {
        "timing/rollout_s": 10,
        "timing/generate_s": 4,
        "timing/env_s": 3,
        "timing/grade_s": 1,
        "timing/update_s": 5,
        "timing/sync_s": 1,
        "timing/step_s": 17.5,
    }
    parts = plot.wall_breakdown(record)
    assert parts == {"rollout": 10.0, "update": 5.0, "weight sync": 1.0, "other": 1.5}  # 17.5 - 10 - 5 - 1
    assert sum(parts.values()) == 17.5


def test_overlapping_episode_parts_are_not_stacked_into_the_wall_clock():
    # two parallel episodes: 8 s generating + 5 s in the env inside a 10 s rollout
    record = {
        "timing/rollout_s": 10,
        "timing/generate_s": 8,
        "timing/env_s": 5,
        "timing/update_s": 5,
        "timing/step_s": 16.8,
    }
    wall = plot.wall_breakdown(record)
    assert sum(wall.values()) == pytest.approx(16.8)  # the old stacked bar drew 8 + 5 + 5 = 18 s here
    assert plot.episode_breakdown(record) == {"generate": 8.0, "env": 5.0, "grade": 0.0}


def test_mean_breakdown_skips_steps_without_timing():
    records = [
        {"step": 1, "timing/step_s": 2.0, "timing/update_s": 1.0},
        {"step": 2, "reward/mean": 1.0},
        {"step": 3, "timing/step_s": 4.0, "timing/update_s": 3.0},
    ]
    means = plot.mean_breakdown(records)
    assert means["update"] == 2.0 and means["other"] == 1.0


def test_flat_policy_curves_say_why():
    records = [
        {"step": 1, "reward/frac_zero_std_groups": 1.0, "batch/masked_frac": 0.0},
        {"step": 2, "reward/frac_zero_std_groups": 0.5, "batch/masked_frac": 1.0},
        {"step": 3, "reward/frac_zero_std_groups": 1.0, "batch/masked_frac": 0.0},
    ]
    notes = plot.flat_reasons(records)
    assert notes == [
        "step 2: every trajectory was masked out (e.g. context overflow), so loss, KL and clipping are 0",
        "steps 1, 3: every group had zero reward spread (no advantage), so loss, KL and clipping are 0",
    ]
    assert plot.flat_reasons([{"step": 1, "reward/frac_zero_std_groups": 0.5}]) == []


def _has_color(png_path, hex_color: str, min_pixels: int = 50) -> bool:
    pixels = mimage.imread(png_path)[..., :3]
    target = np.array(mcolors.to_rgb(hex_color))
    return int((np.abs(pixels - target).max(axis=-1) < 0.02).sum()) >= min_pixels


def test_plot_run_writes_pngs_with_the_data(tmp_path):
    synthetic_run(tmp_path)
    paths = plot.plot_run(tmp_path)
    assert [p.name for p in paths] == ["reward.png", "policy.png", "timing.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width = mimage.imread(path).shape[:2]
        assert width > 600 and height > 300
    timing = tmp_path / "plots" / "timing.png"
    for part in ("rollout", "update", "weight sync", "other", "generate", "env", "grade"):
        assert _has_color(timing, plot.COLORS[part]), f"no {part} segment drawn"
    assert _has_color(tmp_path / "plots" / "reward.png", "#1f77b4")  # the curves themselves


def test_missing_metrics_are_drawn_as_notes_not_errors(tmp_path):
    with Tracker(tmp_path, mode="disabled") as tracker:
        tracker.log(1, {"reward/mean": 0.5})
    paths = plot.plot_run(tmp_path, tmp_path / "out")
    assert all(p.exists() and p.parent == tmp_path / "out" for p in paths)
    assert not _has_color(paths[2], plot.COLORS["generate"])


def test_no_metrics_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        plot.plot_run(tmp_path)


def test_cli_sub_command(tmp_path, capsys):
    synthetic_run(tmp_path, steps=3)
    parser = argparse.ArgumentParser(prog="swebox")
    plot_cli.add_arguments(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plot", str(tmp_path)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "plots" / "timing.png") in out
    assert "rollout 10.00s (57%)" in out  # 10 of 17.5 s
    assert "summed over parallel episodes: generate 4.00s, env 3.00s, grade 1.00s" in out
