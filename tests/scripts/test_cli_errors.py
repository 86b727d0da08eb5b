"""A user's mistake is one line on stderr (expected / found / how to fix) and exit 2, never a traceback; nothing
is created before the inputs are checked; ``--debug`` shows the traceback."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from swebox.scripts.cli import main

REPO = Path(__file__).resolve().parents[2]
TINY = str(REPO / "configs" / "grpo_tiny_cpu.yaml")


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def assert_one_line(err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip() and "task/s]" not in line]  # tqdm's bar aside
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"instance_id": "x", "FAIL_TO_PASS": ["tests/test_a.py::test_a"]}) + "\n")
    return path


def test_train_config_mistakes_are_one_line(tmp_path, capsys, tasks_file):
    run_dir = tmp_path / "run"
    code, err = run(capsys, "train", "--config", str(tmp_path / "missing.yaml"))
    assert code == 2
    assert_one_line(err, "swebox train: error:", "missing.yaml: not found", "configs/grpo_tiny_cpu.yaml")

    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  tasks: [a\n  max_turns: 3\n")
    code, err = run(capsys, "train", "--config", str(bad))
    assert code == 2
    assert_one_line(err, f"{bad}:", "not valid YAML")

    code, err = run(capsys, "train", "--config", TINY, "envx.tasks=1")
    assert code == 2
    assert_one_line(err, "unknown config key 'envx'", "valid keys")

    code, err = run(
        capsys, "train", "--config", TINY, f"env.tasks={tmp_path / 'none.jsonl'}", f"logging.run_dir={run_dir}"
    )
    assert code == 2
    assert_one_line(err, "none.jsonl", "expected an existing file")
    assert not run_dir.exists()  # nothing is created before the inputs are checked


def test_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    with pytest.raises(Exception, match="not found"):
        main(["--debug", "train", "--config", str(tmp_path / "missing.yaml")])
    monkeypatch.setenv("SWEBOX_DEBUG", "1")
    with pytest.raises(Exception, match="not found"):
        main(["train", "--config", str(tmp_path / "missing.yaml")])


def test_eval_plot_skyrl_and_cache_mistakes_are_one_line(tmp_path, capsys):
    missing = str(tmp_path / "none.jsonl")
    code, err = run(capsys, "eval", "--tasks", missing, "--policy", "gold")
    assert code == 2
    assert_one_line(err, "swebox eval: error:", "none.jsonl")

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, err = run(capsys, "eval", "--tasks", str(empty), "--policy", "gold")
    assert code == 2
    assert_one_line(err, "expected at least one task")

    code, err = run(capsys, "plot", str(tmp_path / "no-run"))
    assert code == 2
    assert_one_line(err, "swebox plot: error:", "metrics.jsonl")

    code, err = run(capsys, "skyrl", "prepare", "--tasks", missing, "--out", str(tmp_path / "sk"))
    assert code == 2
    assert_one_line(err, "swebox skyrl: error:", "none.jsonl")

    store = tmp_path / "mistyped-store"
    for command in (["ls"], ["verify"], ["gc", "--keep-gb", "1"]):
        code, err = run(capsys, "cache", "--store", str(store), *command)
        assert code == 2
        assert_one_line(err, "swebox cache: error:", "no layer store here", "--store")
    assert not store.exists()  # a mistyped store is not created empty


def test_an_empty_task_file_is_not_a_pass(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    code = main(["tasks", "validate", str(empty), "--layers", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 2
    assert "no tasks to validate" in captured.err and "0 passed" not in captured.out


def test_the_tiny_config_trains_on_what_the_demo_made():
    """docs/training.md's `swebox train --config configs/grpo_tiny_cpu.yaml --resume` runs as written after
    `make demo`: the config's tasks and layer store are where the demo writes them."""
    from swebox.envs.tasks.synth.journal import TASKS_FILE
    from swebox.scripts.demo import add_arguments
    from swebox.trainers.run.config import load_config

    demo = argparse.ArgumentParser()
    add_arguments(demo.add_subparsers())
    out = Path(demo.parse_args(["demo"]).out)

    env = load_config(TINY).env
    assert Path(env.tasks) == out / "corpus" / TASKS_FILE
    assert env.layer_store == ""  # so that $SWEBOX_LAYER_STORE still wins, then the store beside the tasks


