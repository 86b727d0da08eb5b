"""`swebox eval --predictions` (SWE-bench predictions in, the harness report out) and `tasks validate --report`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from swebox.envs.cache.spec import EnvSpec
from swebox.envs.tasks import save_jsonl
from swebox.envs.tasks.graders.grading import GradeReport
from swebox.envs.tasks.predictions import (
    MAX_NAME_PART,
    Outcome,
    Prediction,
    PredictionError,
    load_predictions,
    name_part,
    report_name,
    run_report,
)
from swebox.scripts.cli import main


def pred(iid: str, patch: str | None) -> dict:
    return {"instance_id": iid, "model_name_or_path": "org/agent-1", "model_patch": patch}


def test_predictions_load_from_json_list_object_and_jsonl(tmp_path):
    rows = [pred("a", "diff"), pred("b", None)]
    (tmp_path / "p.json").write_text(json.dumps(rows))
    (tmp_path / "k.json").write_text(json.dumps({r["instance_id"]: r for r in rows}))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    for name in ("p.json", "k.json", "p.jsonl"):
        got = load_predictions(tmp_path / name)
        assert [(p.instance_id, p.model_patch) for p in got] == [("a", "diff"), ("b", None)]


@pytest.mark.parametrize(
    "text, suffix, message",
    [
        ('{"instance_id": "a", "model_patch": ""}\n', ".jsonl", r"line 1: expected an object with keys"),
        (json.dumps([pred("a", ""), pred("a", "x")]), ".json", "predicted twice"),
        ("[1,", ".json", "found invalid JSON"),
        ('"x"', ".json", "found str"),
        (json.dumps([pred("a", 3)]), ".json", "string .or null. model_patch"),
    ],
)
def test_bad_prediction_files_fail_clearly(tmp_path, text, suffix, message):
    path = tmp_path / f"p{suffix}"
    path.write_text(text)
    with pytest.raises(PredictionError, match=message):
        load_predictions(path)
    with pytest.raises(PredictionError, match="does not exist"):
        load_predictions(tmp_path / "absent.jsonl")


@pytest.mark.e2e
def test_eval_predictions_grades_each_patch_with_its_grader_and_writes_the_harness_report(
    tmp_path, calc_layer, calc_task, gold, capsys
):
    env = EnvSpec(source="/srv/calc", commit="abcdef1")
    junit = dataclasses.replace(calc_task, env=env)
    log = dataclasses.replace(
        junit,
        instance_id="calc-add-log",
        grader="log",
        log_parser="pytest",
        test_cmd="/venv/bin/python -m pytest -rA --tb=no -o addopts= tests/test_ops.py",
    )
    skipped = dataclasses.replace(junit, instance_id="calc-add-empty")
    bad = dataclasses.replace(junit, instance_id="calc-add-bad")
    root = tmp_path / "layers"
    root.mkdir()
    (root / env.key()).symlink_to(calc_layer, target_is_directory=True)
    save_jsonl([junit, log, skipped, bad], tmp_path / "tasks.jsonl")
    wrong = gold["div"]  # fixes div, not add: applies, test_add still fails
    preds = [
        pred("calc-add", gold["add"]),
        pred("calc-add-log", wrong),
        pred("calc-add-empty", ""),
        pred("nope", gold["add"]),
        pred("calc-add-bad", gold["add"].replace("a - b", "a % b")),
    ]
    (tmp_path / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    out = tmp_path / "report.json"
    argv = [
        "eval",
        "--predictions",
        str(tmp_path / "preds.jsonl"),
        "--tasks",
        str(tmp_path / "tasks.jsonl"),
        "--layers",
        str(root),
        "--jobs",
        "2",
        "--out",
        str(out),
    ]
    # a prediction for an instance the dataset lacks: refused before anything is graded, as the harness does
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "found 1 it does not hold: nope; it holds calc-add, calc-add-bad, calc-add-empty, calc-add-log" in err
    assert not out.exists()
    del preds[3]
    (tmp_path / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "resolved 1, unresolved 1, empty patch 1, error 1" in printed
    report = json.loads(out.read_text())
    assert report["resolved_ids"] == ["calc-add"] and report["unresolved_ids"] == ["calc-add-log"]
    assert report["empty_patch_ids"] == ["calc-add-empty"] and report["error_ids"] == ["calc-add-bad"]
    assert report["completed_instances"] == 2 and report["submitted_instances"] == 4
    assert report["total_instances"] == 4 and report["schema_version"] == 2
    assert not report["instances"]["calc-add-bad"]["patch_successfully_applied"]
    assert report["instances"]["calc-add-bad"]["error"].startswith("the diff does not apply")
    one = report["instances"]["calc-add-log"]
    assert one["patch_successfully_applied"] and not one["resolved"]
    assert one["tests_status"]["FAIL_TO_PASS"] == {"success": [], "failure": ["tests/test_ops.py::test_add"]}
    assert len(one["tests_status"]["PASS_TO_PASS"]["success"]) == 5
    # per-instance logs in the harness's layout, next to the report
    logs = tmp_path / "logs" / "run_evaluation" / "swebox" / "org__agent-1"
    assert sorted(p.name for p in logs.iterdir()) == ["calc-add", "calc-add-bad", "calc-add-empty", "calc-add-log"]
    assert (logs / "calc-add" / "patch.diff").read_text() == gold["add"]
    assert json.loads((logs / "calc-add-log" / "report.json").read_text())["calc-add-log"]["resolved"] is False
    # the default report name is the harness's: <model with / as __>.<run id>.json
    (tmp_path / "cwd").mkdir()
    argv = [
        "eval",
        "--predictions",
        str(tmp_path / "preds.jsonl"),
        "--tasks",
        str(tmp_path / "tasks.jsonl"),
        "--layers",
        str(root),
        "--run-id",
        "r1",
    ]
    import os

    here = os.getcwd()
    os.chdir(tmp_path / "cwd")
    try:
        (tmp_path / "cwd" / "p.jsonl").write_text(json.dumps(pred("calc-add-empty", "")) + "\n")
        argv[2] = str(tmp_path / "cwd" / "p.jsonl")
        assert main(argv) == 0
    finally:
        os.chdir(here)
    assert json.loads((tmp_path / "cwd" / "org__agent-1.r1.json").read_text())["empty_patch_ids"] == ["calc-add-empty"]


@pytest.mark.e2e
def test_validate_report_shows_each_test_next_to_what_the_dataset_says(tmp_path, calc_layer, calc_task, capsys):
    env = EnvSpec(source="/srv/calc", commit="abcdef1")
    task = dataclasses.replace(
        calc_task,
        env=env,
        PASS_TO_PASS=calc_task.PASS_TO_PASS[:1],
        expected_status={"tests/test_ops.py::test_div": "FAILED"},
    )
    root = tmp_path / "layers"
    root.mkdir()
    (root / env.key()).symlink_to(calc_layer, target_is_directory=True)
    wrong_expectation = dataclasses.replace(
        task, instance_id="calc-add-exp", expected_status={"tests/test_ops.py::test_div": "PASSED"}
    )
    save_jsonl([task], tmp_path / "t.jsonl")
    save_jsonl([wrong_expectation], tmp_path / "w.jsonl")
    assert main(["tasks", "validate", str(tmp_path / "w.jsonl"), "--layers", str(root), "--report"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "should be PASSED, is failed" in lines[1]  # gold does not resolve: an R2E-Gym status differs
    assert lines[-2].split()[:6] == ["EXP", "->PASSED", "failed", "failed", "DIFFERS", "tests/test_ops.py::test_div"]
    assert main(["tasks", "validate", str(tmp_path / "t.jsonl"), "--layers", str(root), "--report"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "1 passed, 0 failed"
    rows = {line.split()[-1]: line.split() for line in lines if line.startswith("  ") and "tests/" in line}
    assert rows["tests/test_ops.py::test_add"][:5] == ["F2P", "fail->pass", "passed", "failed", "ok"]
    assert rows["tests/test_ops.py::test_sub"][:5] == ["P2P", "pass->pass", "passed", "passed", "ok"]
    assert rows["tests/test_ops.py::test_div"][:5] == ["EXP", "->FAILED", "failed", "failed", "ok"]


# -- issue 31, class 9: the predictions file is input, not trusted ------------------------------------------------
HOSTILE_ID = "calc\x1b]0;pwned\x07\x1b[2J\x1b[31mred"
"""An instance id that retitles the terminal, clears it and turns it red when printed raw."""


@pytest.mark.parametrize(
    "model",
    ["org/agent-1", "bad\x00name", "m" * 300, "../../escape", "\ud800lone", ".."],
    ids=["plain", "nul", "long", "traversal", "surrogate", "dots"],
)
def test_hostile_ids_and_names_are_escaped_and_the_report_is_always_written(tmp_path, calc_task, model):
    save_jsonl([calc_task], tmp_path / "tasks.jsonl")
    rows = [pred("calc-add", ""), pred(HOSTILE_ID, "x"), pred("\ud800lone", "x"), pred("bidi\u202eevil", "x")]
    for row in rows:
        row["model_name_or_path"] = model
    (tmp_path / "preds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # \u escapes: ASCII
    (tmp_path / "layers").mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    argv = [
        "eval",
        "--predictions",
        str(tmp_path / "preds.jsonl"),
        "--tasks",
        str(tmp_path / "tasks.jsonl"),
        "--layers",
        str(tmp_path / "layers"),
    ]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}  # a strict terminal encoding: a lone surrogate raised
    run = subprocess.run(
        [sys.executable, "-m", "swebox.scripts.cli", *argv], cwd=cwd, capture_output=True, env=env, timeout=300
    )
    # ids the dataset lacks: refused up front in one line, each id escaped; nothing written
    assert run.returncode == 2, run.stderr.decode(errors="replace")[-3000:]
    printed = run.stdout + run.stderr
    assert b"\x1b" not in printed and b"\x07" not in printed and "\u202e".encode() not in printed
    assert b"calc\\x1b]0;pwned\\x07" in run.stderr and b"\\ud800lone" in run.stderr and b"Traceback" not in printed
    assert not [p for p in tmp_path.rglob("*") if p.suffix == ".json"]
    (tmp_path / "preds.jsonl").write_text(json.dumps(rows[0]) + "\n")
    run = subprocess.run(
        [sys.executable, "-m", "swebox.scripts.cli", *argv], cwd=cwd, capture_output=True, env=env, timeout=300
    )
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-3000:]
    written = sorted(p.name for p in tmp_path.rglob("*") if p.suffix == ".json" and p.parent == cwd)
    assert written == [report_name(model, "swebox")] and len(written[0]) <= 2 * MAX_NAME_PART + 12
    assert "/" not in written[0] and not written[0].startswith(".")
    report = json.loads((cwd / written[0]).read_text(encoding="utf-8"))
    assert report["empty_patch_ids"] == ["calc-add"] and report["submitted_instances"] == 1
    logs = [p for p in (cwd / "logs" / "run_evaluation" / "swebox").iterdir()]
    assert [p.name for p in logs] == [name_part(model)] and (logs[0] / "calc-add" / "patch.diff").read_text() == ""
    if model == "org/agent-1":
        assert written == ["org__agent-1.swebox.json"]  # the harness's name, unchanged for ordinary names


def test_report_names_are_safe_bounded_and_distinct():
    names = ["a\x00b", "a\x01b", "a/b", "a b", "x" * 300, "x" * 301, "..", ".", ""]
    parts = [name_part(n) for n in names]
    assert len(set(parts)) == len(parts)
    assert all(p and len(p) <= MAX_NAME_PART and not p.startswith(".") and "/" not in p for p in parts)
    assert name_part("org/agent-1") == "org__agent-1"


def test_one_row_that_breaks_the_report_gets_an_error_entry(calc_task):
    broken = Outcome(Prediction("a", "m", "diff"), report=GradeReport("a", applied=True))
    broken.report.tests = None  # a report that cannot be read (as a crash inside one row would leave it)
    good = Outcome(Prediction("b", "m", ""))
    report = run_report([broken, good], {"a": dataclasses.replace(calc_task, instance_id="a")})
    assert report["instances"]["a"]["error"].startswith("reporting this instance failed: ")
    assert report["instances"]["b"]["patch_exists"] is False and report["empty_patch_ids"] == ["b"]


@pytest.mark.e2e
def test_ctrl_c_writes_the_report_of_what_was_graded(tmp_path, calc_layer, calc_task, gold):
    import signal

    env = EnvSpec(source="/srv/calc", commit="abcdef1")
    tasks = [dataclasses.replace(calc_task, env=env, instance_id=f"calc-add-{i}") for i in range(4)]
    root = tmp_path / "layers"
    root.mkdir()
    (root / env.key()).symlink_to(calc_layer, target_is_directory=True)
    save_jsonl(tasks, tmp_path / "tasks.jsonl")
    (tmp_path / "preds.jsonl").write_text("".join(json.dumps(pred(t.instance_id, gold["add"])) + "\n" for t in tasks))
    out = tmp_path / "report.json"
    out.write_text("an older report\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "swebox.scripts.cli",
            "eval",
            "--predictions",
            str(tmp_path / "preds.jsonl"),
            "--tasks",
            str(tmp_path / "tasks.jsonl"),
            "--layers",
            str(root),
            "--jobs",
            "1",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        first = proc.stdout.readline()  # one line per graded instance: wait for the first
        assert first.startswith("calc-add-"), first
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "Traceback" not in err, err
    graded = len([line for line in (first + rest).splitlines() if line.startswith("calc-add-")])
    assert 1 <= graded < 4
    said = [line for line in err.splitlines() if line.startswith("interrupted:")]
    assert said == [f"interrupted: {graded} of 4 graded; their report: {out}"], err
    report = json.loads(out.read_text())  # replaced whole, never cut
    assert report["submitted_instances"] == graded and len(report["resolved_ids"]) == graded
    assert len(report["incomplete_ids"]) == 4 - graded
