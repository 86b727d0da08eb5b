"""`swebox tasks validate`: gold must resolve, the empty diff must not; table, summary line, exit code."""

from __future__ import annotations

import argparse
import dataclasses
import json

from swebox.envs.cache.spec import EnvSpec
from swebox.envs.tasks import save_jsonl
from swebox.envs.tasks.validate import CONFIRM_ONLY, StoreLayers, summary, validate, validate_task
from swebox.scripts.tasks_cli import add_arguments

from tests.calc import calc_log_task
from tests.envs.tasks.graders.test_grading_tamper import new_file


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="swebox tasks")
    add_arguments(parser.add_subparsers(dest="sub", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def layer_root(tmp_path, calc_layer, env: EnvSpec):
    root = tmp_path / "layers"
    root.mkdir()
    (root / env.key()).symlink_to(calc_layer, target_is_directory=True)
    return root


def test_validate_table_summary_and_exit_codes(tmp_path, calc_layer, calc_task, capsys):
    env = EnvSpec(source="/srv/calc", commit="abcdef1")
    good = dataclasses.replace(calc_task, env=env)
    # F2P test that already passes: the empty diff resolves, so the task is useless
    passes_already = dataclasses.replace(
        good,
        instance_id="calc-sub",
        FAIL_TO_PASS=("tests/test_ops.py::test_sub",),
        PASS_TO_PASS=("tests/test_ops.py::test_mul",),
        patch="",
    )
    wrong_gold = dataclasses.replace(good, instance_id="calc-wrong", patch=good.patch.replace("a + b", "a * b"))
    root = layer_root(tmp_path, calc_layer, env)
    save_jsonl([good], tmp_path / "good.jsonl")
    save_jsonl([good, passes_already, wrong_gold], tmp_path / "mixed.jsonl")

    assert run_cli(["validate", str(tmp_path / "good.jsonl"), "--layers", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "1 passed, 0 failed"
    assert out[1].startswith("calc-add") and " ok " in out[1] and "1/1 5/5" in out[1] and "0/1 5/5" in out[1]

    report = tmp_path / "r.jsonl"
    argv = ["validate", str(tmp_path / "mixed.jsonl"), "--layers", str(root), "--json", str(report), "--jobs", "2"]
    assert run_cli(argv) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "1 passed, 2 failed"
    lines = {line.split()[0]: line for line in out[1:-1]}
    assert "empty diff resolves" in lines["calc-sub"]
    assert "gold patch does not resolve" in lines["calc-wrong"] and "FAIL" in lines["calc-wrong"]
    # graded two at a time, reported in the file's order
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == ["calc-add", "calc-sub", "calc-wrong"]
    assert [r["passed"] for r in rows] == [True, False, False] and rows[0]["gold"]["resolved"] is True
    assert run_cli(["validate", str(tmp_path / "good.jsonl"), "--layers", str(root), "--jobs", "0"]) == 2
    assert "--jobs: expected a number >= 1; found 0" in capsys.readouterr().err


# A hidden test that needs what only the log run's eval_commands give (an exported variable): the log grader's
# run passes it with the gold patch, swebox's runner (env -i, no eval_commands) does not.
MODE_TEST = (
    "import os\n\nfrom calc.ops import add\n\n\ndef test_add_in_mode():\n"
    "    assert os.environ.get('CALC_MODE') == 'exact' and add(2, 3) == 5\n"
)


def test_gold_failing_only_at_the_confirmation_is_named_with_the_fix(tmp_path, calc_layer, calc_task, capsys):
    env = EnvSpec(source="/srv/calc", commit="abcdef1")
    task = dataclasses.replace(
        calc_log_task(dataclasses.replace(calc_task, env=env)),
        instance_id="calc-mode",
        eval_commands=("export CALC_MODE=exact",),
        test_patch=new_file("tests/test_mode.py", MODE_TEST),
        test_cmd="/venv/bin/python -m pytest -rA --tb=no -p no:cacheprovider -o addopts= tests/test_ops.py "
        "tests/test_mode.py",
        FAIL_TO_PASS=(*calc_task.FAIL_TO_PASS, "tests/test_mode.py::test_add_in_mode"),
    )
    assert task.confirm_mode == "runner"
    root = layer_root(tmp_path, calc_layer, env)
    save_jsonl([task], tmp_path / "mode.jsonl")
    assert run_cli(["validate", str(tmp_path / "mode.jsonl"), "--layers", str(root)]) == 1
    line = capsys.readouterr().out.splitlines()[1]
    assert CONFIRM_ONLY in line, line
    assert "F2P test tests/test_mode.py::test_add_in_mode is failed there" in line, line
    # the opt-out the message names: the log alone decides, gold resolves and the empty diff does not
    save_jsonl([dataclasses.replace(task, confirm="off")], tmp_path / "off.jsonl")
    assert run_cli(["validate", str(tmp_path / "off.jsonl"), "--layers", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 passed, 0 failed"


def test_missing_layers_and_bad_files_fail_clearly(tmp_path, calc_task, capsys):
    task = dataclasses.replace(calc_task, env=EnvSpec(source="/srv/calc", commit="abcdef1"))

    class NoLayers:
        def __call__(self, task):
            raise ValueError("no layer")

        def release(self, task):
            pass

    result = validate_task(task, NoLayers())
    assert not result.passed and result.problem == "could not grade: ValueError: no layer"
    assert summary([result]) == "0 passed, 1 failed"
    save_jsonl([task], tmp_path / "t.jsonl")
    assert run_cli(["validate", str(tmp_path / "t.jsonl"), "--layers", str(tmp_path)]) == 1
    assert "expected layer folders" in capsys.readouterr().out
    (tmp_path / "bad.jsonl").write_text("{nope\n")
    assert run_cli(["validate", str(tmp_path / "bad.jsonl"), "--layers", str(tmp_path)]) == 2
    assert "bad.jsonl: line 1:" in capsys.readouterr().err


def test_validate_reads_layers_from_a_layer_store(tmp_path, calc_layer, calc_task, capsys, monkeypatch):
    from swebox.envs.cache import LayerStore

    env = EnvSpec(source="/srv/calc", commit="abcdef1")
    task = dataclasses.replace(calc_task, env=env)
    store = LayerStore(tmp_path / "store", fmt="tar.gz")
    with store.lock(env.key()):
        store.publish(env.key(), calc_layer)
    monkeypatch.setenv("SWEBOX_LAYER_CACHE", str(tmp_path / "node-cache"))
    save_jsonl([task], tmp_path / "t.jsonl")
    assert run_cli(["validate", str(tmp_path / "t.jsonl"), "--layers", str(store.root)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 passed, 0 failed"
    # each task's layers are let go once it is graded, not held until the end of a long file
    resolver = StoreLayers(store.root)
    try:
        tasks = [dataclasses.replace(task, instance_id=f"calc-{i}") for i in range(3)]
        assert [v.passed for v in validate(tasks, resolver, jobs=2)] == [True, True, True]
        assert resolver.cache.evict(env.key())
        # a task layer that cannot be materialised (its stored file truncated): the env layer, acquired
        # first, is let go all the same
        with store.lock("task-broken"):
            store.publish("task-broken", calc_layer)
        blob = store.blob_path(store.get("task-broken"))
        blob.write_bytes(blob.read_bytes()[:100])
        broken = dataclasses.replace(task, instance_id="calc-broken", task_layer_key="task-broken")
        (result,) = validate([broken], resolver)
        assert result.problem.startswith("could not grade: LayerCorruptError")
        assert resolver.cache.evict(env.key())
    finally:
        resolver.close()
    missing = dataclasses.replace(task, env=EnvSpec(source="/srv/other", commit="abcdef2"))
    save_jsonl([missing], tmp_path / "m.jsonl")
    assert run_cli(["validate", str(tmp_path / "m.jsonl"), "--layers", str(store.root)]) == 1
    assert f"swebox cache --store {store.root} build --tasks TASKS" in capsys.readouterr().out


def test_table_columns_hold_with_long_ids():
    from swebox.envs.tasks.graders.grading import GradeReport
    from swebox.envs.tasks.validate import Validation, header, row

    long_id = "toolz-1.2.0.change_binary_operator.c25d23f844-and-then-some"  # 59 characters
    width = len(long_id)
    good = Validation(long_id, GradeReport(long_id, resolved=True), GradeReport(long_id))
    lines = [header(width), row(good, width), row(Validation("a-1", None, None, "boom"), width)]
    column = lines[0].index("gold")  # where the gold counts start, in every row
    assert [line[column - 1 : column + 3] for line in lines] == [" gol", " 0/0", " -  "]
    assert lines[1].index("ok") == lines[2].index("FAIL") == width + 1
