"""A user's mistake is one line on stderr (expected / found / how to fix) and exit 2, never a traceback; nothing
is created before the inputs are checked; ``--debug`` shows the traceback."""

from __future__ import annotations

import argparse
import json
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

    code, err = run(capsys, "train", "--config", TINY, f"env.tasks={tmp_path / 'none.jsonl'}",
                    f"logging.run_dir={run_dir}")
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
    from swebox.envs.tasks.synth.pipeline import TASKS_FILE
    from swebox.scripts.demo import add_arguments
    from swebox.trainers.config import load_config

    demo = argparse.ArgumentParser()
    add_arguments(demo.add_subparsers())
    out = Path(demo.parse_args(["demo"]).out)

    env = load_config(TINY).env
    assert Path(env.tasks) == out / "corpus" / TASKS_FILE
    assert env.layer_store == ""  # so that $SWEBOX_LAYER_STORE still wins, then the store beside the tasks


def test_the_layer_store_beside_a_task_file_is_found(tmp_path, monkeypatch):
    from swebox.envs.layers_resolver import LayerSource

    monkeypatch.delenv("SWEBOX_LAYER_STORE", raising=False)
    (tmp_path / "layers" / "manifests").mkdir(parents=True)  # as `swebox tasks synth --out DIR` leaves it
    assert LayerSource(tasks_file=str(tmp_path / "tasks.jsonl")).store_root == tmp_path / "layers"
    assert LayerSource(tasks_file=str(tmp_path / "x" / "t.jsonl")).store_root == Path("runs/layers").absolute()
    monkeypatch.setenv("SWEBOX_LAYER_STORE", str(tmp_path / "other"))
    assert LayerSource(tasks_file=str(tmp_path / "tasks.jsonl")).store_root == tmp_path / "other"
