"""``swebox eval``'s SWE-bench bridge: ``--instance-ids``/``--limit``, unknown ids and missing layers refused up
front in one line (nothing played, nothing written), ``--predictions-out`` from the episodes, which
``--predictions`` scores with per-instance logs in the harness's layout; and the exit status when a task could not
be played. The gold policy resolves and the empty one does not, both ways through the export."""

from __future__ import annotations

import json

import pytest
from swebox.envs.tasks.selection import SelectionError, select
from swebox.scripts.cli import build_parser, main
from swebox.scripts.train_cli import finish_eval

from tests.trainers.shapes import shapes_files


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and "task/s]" not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


class T:
    def __init__(self, iid: str) -> None:
        self.instance_id = iid


def test_select_keeps_the_datasets_order_and_refuses_unknown_ids():
    tasks = [T("a"), T("b"), T("c")]
    assert [t.instance_id for t in select(tasks, ["c", "a"], 0, "t.jsonl")] == ["a", "c"]
    assert [t.instance_id for t in select(tasks, [], 2, "t.jsonl")] == ["a", "b"]
    assert [t.instance_id for t in select(tasks, ["c", "b"], 1, "t.jsonl")] == ["b"]
    with pytest.raises(
        SelectionError,
        match=r"--instance-ids: expected ids of --tasks t.jsonl; found 1 it does "
        r"not hold: nope; it holds a, b, c",
    ):
        select(tasks, ["a", "nope"], 0, "t.jsonl")
    with pytest.raises(SelectionError, match="--limit: expected a number >= 0"):
        select(tasks, [], -1, "t.jsonl")


def test_predictions_out_with_a_search_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--predictions-out: expected one episode per task; found --samples"):
        main(
            [
                "eval",
                "--tasks",
                "t.jsonl",
                "--policy",
                "gold",
                "--samples",
                "2",
                "--predictions-out",
                str(tmp_path / "p.jsonl"),
            ]
        )
    assert not (tmp_path / "p.jsonl").exists()


def test_a_task_that_could_not_be_played_makes_eval_exit_1(tmp_path, capsys):
    args = build_parser().parse_args(
        ["eval", "--tasks", "t.jsonl", "--policy", "gold", "--predictions-out", str(tmp_path / "p.jsonl")]
    )
    ok = {"instance_id": "a", "error": "", "diff": "diff --git a/x b/x\n"}
    broken = {"instance_id": "b", "error": "RuntimeError: host fault\nmore", "diff": ""}
    assert finish_eval(args, [ok]) == 0
    assert finish_eval(args, [ok, broken]) == 1
    err = capsys.readouterr().err
    assert one_line(err) == (
        "swebox eval: 1 of 2 tasks could not be played (e.g. b: RuntimeError: host fault); "
        "their records hold the errors"
    )
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert rows == [{"instance_id": "a", "model_name_or_path": "gold", "model_patch": "diff --git a/x b/x\n"}]


@pytest.mark.e2e
def test_unknown_ids_and_missing_layers_are_refused_before_anything_plays(shapes_env, tmp_path, capsys):
    dirs = shapes_files(shapes_env, tmp_path, 2)
    tasks = str(tmp_path / "tasks.jsonl")
    out = tmp_path / "eval" / "gold.jsonl"
    assert (
        main(
            [
                "eval",
                "--tasks",
                tasks,
                "--policy",
                "gold",
                "--layers",
                str(dirs),
                "--out",
                str(out),
                "--instance-ids",
                "nope",
            ]
        )
        == 2
    )
    line = one_line(capsys.readouterr().err)
    assert "--instance-ids: expected ids of --tasks" in line and "found 1 it does not hold: nope" in line
    (tmp_path / "empty").mkdir()
    assert (
        main(["eval", "--tasks", tasks, "--policy", "gold", "--layers", str(tmp_path / "empty"), "--out", str(out)])
        == 2
    )
    line = one_line(capsys.readouterr().err)
    assert "--layers: 2 of 2 tasks cannot start: task " in line and "is missing from the layer cache" in line
    assert not (tmp_path / "eval").exists()


@pytest.mark.e2e
def test_eval_exports_predictions_that_predictions_scores_with_harness_logs(shapes_env, tmp_path, capsys):
    _, all_tasks, _ = shapes_env
    dirs = shapes_files(shapes_env, tmp_path, 3)
    tasks = str(tmp_path / "tasks.jsonl")
    second, third = all_tasks[1].instance_id, all_tasks[2].instance_id
    for policy in ("gold", "empty"):
        assert (
            main(
                [
                    "eval",
                    "--tasks",
                    tasks,
                    "--policy",
                    policy,
                    "--layers",
                    str(dirs),
                    "--instance-ids",
                    third,
                    second,
                    "--limit",
                    "1",
                    "--out",
                    str(tmp_path / f"{policy}.jsonl"),
                    "--predictions-out",
                    str(tmp_path / f"{policy}-preds.jsonl"),
                ]
            )
            == 0
        )
        rows = [json.loads(line) for line in (tmp_path / f"{policy}-preds.jsonl").read_text().splitlines()]
        assert [(r["instance_id"], r["model_name_or_path"]) for r in rows] == [(second, policy)]
        assert bool(rows[0]["model_patch"].strip()) == (policy == "gold")
    capsys.readouterr()

    report = tmp_path / "scored" / "gold.json"
    assert (
        main(
            [
                "eval",
                "--predictions",
                str(tmp_path / "gold-preds.jsonl"),
                "--tasks",
                tasks,
                "--layers",
                str(dirs),
                "--out",
                str(report),
                "--run-id",
                "r1",
            ]
        )
        == 0
    )
    assert "resolved 1, unresolved 0" in capsys.readouterr().out
    assert json.loads(report.read_text())["resolved_ids"] == [second]
    logs = tmp_path / "scored" / "logs" / "run_evaluation" / "r1" / "gold" / second
    assert sorted(p.name for p in logs.iterdir()) == ["patch.diff", "report.json", "test_output.txt"]
    assert json.loads((logs / "report.json").read_text())[second]["resolved"] is True
    assert (logs / "patch.diff").read_text() == json.loads((tmp_path / "gold-preds.jsonl").read_text())["model_patch"]
    assert "passed" in (logs / "test_output.txt").read_text()

    # a diff that changes nothing the tests need: unresolved through the same path
    wrong = {
        "instance_id": second,
        "model_name_or_path": "wrong",
        "model_patch": "diff --git a/shapes/extra.py b/shapes/extra.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/shapes/extra.py\n@@ -0,0 +1 @@\n+X = 1\n",
    }
    (tmp_path / "wrong.jsonl").write_text(json.dumps(wrong) + "\n")
    assert (
        main(
            [
                "eval",
                "--predictions",
                str(tmp_path / "wrong.jsonl"),
                "--tasks",
                tasks,
                "--layers",
                str(dirs),
                "--out",
                str(tmp_path / "scored" / "wrong.json"),
            ]
        )
        == 0
    )
    assert "resolved 0, unresolved 1" in capsys.readouterr().out

    # a prediction for an instance the dataset lacks: refused up front, as the harness does
    (tmp_path / "unknown.jsonl").write_text(json.dumps({**wrong, "instance_id": "nope"}) + "\n")
    assert (
        main(
            [
                "eval",
                "--predictions",
                str(tmp_path / "unknown.jsonl"),
                "--tasks",
                tasks,
                "--layers",
                str(dirs),
                "--out",
                str(tmp_path / "scored" / "unknown.json"),
            ]
        )
        == 2
    )
    assert "found 1 it does not hold: nope" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "scored" / "unknown.json").exists()
