"""End to end on a real synthesised task (toolz 1.2.0 from PyPI): Gymnasium and SkyRL episodes from the layer
store that `swebox tasks synth` wrote, with the gold patch applied through bash (reward 1.0) and an empty
submission (0.0).

Set SWEBOX_E2E_SYNTH_DIR to the output folder of an earlier `swebox tasks synth --project toolz==1.2.0` to
skip the synthesis (minutes); otherwise one task is synthesised here.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import gymnasium
import pyarrow.parquet as pq
import pytest
import skyrl_gym
from swebox.envs import register_skyrl
from swebox.envs.episodes.layers_resolver import close_shared_caches
from swebox.envs.frameworks.skyrl_prepare import prepare
from swebox.envs.tasks import load

from tests.calc import SUBMIT, apply_patch

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory) -> Path:
    given = os.environ.get("SWEBOX_E2E_SYNTH_DIR")
    if given:
        return Path(given)
    from swebox.scripts import synth_cli

    out = tmp_path_factory.mktemp("synth") / "out"
    parser = argparse.ArgumentParser()
    synth_cli.add_arguments(parser.add_subparsers())
    args = parser.parse_args(
        ["synth", "--project", "toolz==1.2.0", "--tests", "toolz", "--out", str(out), "--max-tasks", "1", "--jobs", "2"]
    )
    assert args.func(args) == 0
    return out


@pytest.fixture
def node_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEBOX_LAYER_CACHE", str(tmp_path / "node-cache"))
    yield
    close_shared_caches()


def test_gym_and_skyrl_episodes_on_a_synthesised_task(synth_dir, node_cache, tmp_path):
    task = load(synth_dir / "tasks.jsonl")[0]
    store = str(synth_dir / "layers")
    env = gymnasium.make("swebox/SWE-v0", tasks=[task], layers={"store": store}, max_turns=4)
    try:
        obs, info = env.reset(seed=0)
        assert info["task_id"] == task.instance_id and "fails" in obs
        env.step(apply_patch(task.patch))
        _, reward, terminated, _, info = env.step(SUBMIT)
        assert (reward, terminated) == (1.0, True), info.get("grade")
        env.reset()
        assert env.step(SUBMIT)[1] == 0.0
    finally:
        env.close()

    register_skyrl()
    prepare([task], tmp_path / "data", {"max_turns": 4, "layers": {"store": store}})
    row = pq.read_table(tmp_path / "data/train.parquet").to_pylist()[0]
    prompt = row.pop("prompt")
    row.pop("env_class")
    assert json.loads(row["extra_info"]["swebox"])["layers"]["store"] == store
    rewards = []
    for gold in (True, False):
        sky = skyrl_gym.make("swebox", env_config={}, extras={**row, "max_turns": 1})
        sky.init(prompt)
        if gold:
            sky.step(apply_patch(task.patch))
        out = sky.step(SUBMIT)
        assert out["done"] and sky.get_metrics()["env/errors"] == 0.0
        rewards.append(out["reward"])
    assert rewards == [1.0, 0.0]
