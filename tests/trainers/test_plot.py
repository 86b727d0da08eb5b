"""Plots of a synthetic run: the files are real PNGs and the stacked bars carry the logged times."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest
from matplotlib import colors as mcolors
from matplotlib import image as mimage
from swebox.trainers import plot
from swebox.trainers.tracking import Tracker


def synthetic_run(run_dir, steps: int = 20) -> None:
    with Tracker(run_dir, mode="disabled") as tracker:
        for step in range(1, steps + 1):
            reward = 0.25 + 0.7 * (1 - math.exp(-step / 6))
            tracker.log(step, {
                "reward/mean": reward, "reward/std": 0.3 * (1 - reward) + 0.05,
                "reward/resolved_rate": reward * 0.9, "reward/frac_zero_std_groups": 0.2,
                "policy/loss": 0.1 / step, "policy/kl": 0.001 * step, "policy/clip_frac": 0.05,
                "policy/entropy": 2.0 - step / 20, "policy/grad_norm": 1.0, "policy/lr": 3e-4,
                "timing/rollout_s": 10.0, "timing/generate_s": 4.0, "timing/env_s": 3.0,
                "timing/grade_s": 1.0, "timing/update_s": 5.0, "timing/sync_s": 1.0, "timing/step_s": 17.5,
            })


def test_timing_breakdown_by_hand():
    record = {"timing/rollout_s": 10, "timing/generate_s": 4, "timing/env_s": 3, "timing/grade_s": 1,
              "timing/update_s": 5, "timing/sync_s": 1, "timing/step_s": 17.5}
    assert plot.timing_breakdown(record) == {
        "generate": 4.0, "env": 3.0, "grade": 1.0, "rollout other": 2.0,  # 10 - (4 + 3 + 1)
        "update": 5.0, "weight sync": 1.0, "other": 1.5,  # 17.5 - 10 - (5 + 1)
    }


def test_overlapping_rollout_parts_clip_the_remainders_at_zero():
    record = {"timing/rollout_s": 10, "timing/generate_s": 8, "timing/env_s": 5, "timing/update_s": 5,
              "timing/step_s": 20}
    parts = plot.timing_breakdown(record)
    assert parts["rollout other"] == 0.0 and parts["grade"] == 0.0
    assert parts["other"] == 2.0  # 20 - max(10, 8 + 5) - 5


def test_mean_breakdown_skips_steps_without_timing():
    records = [{"step": 1, "timing/step_s": 2.0, "timing/update_s": 1.0}, {"step": 2, "reward/mean": 1.0},
               {"step": 3, "timing/step_s": 4.0, "timing/update_s": 3.0}]
    means = plot.mean_breakdown(records)
    assert means["update"] == 2.0 and means["other"] == 1.0


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
    for part in ("generate", "env", "grade", "rollout other", "update", "weight sync", "other"):
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
    plot.add_arguments(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plot", str(tmp_path)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "plots" / "timing.png") in out
    assert "generate 4.00s (23%)" in out  # 4 of 17.5 s
