"""swebox skyrl prepare: parquet rows SkyRL can read, settings in extra_info, the validation split, the CLI."""

from __future__ import annotations

import argparse
import json

import pyarrow.parquet as pq
import pytest
from swebox.envs.frameworks.skyrl_prepare import prepare
from swebox.envs.tasks import Task, save_jsonl
from swebox.scripts.skyrl_cli import add_arguments

from tests.calc import calc_task


def test_rows_hold_the_task_prompt_and_settings(tmp_path):
    tasks = [calc_task(instance_id=f"calc-{i}", metadata={"k": i} if i else {}) for i in range(5)]
    counts = prepare(tasks, tmp_path, {"max_turns": 7, "style": "xml_function"}, val_size=2, seed=3)
    assert counts == {"train": 3, "validation": 2}
    train = pq.read_table(tmp_path / "train.parquet").to_pylist()
    val = pq.read_table(tmp_path / "validation.parquet").to_pylist()
    assert sorted(r["extra_info"]["instance_id"] for r in train + val) == [f"calc-{i}" for i in range(5)]
    row = train[0]
    assert set(row) == {"data_source", "prompt", "env_class", "reward_spec", "instance", "extra_info"}
    assert row["env_class"] == "swebox" and row["data_source"] == "swebox"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert "<function=bash>" in row["prompt"][0]["content"] and "at most 7 turns" in row["prompt"][1]["content"]
    task = Task.from_json(row["instance"])
    assert task.instance_id == row["extra_info"]["instance_id"] == row["reward_spec"]["ground_truth"]
    assert json.loads(row["extra_info"]["swebox"]) == {"max_turns": 7, "style": "xml_function"}
    assert row["extra_info"]["env_key"] == task.env_key


def test_bad_settings_and_split_sizes_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown keys"):
        prepare([calc_task()], tmp_path, {"max_turn": 3})
    with pytest.raises(ValueError, match="--val-size: expected 0 to 0"):
        prepare([calc_task()], tmp_path, {}, val_size=1)


def test_cli(tmp_path, capsys):
    save_jsonl([calc_task(instance_id=f"t{i}") for i in range(3)], tmp_path / "tasks.jsonl")
    parser = argparse.ArgumentParser()
    add_arguments(parser.add_subparsers())
    args = parser.parse_args(
        [
            "skyrl",
            "prepare",
            "--tasks",
            str(tmp_path / "tasks.jsonl"),
            "--out",
            str(tmp_path / "out"),
            "--store",
            str(tmp_path / "store"),
            "--max-turns",
            "9",
            "--set",
            "time_limit_s=600",
            "--set",
            'sandbox={"memory_mb": 2048}',
            "--no-layer-check",
        ]
    )
    assert args.func(args) == 0
    assert "train.parquet: 3 tasks" in capsys.readouterr().out
    row = pq.read_table(tmp_path / "out/train.parquet").to_pylist()[0]
    settings = json.loads(row["extra_info"]["swebox"])
    assert settings["max_turns"] == 9 and settings["time_limit_s"] == 600
    assert settings["sandbox"] == {"memory_mb": 2048}
    assert settings["layers"] == {"store": str(tmp_path / "store"), "tasks_file": str(tmp_path / "tasks.jsonl")}
    bad = parser.parse_args(
        [
            "skyrl",
            "prepare",
            "--tasks",
            str(tmp_path / "tasks.jsonl"),
            "--out",
            str(tmp_path / "o2"),
            "--set",
            "max_turns=0",
        ]
    )
    assert bad.func(bad) == 2 and "max_turns" in capsys.readouterr().err


def test_prepare_records_the_store_and_refuses_rows_without_layers(tmp_path, capsys, calc_layer):
    """As the README shows it (`--tasks DIR/tasks.jsonl` after synthesis, no --store): the rows name the store
    beside the tasks, and a task whose layers are nowhere is refused instead of failing later in init."""
    from swebox.envs.cache import LayerStore

    from tests.calc import CALC_ENV

    store = LayerStore(tmp_path / "synth" / "layers", fmt="tar.gz")
    save_jsonl([calc_task()], tmp_path / "synth" / "tasks.jsonl")
    parser = argparse.ArgumentParser()
    add_arguments(parser.add_subparsers())
    argv = ["skyrl", "prepare", "--tasks", str(tmp_path / "synth" / "tasks.jsonl"), "--out", str(tmp_path / "out")]
    args = parser.parse_args(argv)
    assert args.func(args) == 2  # the store is there, the env layer is not
    err = capsys.readouterr().err
    assert f"its environment {CALC_ENV.key()}" in err and "no rows written" in err
    assert not (tmp_path / "out").exists()
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer, kind="env")
    assert args.func(args) == 0
    row = pq.read_table(tmp_path / "out/train.parquet").to_pylist()[0]
    assert json.loads(row["extra_info"]["swebox"])["layers"]["store"] == str(store.root)


def test_cli_applies_a_calibration_to_the_rows_it_writes(tmp_path, capsys):
    """The SkyRL path takes the calibration as the trainer does: unusable tasks left out, flaky tests out of the
    rows' tasks (the env grades the row's own task), and the train rows in the curriculum's order."""
    from swebox.envs.tasks.calibrate import TaskCalibration, write_calibration
    from swebox.envs.tasks.graders.provenance import task_digest

    tasks = [calc_task(instance_id=f"t{i}") for i in range(4)]
    flaky = tasks[3].PASS_TO_PASS[0]
    save_jsonl(tasks, tmp_path / "tasks.jsonl")
    cal = tmp_path / "cal.json"
    write_calibration(
        cal,
        [
            TaskCalibration("t0", task_digest(tasks[0]), 2, 0, 0, 0, 0),  # gold never resolved: left out
            TaskCalibration("t1", task_digest(tasks[1]), 2, 2, 0, 2, 0, policy={"name": "p", "resolved": 1, "runs": 2}),
            TaskCalibration(
                "t3",
                task_digest(tasks[3]),
                2,
                2,
                0,
                2,
                0,
                flaky_tests={flaky: "gold: passed,failed"},
                policy={"name": "p", "resolved": 2, "runs": 2},
            ),
        ],
    )  # t2: not in the file (kept, unrated: last)
    parser = argparse.ArgumentParser()
    add_arguments(parser.add_subparsers())

    def run(*extra: str) -> int:
        args = parser.parse_args(
            [
                "skyrl",
                "prepare",
                "--tasks",
                str(tmp_path / "tasks.jsonl"),
                "--out",
                str(tmp_path / "out"),
                "--no-layer-check",
                *extra,
            ]
        )
        return args.func(args)

    assert run("--calibration", str(cal), "--calibration-order", "easy_first") == 0
    said = capsys.readouterr().out
    assert "kept 3 of 4 tasks" in said and "t0 (gold resolved 0/2)" in said and "quarantined 1 flaky" in said
    rows = pq.read_table(tmp_path / "out/train.parquet").to_pylist()
    assert [r["extra_info"]["instance_id"] for r in rows] == ["t3", "t1", "t2"]
    assert flaky not in Task.from_json(rows[0]["instance"]).PASS_TO_PASS
    assert Task.from_json(rows[1]["instance"]).PASS_TO_PASS == tasks[1].PASS_TO_PASS

    assert run("--calibration-order", "hard_first") == 2
    assert "expected a --calibration FILE" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert run("--calibration", str(tmp_path / "bad.json")) == 2
    assert "error: " in capsys.readouterr().err
