"""Rollouts on disk: every rollout of every step (turns, diff, grade, reward, advantage), retention, eval --out."""

from __future__ import annotations

import gzip
import json
import re
import time

import pytest
from swebox.trainers.run import trajectories as tj

from tests.calc import layer_dirs
from tests.trainers.tiny_run import calc_tasks, make_trainer


@pytest.mark.e2e
def test_a_real_run_writes_every_rollout_with_turns_grades_and_advantages(calc_layer, tmp_path, wandb_env):
    import wandb

    trainer = make_trainer(
        tmp_path / "run",
        calc_layer,
        "total_steps=3",
        "logging.trajectories_keep_last=2",
        "logging.wandb=offline",
        "logging.wandb_rollouts_every=2",
    )
    for _ in range(3):
        trainer.step()
    data = trainer.last
    trainer.close()
    folder = trainer.tracker.sync_dir / "files" / "media" / "table"
    for _ in range(600):  # wandb-core, a separate process, may still be writing after finish()
        tables = list(folder.glob("rollouts_*.table.json"))
        if tables:
            break
        time.sleep(0.1)
    assert len(tables) == 1  # every 2 steps: step 2 only
    table = wandb.Table.from_json(json.loads(tables[0].read_text()), None)
    assert len(table.data) == 8 and {row[0] for row in table.data} == {"calc-add", "calc-div"}
    files = tj.step_files(tmp_path / "run")
    assert [s for s, _ in files] == [2, 3]  # keep_last=2: step 1's file was deleted
    read = tj.read_jsonl(files[-1][1])
    assert not read.problems and len(read.records) == 8
    records = read.records
    assert [r["advantage"] for r in records] == pytest.approx(data.advantages.tolist())
    assert [r["reward"] for r in records] == pytest.approx(data.rewards.tolist())
    by_kind = {r["turns"][0]["text"][:14]: r for r in records if r["task_id"] == "calc-add"}
    gold = next(r for r in records if r["task_id"] == "calc-add" and r["num_turns"] == 3)
    look, apply, submit = gold["turns"]
    assert look["action"] == {"tool": "bash", "arguments": {"command": "cat /testbed/calc/ops.py"}}
    assert look["exit_code"] == 0 and "def add(a, b)" in look["observation"] and look["env_s"] > 0
    assert apply["action"]["tool"] == "bash" and submit["action"]["tool"] == "submit"
    assert gold["resolved"] and gold["reward"] == 1.0 and gold["reason"] == "submitted"
    assert (
        "+    return a + b" in gold["diff"]
        and gold["grade"]["tests"]["tests/test_ops.py::test_add"]["status"] == "passed"
    )
    wrong = next(r for r in records if "return a * b" in r["diff"])
    assert not wrong["resolved"] and wrong["reward"] == 0.0
    assert wrong["grade"]["tests"]["tests/test_ops.py::test_add"]["status"] == "failed"
    assert "assert" in wrong["grade"]["tests"]["tests/test_ops.py::test_add"]["message"]
    chat = next(r for r in by_kind.values() if r["turns"][0]["format_error"])
    assert chat["turns"][0]["action"] is None and chat["diff"] == "" and chat["metrics"]["env/format_errors"] == 1
    slow = next(r for r in records if r["turns"][0]["timed_out"])
    assert slow["turns"][0]["exit_code"] is None and slow["metrics"]["env/timeouts"] == 1
    assert gold["prompt"][0]["role"] == "system" and "add(2, 3)" in gold["prompt"][1]["content"]
    # the index: one short line per rollout of every step written, also of the step whose file retention removed
    index = [json.loads(line) for line in (tmp_path / "run" / "trajectories" / "index.jsonl").read_text().splitlines()]
    assert [r["step"] for r in index] == [1] * 8 + [2] * 8 + [3] * 8
    assert set(index[0]) == set(tj.INDEX_FIELDS) and sum(r["grade_cached"] for r in index) >= 3


