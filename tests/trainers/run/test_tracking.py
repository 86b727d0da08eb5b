"""metrics.jsonl and a real offline wandb run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from swebox.trainers.run import tracking


@pytest.mark.parametrize(
    ("setting", "environ", "expected"),
    [
        ("auto", {}, "offline"),
        ("auto", {"WANDB_API_KEY": "k"}, "online"),
        ("auto", {"WANDB_API_KEY": "k", "WANDB_MODE": "offline"}, "offline"),
        ("auto", {"WANDB_MODE": "disabled"}, "disabled"),
        ("offline", {"WANDB_API_KEY": "k"}, "offline"),
        ("disabled", {}, "disabled"),
    ],
)
def test_resolve_wandb_mode(setting, environ, expected):
    assert tracking.resolve_wandb_mode(setting, environ) == expected


def test_resolve_wandb_mode_rejects_unknown():
    with pytest.raises(ValueError, match="auto/online/offline/disabled"):
        tracking.resolve_wandb_mode("cloud", {})


def test_offline_wandb_run_and_metrics_jsonl(tmp_path, wandb_env):
    printed: list[str] = []
    run_dir = tmp_path / "run"
    tracker = tracking.Tracker(run_dir, config={"seed": 3}, mode="auto", echo=printed.append)
    assert tracker.mode == "offline"
    tracker.log(1, {"reward/mean": 0.25, "timing/step_s": 2.0})
    tracker.log(2, {"reward/mean": torch.tensor(0.75), "policy/kl": float("nan")})
    tracker.finish()

    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["reward/mean"]) for r in lines] == [(1, 0.25), (2, 0.75)]
    assert lines[0]["timing/step_s"] == 2.0 and lines[1]["policy/kl"] is None

    # the printed folder is the offline run that `wandb sync` uploads: it holds the logged history
    sync_dir = tracker.sync_dir
    assert printed == [f"wandb offline run: {sync_dir}  (upload later with: wandb sync {sync_dir})"]
    assert sync_dir.parent == run_dir / "wandb" and sync_dir.name.startswith("offline-run-")
    run_id = (run_dir / "wandb_run_id").read_text().strip()
    data = b""
    for _ in range(600):  # wandb-core, a separate process, may still be flushing the file after finish()
        data = (sync_dir / f"run-{run_id}.wandb").read_bytes()
        if b"timing/step_s" in data:
            break
        time.sleep(0.1)
    assert b"reward/mean" in data and b"0.75" in data and b"timing/step_s" in data


def test_resume_drops_steps_after_the_checkpoint_and_reuses_the_wandb_id(tmp_path, wandb_env):
    run_dir = tmp_path / "run"
    first = tracking.Tracker(run_dir, mode="offline", echo=lambda _: None)
    for step in (1, 2, 3):
        first.log(step, {"reward/mean": step / 10})
    first.finish()
    run_id = (run_dir / "wandb_run_id").read_text().strip()

    resumed = tracking.Tracker(run_dir, mode="offline", resume_step=2, echo=lambda _: None)
    resumed.log(3, {"reward/mean": 0.9})
    resumed.finish()
    steps = [(r["step"], r["reward/mean"]) for r in tracking.read_metrics(run_dir)]
    assert steps == [(1, 0.1), (2, 0.2), (3, 0.9)]
    # wandb names the folder offline-run-<time>-<id>, adding "-1" when a run of that id began the same second
    assert resumed.sync_dir.name.split("-")[3] == run_id


def test_fresh_run_replaces_old_metrics_and_lines_are_flushed_at_once(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir).mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 9}\n')
    tracker = tracking.Tracker(run_dir, mode="disabled")
    tracker.log(1, {"reward/mean": 1.0})
    # read before finish(): a crash right after log() must not lose the step
    assert [r["step"] for r in tracking.read_metrics(run_dir)] == [1]
    tracker.finish()
    assert not (run_dir / "wandb").exists()


def test_bad_names_and_values_are_rejected(tmp_path):
    with tracking.Tracker(tmp_path, mode="disabled") as tracker:
        with pytest.raises(ValueError, match="slash-namespaced"):
            tracker.log(1, {"reward": 1.0})
        with pytest.raises(ValueError, match="slash-namespaced"):
            tracker.log(1, {"Reward/Mean": 1.0})
        with pytest.raises(TypeError, match="expected a number"):
            tracker.log(1, {"reward/mean": "high"})


def test_torn_last_line_is_skipped(tmp_path):
    Path(tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "rew')
    assert tracking.read_metrics(tmp_path) == [{"step": 1}]


def test_documented_names_match_the_code():
    doc = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    missing = [name for name in tracking.STEP_METRICS + tracking.ENV_METRICS if f"`{name}`" not in doc]
    assert not missing, f"metrics missing from docs/metrics.md: {missing}"


@pytest.mark.parametrize(
    ("setting", "mode", "on"),
    [
        ("auto", "online", True),
        ("auto", "offline", False),
        ("auto", "disabled", False),
        ("on", "offline", True),
        ("off", "online", False),
    ],
)
def test_system_metrics_and_console_are_on_for_online_runs(setting, mode, on):
    assert tracking.system_metrics_on(setting, mode) is on


def test_a_run_joins_its_group_with_its_job_type_and_system_metrics_as_asked(tmp_path, wandb_env):
    with tracking.Tracker(
        tmp_path / "sft", mode="offline", echo=lambda _: None, group="demo-x-abc123", job_type="sft"
    ) as tracker:
        assert (tracker.run.group, tracker.run.job_type) == ("demo-x-abc123", "sft")
        assert tracker.run.settings.x_disable_stats and tracker.run.settings.console == "off"
        run_id = (tmp_path / "sft" / "wandb_run_id").read_text().strip()
        sync_dir = tracker.sync_dir
    data = b""
    for _ in range(600):  # wandb-core, a separate process, may still be flushing the file after finish()
        data = (sync_dir / f"run-{run_id}.wandb").read_bytes()
        if b"demo-x-abc123" in data:
            break
        time.sleep(0.1)
    assert b"demo-x-abc123" in data  # the group goes to the run's record, which `wandb sync` uploads
    with tracking.Tracker(tmp_path / "grpo", mode="offline", echo=lambda _: None, system="on") as tracker:
        assert not tracker.run.settings.x_disable_stats and tracker.run.settings.console == "wrap"
