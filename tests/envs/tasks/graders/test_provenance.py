"""Provenance on every verdict: the task's digest, each layer's digest, the grader and its versions, the dataset
row and the sandbox policy, in real episodes, grade reports and the predictions report."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from importlib import metadata

import pytest
from swebox.envs.cache.spec import EnvSpec
from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.episode_state import StartState
from swebox.envs.sandbox import SandboxPolicy
from swebox.envs.sandbox.layers import write_record
from swebox.envs.tasks import load, save_jsonl
from swebox.envs.tasks.graders.provenance import (
    grader_record,
    layer_record,
    origin,
    policy_digest,
    provenance,
    task_digest,
)
from swebox.envs.tasks.graders.verify import compare
from swebox.scripts.cli import main

from tests.calc import GOLD, GOLD_DIV, SUBMIT, apply_patch, calc_log_task, calc_task, layer_dirs


def sha256_of(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_task_digest_is_content_and_origin_is_not(tmp_path):
    task = calc_task()
    assert task_digest(task) == task_digest(calc_task()) and len(task_digest(task)) == 64
    assert task_digest(dataclasses.replace(task, problem_statement="other")) != task_digest(task)
    save_jsonl([task, calc_task(instance_id="calc-two")], tmp_path / "tasks.jsonl")
    loaded = list(load(tmp_path / "tasks.jsonl"))
    assert loaded[0] == task and task_digest(loaded[0]) == task_digest(task)  # where it came from is not content
    digest = sha256_of(tmp_path / "tasks.jsonl")
    assert origin(loaded[1]) == {"source": str(tmp_path / "tasks.jsonl"), "sha256": digest, "row": 1}
    assert origin(task) is None


def test_layer_records_name_their_digest(tmp_path):
    node = tmp_path / "layers" / ("env-" + "a" * 20 + "." + "b" * 16)
    node.mkdir(parents=True)
    assert layer_record(node) == {"path": str(node), "key": "env-" + "a" * 20, "sha256_prefix": "b" * 16}
    plain = tmp_path / "plain"
    (plain / "testbed").mkdir(parents=True)
    (plain / "testbed" / "a.py").write_text("x = 1\n")
    first = layer_record(plain)["tree_sha256"]
    (plain / "testbed" / "a.py").write_text("x = 2\n")
    (plain / "testbed").touch()
    plain.touch()  # a layer changes as a whole (a new build); the folder's own mtime keys the per-process memo
    assert len(first) == 64 and layer_record(plain)["tree_sha256"] != first


def test_a_layers_interpreter_is_recorded_by_its_executables_digest(tmp_path):
    layer = tmp_path / "env-layer"
    layer.mkdir()
    write_record(layer, [sys.base_prefix])
    (found,) = layer_record(layer)["interpreters"]
    assert found["prefix"] == os.path.normpath(sys.base_prefix) and len(found["python_sha256"]) == 64


def test_grader_and_policy_records():
    assert grader_record(calc_task()) == {"kind": "junit", "swebox": metadata.version("swebox")}
    log = grader_record(calc_log_task(calc_task()))
    assert log == {
        "kind": "log",
        "swebox": metadata.version("swebox"),
        "swebench": metadata.version("swebench"),
        "log_parser": "pytest",
        "confirm": "runner",
    }
    assert policy_digest(SandboxPolicy()) == policy_digest(SandboxPolicy())
    assert policy_digest(SandboxPolicy(memory_mb=1234)) != policy_digest(SandboxPolicy())


@pytest.fixture
def episode(calc_layer):
    made = []

    def make(task=None, **config) -> SWEEpisode:
        ep = SWEEpisode(task or calc_task(), StartState([calc_layer], [calc_layer]), EpisodeConfig(**config))
        made.append(ep)
        return ep

    yield make
    for ep in made:
        ep.close()


def test_every_episode_end_carries_provenance_graded_or_not(episode, calc_layer, tmp_path):
    save_jsonl([calc_task()], tmp_path / "tasks.jsonl")
    task = list(load(tmp_path / "tasks.jsonl"))[0]
    ep = episode(task, max_turns=3, sandbox={"memory_mb": 3000})
    ep.reset()
    ep.step(apply_patch(GOLD))
    gold = ep.step(SUBMIT)
    assert gold.reward == 1.0
    prov = gold.info["provenance"]
    assert prov == gold.info["grade"]["provenance"]  # the grade report carries the same record
    assert prov["task"] == {"id": "calc-add", "sha256": task_digest(calc_task())}
    assert [layer["path"] for layer in prov["layers"]] == [str(calc_layer)]
    assert len(prov["layers"][0]["tree_sha256"]) == 64
    assert prov["grader"] == {"kind": "junit", "swebox": metadata.version("swebox")}
    assert prov["dataset"] == {
        "source": str(tmp_path / "tasks.jsonl"),
        "sha256": sha256_of(tmp_path / "tasks.jsonl"),
        "row": 0,
    }
    assert prov["sandbox_policy_sha256"] == policy_digest(EpisodeConfig(sandbox={"memory_mb": 3000}).policy())
    ep.reset()
    empty = ep.step(SUBMIT)
    assert empty.reward == 0.0 and empty.info["provenance"] == prov  # same task, layers, grader: same record
    ungraded = episode(max_turns=1, grade_on_truncation=False)
    ungraded.reset()
    last = ungraded.step(apply_patch(GOLD))
    assert last.info["grade"] is None and last.info["provenance"]["task"]["id"] == "calc-add"
    assert last.info["provenance"]["dataset"] is None  # made in code, not loaded from a file
    assert last.info["provenance"] == provenance(calc_task(), [calc_layer], EpisodeConfig().policy())


@pytest.mark.e2e
def test_the_predictions_report_carries_provenance_per_instance(tmp_path, calc_layer):
    env = EnvSpec(source="/srv/calc", commit="abcdef1")
    junit = dataclasses.replace(calc_task(), env=env)
    log = dataclasses.replace(calc_log_task(junit), instance_id="calc-add-log")
    root = tmp_path / "layers"
    root.mkdir()
    (root / env.key()).symlink_to(calc_layer, target_is_directory=True)
    save_jsonl([junit, log], tmp_path / "tasks.jsonl")
    preds = [
        {"instance_id": "calc-add", "model_name_or_path": "m", "model_patch": GOLD},
        {"instance_id": "calc-add-log", "model_name_or_path": "m", "model_patch": GOLD_DIV},
    ]
    (tmp_path / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    out = tmp_path / "report.json"
    assert (
        main(
            [
                "eval",
                "--predictions",
                str(tmp_path / "preds.jsonl"),
                "--tasks",
                str(tmp_path / "tasks.jsonl"),
                "--layers",
                str(root),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["resolved_ids"] == ["calc-add"] and report["unresolved_ids"] == ["calc-add-log"]
    digest = sha256_of(tmp_path / "tasks.jsonl")
    assert report["provenance"] == {
        "swebox": metadata.version("swebox"),
        "datasets": [{"source": str(tmp_path / "tasks.jsonl"), "sha256": digest}],
    }
    one, two = report["instances"]["calc-add"]["provenance"], report["instances"]["calc-add-log"]["provenance"]
    assert one["task"] == {"id": "calc-add", "sha256": task_digest(junit)} and one["grader"]["kind"] == "junit"
    assert one["dataset"] == {"source": str(tmp_path / "tasks.jsonl"), "sha256": digest, "row": 0}
    assert two["grader"] == {
        "kind": "log",
        "swebox": metadata.version("swebox"),
        "swebench": metadata.version("swebench"),
        "log_parser": "pytest",
        "confirm": "runner",
    }
    assert two["dataset"]["row"] == 1 and two["layers"][0]["key"] == env.key()


@pytest.mark.e2e
def test_eval_verify_regrades_recorded_diffs_and_names_what_changed(episode, calc_layer, tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    save_jsonl([calc_task()], tasks)
    dirs = layer_dirs(tmp_path, calc_layer)
    ep = episode(list(load(tasks))[0], max_turns=3)
    ep.reset()
    ep.step(apply_patch(GOLD))
    info = ep.step(SUBMIT).info
    record = {"task_id": "calc-add", "diff": info["diff"], "grade": info["grade"], "provenance": info["provenance"]}
    forged = {**record, "grade": {**info["grade"], "resolved": False, "reward": 0.0}}  # a verdict not reproduced
    (tmp_path / "records.jsonl").write_text(json.dumps(record) + "\n")
    argv = ["eval", "--verify", str(tmp_path / "records.jsonl"), "--tasks", str(tasks), "--layers", str(dirs)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "calc-add" in out and " same " in out and "verified 1: same 1, different 0" in out
    line = next(x for x in out.splitlines() if x.startswith("calc-add"))
    assert "differ" not in line and "no digest" not in line  # the same task, layer, grader and policy as recorded
    (tmp_path / "records.jsonl").write_text(json.dumps(forged) + "\n")
    assert main(argv) == 1
    assert "DIFFERENT" in capsys.readouterr().out
    changed = tmp_path / "changed.jsonl"  # the task was edited since: the verdict is the same, the task is not
    save_jsonl([calc_task(problem_statement="edited")], changed)
    (tmp_path / "records.jsonl").write_text(json.dumps(record) + "\n")
    assert main([*argv[:4], str(changed), *argv[5:]]) == 0
    assert "task content differs" in capsys.readouterr().out
    (tmp_path / "bad.jsonl").write_text('{"diff": ""}\n')
    assert main([*argv[:2], str(tmp_path / "bad.jsonl"), *argv[3:]]) == 2
    assert "expected an object with task_id and diff" in capsys.readouterr().err


def test_verify_compares_what_both_records_name():
    now = provenance(calc_task(), [], SandboxPolicy())
    now["layers"] = [{"path": "/a", "tree_sha256": "1" * 64}]
    assert compare({**now, "layers": [{"path": "/b", "key": "env-x", "tree_sha256": "1" * 64}]}, now) == []
    changed = compare(
        {**now, "layers": [{"path": "/a", "tree_sha256": "2" * 64}], "grader": {**now["grader"], "swebox": "0.0.1"}},
        now,
    )
    assert [c.split(" (")[0] for c in changed] == ["layer 0 differs in tree_sha256", "grader differs"]
    assert compare({**now, "task": {"id": "calc-add", "sha256": "0"}}, now)[0].startswith("task content differs")
    assert compare({**now, "layers": []}, now) == ["layers differ: 0 recorded, 1 now"]
