"""``swebox train`` into a run folder that already holds a run: refused in one line, nothing touched, unless
``--resume`` (then it continues from the newest checkpoint). A real run over the calc task, from the command."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from swebox.envs.cache import LayerStore
from swebox.scripts.cli import main
from swebox.trainers.run import checkpoint as ckpt
from swebox.trainers.run.tracking import read_metrics

from tests.calc import CALC_ENV, calc_task

REPO = Path(__file__).resolve().parents[2]
TINY = str(REPO / "configs" / "grpo_tiny_cpu.yaml")


def test_an_empty_or_unstarted_folder_holds_no_run(tmp_path):
    assert ckpt.earlier_run(tmp_path / "none", tmp_path / "none" / "checkpoints") == ""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("seed: 0\n")  # a run stopped before step 1 loses nothing
    (tmp_path / "run" / "metrics.jsonl").write_text("")
    assert ckpt.earlier_run(tmp_path / "run", tmp_path / "run" / "checkpoints") == ""
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"step": 3, "reward/mean": 0.5}) + "\n")
    assert ckpt.earlier_run(tmp_path / "run", tmp_path / "run" / "checkpoints") == "metrics.jsonl up to step 3"


def train_command(tmp_path: Path, calc_layer: Path) -> list[str]:
    """`swebox train` on the tiny config over the calc task (its layer in a real store), small and fast."""
    store = LayerStore(tmp_path / "store", fmt="tar.gz")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer, kind="env")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(calc_task().to_dict()) + "\n")
    return [
        "train",
        "--config",
        TINY,
        f"env.tasks={tasks}",
        f"env.layer_store={store.root}",
        f"env.cache_dir={tmp_path / 'node'}",
        f"logging.run_dir={tmp_path / 'run'}",
        "logging.wandb=disabled",
        "logging.progress=false",
        "rollout.tasks_per_step=1",
        "rollout.group_size=2",
        "optim.micro_batch_size=2",
        "generation.max_new_tokens=8",
        "env.max_turns=1",
        "model.hidden_size=32",
        "model.num_layers=1",
        "model.num_heads=2",
        "model.num_kv_heads=2",
    ]


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_a_rerun_into_a_run_folder_is_refused_and_resume_continues(tmp_path, calc_layer, capsys):
    common = train_command(tmp_path, calc_layer)
    run = tmp_path / "run"
    assert main([*common, "total_steps=1"]) == 0
    capsys.readouterr()
    metrics = (run / "metrics.jsonl").read_bytes()
    newest = ckpt.latest_checkpoint(run / "checkpoints")
    assert newest is not None and newest.name == ckpt.checkpoint_name(1)
    stamps = {p: p.stat().st_mtime_ns for p in run.rglob("*")}

    # a plain rerun: one line naming both ways on, and the run is exactly as it was
    assert main([*common, "total_steps=2"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert (
        f"logging.run_dir={run}: expected a new or empty run folder; found an earlier run (metrics.jsonl up "
        f"to step 1, checkpoint {newest}, policy/). Continue it with --resume, or start a new run with "
        "logging.run_dir=ANOTHER_FOLDER"
    ) in lines[0]
    assert (run / "metrics.jsonl").read_bytes() == metrics
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == stamps

    # --resume continues the same run: step 2 after step 1, from the step-1 checkpoint
    assert main([*common, "total_steps=2", "--resume"]) == 0
    assert f"resume: continuing from {newest} (step 1)" in capsys.readouterr().out
    assert [r["step"] for r in read_metrics(run)] == [1, 2]
    assert ckpt.latest_checkpoint(run / "checkpoints").name == ckpt.checkpoint_name(2)


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_ctrl_c_in_train_is_one_line_naming_the_checkpoint_to_resume_from(tmp_path, calc_layer):
    command = [
        sys.executable,
        "-m",
        "swebox.scripts.cli",
        *train_command(tmp_path, calc_layer),
        "total_steps=200",
        "checkpoint.every_steps=1",
    ]
    run = tmp_path / "run"
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 600
        while ckpt.latest_checkpoint(run / "checkpoints") is None and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint within 600 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    newest = ckpt.latest_checkpoint(run / "checkpoints")
    step = int(newest.name.rsplit("_", 1)[1])
    assert lines[-1].startswith("swebox train: interrupted at step "), lines
    assert lines[-1].endswith(
        f"of 200; the newest checkpoint is {newest}: add --resume to the command to continue from it"
    ), lines
    assert int(lines[-1].split("at step ")[1].split()[0]) >= step >= 1
