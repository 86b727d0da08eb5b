"""``swebox train`` and ``swebox eval`` through their argparse entry points (eval e2e over real sandboxes)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from swebox.scripts.train_cli import add_arguments, gold_replies, summary

from tests.trainers.shapes import shapes_files


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="swebox")
    add_arguments(p.add_subparsers(dest="command"))
    return p


def test_train_and_eval_arguments():
    args = parser().parse_args(["train", "--config", "c.yaml", "--resume", "total_steps=3", "optim.lr=1e-3"])
    assert (args.config, args.resume, args.ray) == ("c.yaml", True, False)
    assert args.overrides == ["total_steps=3", "optim.lr=1e-3"]
    args = parser().parse_args(["eval", "--tasks", "t.jsonl", "--policy", "openai:http://127.0.0.1:8000/v1"])
    assert args.policy == "openai:http://127.0.0.1:8000/v1" and args.parallel == 2


def test_eval_rejects_an_unknown_policy(tmp_path):
    args = parser().parse_args(["eval", "--tasks", str(tmp_path / "t.jsonl"), "--policy", "random"])
    with pytest.raises(SystemExit, match="expected gold, empty, giveup, hf:MODEL_FOLDER or openai:BASE_URL"):
        args.func(args)


def test_train_with_a_task_whose_layers_are_missing_stops_before_step_1(tmp_path, monkeypatch):
    # no layers for the task: the preflight stops the run with what is missing and how to build it (it used to
    # train on, every group failing to prepare, env/errors = 1 and exit 0)
    monkeypatch.setenv("SWEBOX_LAYER_STORE", str(tmp_path / "store"))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"instance_id": "x", "FAIL_TO_PASS": ["tests/test_a.py::test_a"]}) + "\n")
    run = tmp_path / "run"
    args = parser().parse_args(
        [
            "train",
            "--config",
            "configs/grpo_tiny_cpu.yaml",
            "total_steps=1",
            f"env.tasks={tasks}",
            f"logging.run_dir={run}",
            "logging.wandb=disabled",
            "logging.progress=false",
            "rollout.tasks_per_step=1",
            "rollout.group_size=2",
            "optim.micro_batch_size=2",
        ]
    )
    with pytest.raises(SystemExit, match=r"(?s)preflight: expected every task's layers.*task x: expected an 'env'"):
        args.func(args)
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()


def test_gold_replies_write_apply_and_submit():
    class T:
        patch = "diff --git a/x b/x\n"

    first, second = gold_replies(T())
    assert first.startswith("```bash\ncat > /tmp/gold.diff <<'SWEBOX_GOLD_PATCH_EOF'\ndiff --git a/x b/x\n")
    assert "git apply /tmp/gold.diff" in first and "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in second


def test_summary_reports_rate_and_breakdown():
    results = [
        {
            "resolved": True,
            "reward": 1.0,
            "error": "",
            "model_s": 1.0,
            "total_s": 4.0,
            "metrics": {"env/reset_s": 0.5, "env/exec_s": 1.0, "env/grade_s": 1.5},
        },
        {"resolved": False, "reward": 0.0, "error": "boom", "model_s": 0.0, "total_s": 4.0, "metrics": {}},
    ]
    text = summary(results, "gold")
    assert "resolved 1/2 (50.0%)" in text and "mean reward 0.500" in text and "errors 1" in text
    assert "env reset 0.50s (6%)" in text and "grading 1.50s (19%)" in text


@pytest.mark.e2e
def test_eval_gold_resolves_and_empty_does_not(shapes_env, tmp_path, capsys):
    _, tasks, _ = shapes_env
    dirs = shapes_files(shapes_env, tmp_path, 2)
    for policy, expected in (("gold", "resolved 2/2"), ("empty", "resolved 0/2")):
        out = tmp_path / f"{policy}.jsonl"
        args = parser().parse_args(
            [
                "eval",
                "--tasks",
                str(tmp_path / "tasks.jsonl"),
                "--policy",
                policy,
                "--layers",
                str(dirs),
                "--out",
                str(out),
            ]
        )
        assert args.func(args) == 0
        printed = capsys.readouterr().out
        assert expected in printed and "errors 0" in printed, printed
        rows = [json.loads(line) for line in Path(out).read_text().splitlines()]
        assert [r["instance_id"] for r in rows] == [t.instance_id for t in tasks[:2]]
        assert all(r["metrics"]["env/grade_s"] > 0 for r in rows)


@pytest.mark.e2e
def test_eval_hf_policy_plays_real_episodes(shapes_env, tmp_path, capsys):
    import torch
    from swebox.trainers.policy.models import build_builtin_tokenizer, build_model
    from swebox.trainers.run.config import ModelConfig

    dirs = shapes_files(shapes_env, tmp_path, 1)
    tok = build_builtin_tokenizer()
    torch.manual_seed(0)
    build_model(ModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2), tok).save_pretrained(
        tmp_path / "policy"
    )
    tok.save_pretrained(tmp_path / "policy")
    out = tmp_path / "hf.jsonl"
    policy = f"hf:{tmp_path / 'policy'}"
    args = parser().parse_args(
        [
            "eval",
            "--tasks",
            str(tmp_path / "tasks.jsonl"),
            "--policy",
            policy,
            "--layers",
            str(dirs),
            "--out",
            str(out),
            "env.max_turns=2",
            "generation.max_new_tokens=8",
        ]
    )
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "resolved 0/1" in printed and "errors 0" in printed, printed  # a random policy: format errors, no fix
    row = json.loads(out.read_text())
    assert row["metrics"]["env/turns"] == 2.0 and row["metrics"]["env/format_errors"] == 2.0


def test_the_terminal_table_keeps_its_columns_with_long_ids():
    import io

    from swebox.scripts.train_cli import print_task_table, task_table

    long_id = "psf__requests-" + "x" * 70
    results = [
        {"instance_id": long_id, "resolved": True, "reward": 1.0, "num_turns": 3, "total_s": 12.5, "error": ""},
        {
            "instance_id": "a-1",
            "resolved": False,
            "reward": 0.0,
            "num_turns": 1,
            "total_s": 0.5,
            "error": "grading failed: boom\nmore",
        },
    ]
    out = io.StringIO()
    print_task_table(results, file=out)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert len(lines) == 3 and long_id in lines[1] and "grading failed: boom" in lines[2]
    # the resolved column starts at the same place in every row, the long id's included
    starts = {line.index(word) for line, word in zip(lines, ("resolved", "yes", "no"), strict=True)}
    assert len(starts) == 1
    assert task_table(results).splitlines()[3] == "| a-1 | no | 0.000 | 1 | 0.50 | - | - | grading failed: boom |"
    measured = {**results[1], "cost": {"cpu_s": 0.25, "grade_cpu_s": 1.0, "peak_mb": 40.4, "grade_peak_mb": 80.6}}
    row = "| a-1 | no | 0.000 | 1 | 0.50 | 1.25 | 81 | grading failed: boom |"
    assert task_table([measured]).splitlines()[2] == row


@pytest.mark.e2e
def test_eval_episodes_end_at_the_episode_time_limit(tmp_path, calc_layer):
    """`swebox eval` plays with cfg.env.episode(): env.time_limit_s bounds a whole episode (each
    command is cut to what is left of it), not only each command."""
    from swebox.envs.episodes.groups import group
    from swebox.scripts.train_cli import play_text_episode
    from swebox.trainers.run.config import load_config

    from tests.calc import bash, calc_task

    cfg = load_config(None, ["env.time_limit_s=4", "env.max_turns=50", "env.command_timeout_s=30"])
    with group(calc_task(), 1, layers=[calc_layer], config=cfg.env.episode()) as g:
        out = play_text_episode(g[0], lambda messages: bash("sleep 3"), cfg.env.max_turns)
    # 50 turns were allowed; a `sleep 3` within its own 30 s timeout times out only when cut to what is left of
    # the episode's 4 s, which ends the episode: exactly one cut command, whatever the machine's load
    assert out["reason"] == "time_limit" and out["num_turns"] <= 2
    assert out["metrics"]["env/timeouts"] == 1.0


def test_eval_plays_tasks_in_the_calibration_order(tmp_path, calc_layer, capsys):
    """`swebox eval --calibration-order` orders as the trainer's env.calibration_order (the same function): a
    real calibration (gold and empty graded in sandboxes; one task's gold fails, so it is left out), a policy's
    solve rates on two tasks, then gold episodes played one at a time in that order; the records and the
    Markdown table keep each row's task id."""
    from swebox.envs.tasks import save_jsonl
    from swebox.envs.tasks.calibrate import calibrate, write_calibration
    from swebox.envs.tasks.validate import layers_from_dirs

    from tests.calc import calc_task, layer_dirs
    from tests.trainers.tiny_run import calc_tasks

    add, div = calc_tasks()
    b = calc_task(instance_id="calc-b")
    wrong = calc_task(instance_id="calc-wrong", patch=add.patch.replace("a + b", "a * b"))
    save_jsonl([b, wrong, add, div], tmp_path / "tasks.jsonl")
    dirs = layer_dirs(tmp_path, calc_layer)
    cal = tmp_path / "cal.json"
    write_calibration(cal, calibrate([b, wrong, add, div], layers_from_dirs(dirs), runs=1))
    doc = json.loads(cal.read_text())  # a policy's solve rates (swebox tasks calibrate --policy); calc-b unrated
    rates = {"calc-add": 1, "calc-div": 2}
    for entry in doc["tasks"]:
        if entry["instance_id"] in rates:
            entry["policy"] = {"name": "p", "resolved": rates[entry["instance_id"]], "runs": 2, "errors": 0}
    cal.write_text(json.dumps(doc))

    def run(*extra: str, out: Path | None = None) -> int:
        args = parser().parse_args(
            [
                "eval",
                "--tasks",
                str(tmp_path / "tasks.jsonl"),
                "--policy",
                "gold",
                "--layers",
                str(dirs),
                "--parallel",
                "1",
                *(["--out", str(out)] if out else []),
                *extra,
            ]
        )
        return args.func(args)

    for order, ids in (
        ("easy_first", ["calc-div", "calc-add", "calc-b"]),
        ("hard_first", ["calc-add", "calc-div", "calc-b"]),
    ):
        out = tmp_path / f"{order}.jsonl"
        assert run("--calibration", str(cal), "--calibration-order", order, out=out) == 0
        printed = capsys.readouterr().out
        assert "kept 3 of 4 tasks; left out 1: calc-wrong (gold resolved 0/1)" in printed, printed
        assert f"calibration order: {order} by the policy's solve rate over 2 tasks" in printed
        rows = [json.loads(line) for line in out.read_text().splitlines()]  # appended as each episode ended
        assert [r["instance_id"] for r in rows] == ids and all(r["resolved"] for r in rows)
        table = [line for line in (tmp_path / f"{order}.md").read_text().splitlines() if "calc-" in line]
        assert [next(i for i in ids if f" {i} " in line) for line in table] == ids
    from swebox.trainers.run.config import ConfigError

    with pytest.raises(ConfigError, match=r"^--calibration-order hard_first: expected a --calibration FILE"):
        run("--calibration-order", "hard_first")
    with pytest.raises(SystemExit):  # argparse: not one of the orders
        run("--calibration", str(cal), "--calibration-order", "random")
    assert "invalid choice: 'random'" in capsys.readouterr().err
