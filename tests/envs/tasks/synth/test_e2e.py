"""End to end: `tasks synth` on a real PyPI project (toolz 1.2.0 sdist), then grading the tasks it made."""

from __future__ import annotations

import argparse
import json

import pytest
from swebox.envs.tasks.schema import Task

pytestmark = pytest.mark.e2e


def test_synth_toolz_three_tasks_that_grade(tmp_path, monkeypatch):
    from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore
    from swebox.envs.tasks.graders.grading import grade
    from swebox.scripts import synth_cli

    monkeypatch.setenv("SWEBOX_LAYER_CACHE", str(tmp_path / "node-cache"))
    parser = argparse.ArgumentParser()
    synth_cli.add_arguments(parser.add_subparsers())
    out = tmp_path / "out"
    args = parser.parse_args(
        [
            "synth",
            "--project",
            "toolz==1.2.0",  # no --tests: toolz/tests and toolz/sandbox/tests are found
            "--out",
            str(out),
            "--max-tasks",
            "3",
            "--jobs",
            "2",
        ]
    )
    assert args.func(args) == 0
    tasks = [Task.from_json(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert len(tasks) == 3
    store = LayerStore(out / "layers")
    cache = LayerCache(store, LayerCacheConfig())
    try:
        for task in tasks:
            assert task.repo == "toolz" and task.version == "1.2.0"
            assert task.env is not None and task.env.source == "pypi:toolz==1.2.0"
            assert task.FAIL_TO_PASS and task.PASS_TO_PASS
            assert all(t.startswith("toolz/") and "/tests/" in t for t in task.FAIL_TO_PASS)
            assert store.get(task.task_layer_key).meta["commit"] == task.base_commit
            with cache.acquire(task.env_key) as env, cache.acquire(task.task_layer_key) as layer:
                layers = [env.path, layer.path]
                assert grade(task, task.patch, layers=layers).resolved, task.instance_id
                assert not grade(task, "", layers=layers).resolved, task.instance_id
    finally:
        cache.close()
    # resumable: a second run finds the budget met and adds nothing
    assert args.func(args) == 0
    assert len((out / "tasks.jsonl").read_text().splitlines()) == 3
    assert all(json.loads(line)["reason"] for line in (out / "rejected.jsonl").read_text().splitlines())
