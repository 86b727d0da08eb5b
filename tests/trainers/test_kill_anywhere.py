"""Kill-anywhere safety: the trainer SIGKILLed at each boundary of a step, then resumed, ends with the metrics and
the wandb history (offline, read from its file) of an uninterrupted run, values included; a resuming trainer
clears what a crashed save left; a disk too full for a checkpoint is a clear error that writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from swebox.trainers.run import checkpoint as ckpt
from swebox.trainers.run.tracking import measured, read_metrics

from tests.trainers.rl.test_trainer import make_trainer
from tests.trainers.wandb_history import history, newest_offline_run

ROOT = Path(__file__).resolve().parents[2]
STEPS = 5
RUN = """
import sys
sys.path.insert(0, {root!r})
from tests.trainers.rl.test_rollout import stub_task
from tests.trainers.rl.test_trainer import one_turn_factory, SMALL
from swebox.trainers.run.config import load_config
from swebox.trainers.rl.trainer import Trainer
cfg = load_config(None, [*SMALL, "logging.run_dir={run}", "total_steps={steps}", "checkpoint.every_steps=2",
                         "checkpoint.keep_last=5", "rollout.max_parallel_episodes=1", "logging.wandb=offline",
                         *sys.argv[1:]])
Trainer(cfg, tasks=[stub_task(f"t{{i}}") for i in range(3)], episode_factory=one_turn_factory,
        echo=lambda *_: None).train()
"""


def train(tmp: Path, run: Path, *args: str, kill_at: str = "") -> subprocess.CompletedProcess:
    script = tmp / "run.py"
    script.write_text(RUN.format(root=str(ROOT), run=run, steps=STEPS))
    env = {**os.environ, "WANDB_MODE": "offline", "SWEBOX_TEST_KILL_AT": kill_at}
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        env[var] = str(tmp / "wandb-home" / var.lower())
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=300)


def compared(record: dict) -> dict:
    """The values a resumed run must reproduce: all but what the host measures (tracking.measured)."""
    return {k: v for k, v in record.items() if k != "step" and not measured(k)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("ref")
    done = train(tmp, tmp / "run")
    assert done.returncode == 0, done.stderr[-3000:]
    return read_metrics(tmp / "run")


@pytest.mark.e2e
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("kill_at", "resumes_from"), [("log:4", 2), ("checkpoint:4", 4)])
def test_killed_at_a_boundary_then_resumed_equals_the_uninterrupted_run(tmp_path, reference, kill_at, resumes_from):
    run = tmp_path / "run"
    killed = train(tmp_path, run, kill_at=kill_at)
    assert killed.returncode == -9, killed.stderr[-3000:]  # it really died by SIGKILL at that boundary
    assert ckpt.latest_checkpoint(run / "checkpoints").name == ckpt.checkpoint_name(resumes_from)
    resumed = train(tmp_path, run, "checkpoint.resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    records = read_metrics(run)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for got, want in zip(records, reference, strict=True):
        assert compared(got) == pytest.approx(compared(want), abs=1e-6), got["step"]
    # the resumed run's wandb folder alone holds every step, with the values of metrics.jsonl
    rows = history(newest_offline_run(run))
    assert sorted(rows) == list(range(1, STEPS + 1))
    for record in records:
        logged = {k: v for k, v in record.items() if k not in ("step", "time") and v is not None}
        assert rows[record["step"]] == pytest.approx(logged), record["step"]


def test_resume_removes_a_crashed_saves_temporaries_before_writing(tmp_path):
    trainer = make_trainer(tmp_path, "total_steps=2")
    trainer.step()
    trainer.save_checkpoint()
    trainer.close()
    stale = tmp_path / "run" / "checkpoints" / ".tmp-step_00000002-999"
    stale.mkdir()
    (stale / "model.pt").write_bytes(b"\0" * 4096)
    resumed = make_trainer(tmp_path, "total_steps=2", "checkpoint.resume=true")
    try:
        assert not stale.exists() and resumed.step_count == 1
    finally:
        resumed.close()


@pytest.fixture
def small_disk(tmp_path):
    """``mount(bytes) -> folder``: a tmpfs of that size (a disk that a few tiny checkpoints fill)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = []

    def mount(size: int) -> Path:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)], capture_output=True)
        if done.returncode != 0:
            pytest.skip("needs root to mount a small tmpfs")
        mounted.append(disk)
        return disk

    try:
        yield mount
    finally:
        for path in mounted:
            subprocess.run(["umount", str(path)], check=True)


def test_a_disk_too_full_for_the_checkpoint_is_a_clear_error_that_writes_nothing(tmp_path, small_disk):
    trainer = make_trainer(tmp_path, "total_steps=3")
    try:
        trainer.step()
        measured = trainer.save_checkpoint()
        disk = small_disk(int(sum(p.stat().st_size for p in measured.iterdir()) * 1.8))  # room for one, not two
        trainer.ckpt_dir = disk / "ckpt"
        first = trainer.save_checkpoint()
        trainer.step()
        with pytest.raises(ckpt.CheckpointError, match=r"checkpoint of step 2: expected at least .* MiB free in"):
            trainer.save_checkpoint()
        assert ckpt.list_checkpoints(disk / "ckpt") == [first]
        assert list((disk / "ckpt").glob(".tmp-*")) == []
    finally:
        trainer.close()
