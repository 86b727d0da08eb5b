"""Task calibration in real sandboxes: gold and empty graded N times, flaky tests found and quarantined,
unusable tasks left out with their reasons (envs/tasks/calibrate.py, calibrate_select.py)."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
from swebox.envs.tasks import save_jsonl
from swebox.envs.tasks.calibrate import calibrate, summary, write_calibration
from swebox.envs.tasks.calibrate_select import CalibrationError, apply_calibration, load_calibration, select
from swebox.envs.tasks.graders.grading import grade
from swebox.scripts.tasks_cli import add_arguments

from tests.calc import CALC_ENV, FLAKY_ID, calc_task, flaky_layer, flaky_task


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="swebox tasks")
    add_arguments(parser.add_subparsers(dest="sub", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def layer_root(tmp_path, calc_layer):
    root = tmp_path / "layers"
    root.mkdir()
    (root / CALC_ENV.key()).symlink_to(calc_layer, target_is_directory=True)
    flaky_layer(root)
    return root


def tasks():
    good = calc_task()
    flaky = flaky_task()
    wrong = calc_task(instance_id="calc-wrong", patch=good.patch.replace("a + b", "a * b"))
    trivial = calc_task(
        instance_id="calc-sub",
        patch="",
        FAIL_TO_PASS=["tests/test_ops.py::test_sub"],
        PASS_TO_PASS=["tests/test_ops.py::test_mul"],
    )
    return [good, flaky, wrong, trivial]


def test_calibrate_finds_unsolvable_trivial_and_flaky_and_select_leaves_them_out(tmp_path, layer_root):
    from swebox.envs.tasks.validate import layers_from_dirs

    state = layer_root / "flaky" / "flaky" / "state"

    def flip(task_id, kind, i, report):  # after each gold run of the flaky task: pass, fail, pass...
        if task_id == "calc-flaky" and kind == "gold":
            state.write_text("fail\n" if state.read_text().strip() == "pass" else "pass\n")

    all_tasks = tasks()
    results = calibrate(all_tasks, layers_from_dirs(layer_root), runs=2, on_run=flip)
    by_id = {c.instance_id: c for c in results}
    good, flaky, wrong, trivial = (by_id[t.instance_id] for t in all_tasks)
    assert (good.gold_resolved, good.empty_resolved, good.flaky_tests, good.unusable()) == (2, 0, {}, "")
    assert good.mean_grade_s > 0 and good.total_s >= good.mean_grade_s
    # gold run 1 saw 'pass', empty run 1 and gold run 2 'fail', empty run 2 'pass'
    assert flaky.flaky_tests == {FLAKY_ID: "gold: passed,failed; empty: failed,passed"}
    assert (flaky.gold_resolved, flaky.gold_stable, flaky.empty_stable, flaky.unusable()) == (1, 2, 0, "")
    assert wrong.gold_resolved == 0 and wrong.unusable() == "gold resolved 0/2"
    assert trivial.empty_resolved == 2 and trivial.unusable() == "empty diff resolved 2/2"
    assert summary(results) == "2 usable, 2 not (empty resolves 1, unsolvable 1); 1 flaky tests in 1 tasks"

    out = tmp_path / "cal.json"
    write_calibration(out, results, source="tasks.jsonl")
    sel = select(all_tasks, load_calibration(out), str(out))
    assert [t.instance_id for t in sel.kept] == ["calc-add", "calc-flaky"]
    assert sel.left_out == [("calc-wrong", "gold resolved 0/2"), ("calc-sub", "empty diff resolved 2/2")]
    assert sel.summary() == (
        f"calibration {out}: kept 2 of 4 tasks; left out 2: calc-wrong (gold resolved 0/2); "
        "calc-sub (empty diff resolved 2/2); quarantined 1 flaky tests in 1 tasks; "
        "uncalibrated 0"
    )
    # the quarantined task grades on its stable tests only: gold resolves while the flaky test fails, empty not
    quarantined = sel.kept[1]
    assert FLAKY_ID not in quarantined.PASS_TO_PASS and len(quarantined.PASS_TO_PASS) == 5
    state.write_text("fail\n")
    layers = layers_from_dirs(layer_root)(quarantined)
    assert grade(quarantined, quarantined.patch, layers=layers).resolved
    assert not grade(quarantined, "", layers=layers).resolved
    assert not grade(all_tasks[1], all_tasks[1].patch, layers=layers).resolved  # unquarantined: it fails


def test_cli_writes_the_file_and_eval_selection_says_what_it_left_out(tmp_path, layer_root, capsys):
    good, _, wrong, _ = tasks()
    save_jsonl([good, wrong], tmp_path / "t.jsonl")
    out = tmp_path / "cal.json"
    argv = ["calibrate", str(tmp_path / "t.jsonl"), "--layers", str(layer_root), "--out", str(out), "--runs", "1"]
    assert run_cli(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == "1 usable, 1 not (unsolvable 1); 0 flaky tests in 0 tasks"
    rows = {line.split()[0]: line for line in lines[1:3]}
    assert " ok " in rows["calc-add"] and "SKIP" in rows["calc-wrong"] and "gold resolved 0/1" in rows["calc-wrong"]
    doc = json.loads(out.read_text())
    assert (
        doc["format"] == 1
        and doc["runs"] == 1
        and [t["instance_id"] for t in doc["tasks"]] == ["calc-add", "calc-wrong"]
    )
    # a task changed since calibration, and one never calibrated: kept, counted as uncalibrated
    changed = dataclasses.replace(good, problem_statement="something else")
    other = calc_task(instance_id="calc-new")
    said: list[str] = []
    kept = apply_calibration([changed, wrong, other], out, echo=said.append)
    assert [t.instance_id for t in kept] == ["calc-add", "calc-new"]
    assert said == [
        (
            f"calibration {out}: kept 2 of 3 tasks; left out 1: calc-wrong (gold resolved 0/1); "
            "quarantined 0 flaky tests in 0 tasks; uncalibrated 2 (calc-add (stale), calc-new)"
        )
    ]
    with pytest.raises(CalibrationError, match="expected at least one usable task; found none of 1"):
        apply_calibration([wrong], out, echo=said.append)


def test_bad_calibration_files_fail_clearly(tmp_path, capsys):
    with pytest.raises(CalibrationError, match="found no file there .*swebox tasks calibrate"):
        load_calibration(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(CalibrationError, match="expected a JSON calibration file"):
        load_calibration(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"format": 9, "tasks": []}')
    with pytest.raises(CalibrationError, match="of format 1 .* found format 9"):
        load_calibration(tmp_path / "other.json")
    (tmp_path / "fields.json").write_text('{"format": 1, "tasks": [{"instance_id": "x"}]}')
    with pytest.raises(CalibrationError, match=r"tasks\[0\]: expected the fields"):
        load_calibration(tmp_path / "fields.json")
    save_jsonl([calc_task()], tmp_path / "t.jsonl")
    assert (
        run_cli(
            [
                "calibrate",
                str(tmp_path / "t.jsonl"),
                "--layers",
                str(tmp_path),
                "--out",
                str(tmp_path / "c.json"),
                "--runs",
                "0",
            ]
        )
        == 2
    )
    assert "--runs: expected a number >= 1; found 0" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()


def test_calibrate_plays_a_policy_k_times_and_records_its_solve_rate(tmp_path, layer_root, capsys):
    """--policy gold resolves every run and --policy empty none: real episodes in real sandboxes, the counts in
    the file, and the file still loads (a file without policy entries loads too: the test above)."""
    save_jsonl([calc_task()], tmp_path / "t.jsonl")
    for policy, resolved in (("gold", 2), ("empty", 0)):
        out = tmp_path / f"{policy}.json"
        argv = [
            "calibrate",
            str(tmp_path / "t.jsonl"),
            "--layers",
            str(layer_root),
            "--out",
            str(out),
            "--runs",
            "1",
            "--policy",
            policy,
            "--policy-runs",
            "2",
        ]
        assert run_cli(argv) == 0
        printed = capsys.readouterr()
        assert f"policy {policy}: resolved {resolved} of 2 runs over 1 tasks" in printed.out, printed
        entry = json.loads(out.read_text())["tasks"][0]
        assert entry["policy"] == {"name": policy, "resolved": resolved, "runs": 2, "errors": 0}, printed.err
        cal = load_calibration(out)["calc-add"]
        assert cal.solve_rate() == resolved / 2 and cal.unusable() == ""


def test_bad_policy_entries_and_flags_fail_clearly(tmp_path, capsys):
    entry = {"instance_id": "x", "task_digest": "d", "runs": 1, "policy": {"name": "gold", "resolved": 3, "runs": 2}}
    (tmp_path / "p.json").write_text(json.dumps({"format": 1, "tasks": [entry]}))
    with pytest.raises(CalibrationError, match=r"tasks\[0\]: .*policy should be"):
        load_calibration(tmp_path / "p.json")
    save_jsonl([calc_task()], tmp_path / "t.jsonl")
    assert (
        run_cli(
            [
                "calibrate",
                str(tmp_path / "t.jsonl"),
                "--layers",
                str(tmp_path),
                "--out",
                str(tmp_path / "c.json"),
                "--policy",
                "gold",
                "--policy-runs",
                "0",
            ]
        )
        == 2
    )
    assert "--policy-runs: expected a number >= 1; found 0" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--policy: expected gold, empty"):
        run_cli(
            [
                "calibrate",
                str(tmp_path / "t.jsonl"),
                "--layers",
                str(tmp_path),
                "--out",
                str(tmp_path / "c.json"),
                "--policy",
                "random",
            ]
        )
    from swebox.trainers.run.config import ConfigError

    # a wrong override or model folder fails before any grading, nothing written
    with pytest.raises(ConfigError, match="env.max_turns"):
        run_cli(
            [
                "calibrate",
                str(tmp_path / "t.jsonl"),
                "--layers",
                str(tmp_path),
                "--out",
                str(tmp_path / "c.json"),
                "--policy",
                "gold",
                "--set",
                "env.max_turns=0",
            ]
        )
    with pytest.raises(ConfigError, match=r"--policy hf:.*nope: expected a transformers model folder"):
        run_cli(
            [
                "calibrate",
                str(tmp_path / "t.jsonl"),
                "--layers",
                str(tmp_path),
                "--out",
                str(tmp_path / "c.json"),
                "--policy",
                f"hf:{tmp_path / 'nope'}",
            ]
        )
    assert (
        run_cli(
            [
                "calibrate",
                str(tmp_path / "t.jsonl"),
                "--layers",
                str(tmp_path),
                "--out",
                str(tmp_path / "c.json"),
                "--set",
                "env.max_turns=2",
            ]
        )
        == 2
    )
    assert "--set env.max_turns=2: expected config overrides only with --policy" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()