def test_every_n_steps_and_a_resumed_step_replaces_its_stale_index_lines(tmp_path):
    writer = tj.TrajectoryWriter(tmp_path, every=2)
    record = {"step": 0, "index": 0, "task_id": "t", "reward": 1.0, "metrics": {"env/grade_cache_hits": 1.0}}
    assert writer.write(1, [record]) is None and not (tmp_path / "trajectories").exists()
    for step in (2, 4):
        writer.write(step, [{**record, "step": step}])
    # the run died after step 4; resumed from its checkpoint of step 1, a new process writes step 2 again
    tj.TrajectoryWriter(tmp_path, every=2).write(2, [{**record, "step": 2}])
    assert [s for s, _ in tj.step_files(tmp_path)] == [2, 4]
    lines = (tmp_path / "trajectories" / "index.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2]
    assert json.loads(lines[0])["grade_cached"] is True
    assert not [p for p in (tmp_path / "trajectories").iterdir() if p.name.startswith(".")]  # no temporary files
    with pytest.raises(Exception, match="trajectories_keep_last: expected >= 0"):
        from swebox.trainers.run.config import load_config

        load_config(None, ["logging.trajectories_keep_last=-1"])


def test_reading_a_corrupt_line_and_a_truncated_file_keeps_the_rest_and_names_the_damage(tmp_path):
    path = tmp_path / "step_000001.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"a": 1}\n{"a": 2\n' + "".join(json.dumps({"a": i, "pad": "x" * 500}) + "\n" for i in range(3, 60)))
    result = tj.read_jsonl(path)
    assert [r["a"] for r in result.records][:2] == [1, 3] and len(result.records) == 58
    assert len(result.problems) == 1 and f"{path}: line 2: not JSON" in result.problems[0]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    result = tj.read_jsonl(path)
    assert result.records and len(result.records) < 58 and "truncated or corrupt" in result.problems[-1]
    assert str(path) in result.problems[-1]


@pytest.mark.e2e
def test_eval_out_records_hold_the_trajectory_fields_and_a_markdown_table(calc_layer, tmp_path, capsys, wandb_env):
    from swebox.envs.tasks import save_jsonl
    from swebox.scripts.cli import build_parser

    tasks = calc_tasks()
    save_jsonl(tasks, tmp_path / "tasks.jsonl")
    dirs = layer_dirs(tmp_path, calc_layer)
    out = tmp_path / "eval" / "gold.jsonl"  # its folder does not exist yet: eval makes it
    args = build_parser().parse_args(
        [
            "eval",
            "--tasks",
            str(tmp_path / "tasks.jsonl"),
            "--policy",
            "gold",
            "--layers",
            str(dirs),
            "--out",
            str(out),
            "--wandb",
            "offline",
        ]
    )
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    # the terminal gets the table through rich (aligned columns), the Markdown goes to the file beside --out
    assert re.search(r"calc-add\s+yes\s+1\.000\s+2\s", printed) and re.search(r"calc-div\s+yes\s+1\.000\s+2\s", printed)
    markdown = out.with_name("gold.md").read_text()
    assert "| calc-add | yes | 1.000 | 2 |" in markdown and "| calc-div | yes | 1.000 | 2 |" in markdown
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for row in rows:  # the fields eval always wrote, and the trajectory fields
        assert {"instance_id", "reward", "resolved", "error", "model_s", "env_s", "metrics", "total_s"} <= set(row)
        assert row["task_id"] == row["instance_id"] and row["resolved"] and row["num_turns"] == 2
        assert row["turns"][0]["action"]["tool"] == "bash" and row["turns"][1]["action"]["tool"] == "submit"
        assert row["turns"][0]["exit_code"] == 0 and row["grade"]["resolved"] and row["diff"].startswith("diff --git")
        assert row["prompt"][1]["role"] == "user"
        assert row["audit"]["flagged"] is False and row["turns"][0]["audit"] == []  # the exploit audit: clean
        prov = row["provenance"]  # what produced the verdict: the task row of tasks.jsonl, its layer, the grader
        assert prov["task"]["id"] == row["task_id"] and prov["grader"]["kind"] == "junit"
        assert prov["dataset"]["source"] == str(tmp_path / "tasks.jsonl") and prov["layers"][0]["tree_sha256"]
    table = (tmp_path / "eval" / "gold.md").read_text()
    assert table.startswith("# swebox eval: gold") and "| calc-div | yes | 1.000 | 2 |" in table
    assert "resolved 2/2" in table
    # the same table in an offline wandb run next to --out, read back with the wandb SDK
    import wandb

    folder = next((tmp_path / "eval" / "gold-wandb" / "wandb").glob("offline-run-*")) / "files" / "media" / "table"
    for _ in range(600):  # wandb-core, a separate process, may still be writing after finish()
        tables = list(folder.glob("eval_*.table.json")) if folder.is_dir() else []
        if tables:
            break
        time.sleep(0.1)
    table = wandb.Table.from_json(json.loads(tables[0].read_text()), None)
    assert table.columns[:3] == ["task_id", "resolved", "reward"]
    assert sorted(row[:4] for row in table.data) == [["calc-add", True, 1.0, 2], ["calc-div", True, 1.0, 2]]
    summary = json.loads((tmp_path / "eval" / "gold-wandb" / "metrics.jsonl").read_text())
    assert summary["eval/resolved_rate"] == 1.0 and summary["step"] == 0