def test_the_layer_store_beside_a_task_file_is_found(tmp_path, monkeypatch):
    from swebox.envs.episodes.layers_resolver import LayerSource

    monkeypatch.delenv("SWEBOX_LAYER_STORE", raising=False)
    (tmp_path / "layers" / "manifests").mkdir(parents=True)  # as `swebox tasks synth --out DIR` leaves it
    assert LayerSource(tasks_file=str(tmp_path / "tasks.jsonl")).store_root == tmp_path / "layers"
    assert LayerSource(tasks_file=str(tmp_path / "x" / "t.jsonl")).store_root == Path("runs/layers").absolute()
    monkeypatch.setenv("SWEBOX_LAYER_STORE", str(tmp_path / "other"))
    assert LayerSource(tasks_file=str(tmp_path / "tasks.jsonl")).store_root == tmp_path / "other"


def test_a_missing_layers_folder_is_one_line_naming_the_flag(tmp_path, capsys):
    # it was a traceback naming the internal `LayerSource.dirs` (eval), or a "could not grade" row per task
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"instance_id": "x", "FAIL_TO_PASS": ["tests/test_a.py::test_a"], "patch": "diff --git a/a b/a\n"})
        + "\n"
    )
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps([{"instance_id": "x", "model_name_or_path": "m", "model_patch": "diff"}]))
    nowhere = str(tmp_path / "nowhere")
    for argv in (
        ["eval", "--tasks", str(tasks), "--policy", "gold", "--layers", nowhere],
        ["tasks", "validate", str(tasks), "--layers", nowhere],
        ["eval", "--predictions", str(preds), "--tasks", str(tasks), "--layers", nowhere],
    ):
        code, err = run(capsys, *argv)
        assert code == 2, argv
        assert_one_line(err, f"--layers {nowhere}: expected a layer store", "found no folder there")
        assert "LayerSource" not in err
    assert not (tmp_path / "m.swebox.json").exists()


def test_sft_with_nothing_to_train_on_is_one_line_saying_why(tmp_path, capsys):
    records = tmp_path / "records.jsonl"
    records.write_text(
        json.dumps(
            {
                "instance_id": "x",
                "resolved": False,
                "reward": 0.0,
                "messages": [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "no"}],
            }
        )
        + "\n"
    )
    code, err = run(
        capsys,
        "sft",
        "--config",
        TINY,
        "--data",
        str(records),
        f"logging.run_dir={tmp_path / 'sft'}",
        "logging.wandb=disabled",
    )
    assert code == 2
    assert_one_line(
        err,
        "swebox sft: error: sft.data=",
        "expected trajectories to train on; found none (0 kept; left out: 1 not resolved (e.g. x))",
        "swebox eval --policy gold",
    )


PLOT_ON_A_FULL_DISK = """
import resource, signal, sys
from swebox.scripts.cli import main
if sys.argv[2] == "full":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails (EFBIG), as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
sys.exit(main(["plot", sys.argv[1]]))
"""


def test_a_full_disk_is_one_line(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": i, "reward/mean": 0.1 * i, "reward/resolved_rate": 0.1 * i, "timing/step_s": 1.0})
            + "\n"
            for i in range(1, 4)
        )
    )
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl")}
    # first with room (matplotlib builds its font cache), then with a disk that fills up
    subprocess.run(
        [sys.executable, "-c", PLOT_ON_A_FULL_DISK, str(run_dir), "room"],
        env=env,
        timeout=300,
        capture_output=True,
        check=True,
    )
    done = subprocess.run(
        [sys.executable, "-c", PLOT_ON_A_FULL_DISK, str(run_dir), "full"],
        env=env,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert_one_line(done.stderr, "swebox plot: error: no space left on the disk", "free space")


def test_an_unpinned_project_is_one_line(tmp_path, capsys):
    code, err = run(capsys, "tasks", "synth", "--project", "toolz", "--out", str(tmp_path / "out"))
    assert code == 2
    assert_one_line(err, "swebox tasks: error: --project: expected NAME==VERSION with an exact pin; found 'toolz'")
    assert not (tmp_path / "out").exists()
    code, err = run(capsys, "tasks", "synth", "--repo", str(tmp_path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert_one_line(err, "--repo: expected a git repository", "has no .git")


def test_a_policy_folder_that_is_not_a_model_is_one_line_naming_the_flag(tmp_path, capsys):
    # it named the internal model.tokenizer, or ended in transformers' traceback about slow tokenizers
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"instance_id": "x", "FAIL_TO_PASS": ["tests/test_a.py::test_a"]}) + "\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    for folder, found in (
        ("nowhere", "no folder there"),
        ("empty", "no config.json in it"),
        ("weights", "no tokenizer in it"),
    ):
        code, err = run(capsys, "eval", "--tasks", str(tasks), "--policy", f"hf:{tmp_path / folder}")
        assert code == 2
        assert_one_line(err, f"--policy hf:{tmp_path / folder}: expected a transformers model folder", found)
        assert "model.tokenizer" not in err and "model.path" not in err
