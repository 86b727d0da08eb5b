"""``swebox train`` into a run folder that already holds a run: refused in one line, nothing touched, unless
``--resume`` (then it continues from the newest checkpoint). A real run over the calc task, from the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swebox.envs.cache import LayerStore
from swebox.scripts.cli import main
from swebox.trainers import checkpoint as ckpt
from swebox.trainers.tracking import read_metrics

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


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_a_rerun_into_a_run_folder_is_refused_and_resume_continues(tmp_path, calc_layer, capsys):
    store = LayerStore(tmp_path / "store", fmt="tar.gz")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer, kind="env")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(calc_task().to_dict()) + "\n")
    run = tmp_path / "run"
    common = ["train", "--config", TINY, f"env.tasks={tasks}", f"env.layer_store={store.root}",
              f"env.cache_dir={tmp_path / 'node'}", f"logging.run_dir={run}", "logging.wandb=disabled",
              "logging.progress=false", "rollout.tasks_per_step=1", "rollout.group_size=2",
              "optim.micro_batch_size=2", "generation.max_new_tokens=8", "env.max_turns=1", "model.hidden_size=32",
              "model.num_layers=1", "model.num_heads=2", "model.num_kv_heads=2"]
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
    assert (f"logging.run_dir={run}: expected a new or empty run folder; found an earlier run (metrics.jsonl up "
            f"to step 1, checkpoint {newest}, policy/). Continue it with --resume, or start a new run with "
            "logging.run_dir=ANOTHER_FOLDER") in lines[0]
    assert (run / "metrics.jsonl").read_bytes() == metrics
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == stamps

    # --resume continues the same run: step 2 after step 1, from the step-1 checkpoint
    assert main([*common, "total_steps=2", "--resume"]) == 0
    assert f"resume: continuing from {newest} (step 1)" in capsys.readouterr().out
    assert [r["step"] for r in read_metrics(run)] == [1, 2]
    assert ckpt.latest_checkpoint(run / "checkpoints").name == ckpt.checkpoint_name(2)
