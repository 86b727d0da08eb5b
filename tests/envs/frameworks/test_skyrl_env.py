"""SWESkyRLEnv through skyrl_gym.make with rows as SkyRL's PromptDataset hands them over."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq
import pytest
import skyrl_gym
from swebox.envs import register_skyrl
from swebox.envs.audit import metric_names as audit_metric_names
from swebox.envs.episodes.episode import METRIC_NAMES
from swebox.envs.frameworks.skyrl_env import SWESkyRLEnv
from swebox.envs.frameworks.skyrl_prepare import prepare

from tests.calc import CALC_ENV, GOLD, SUBMIT, apply_patch, bash, calc_task, layer_dirs


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_skyrl()


def rows_for(tmp_path, calc, tasks=None, **settings):
    """Parquet rows as SkyRL hands them to the env: prompt and env_class split off, max_turns overwritten."""
    dirs = layer_dirs(tmp_path, calc)
    prepare(tasks or [calc_task()], tmp_path / "data", {"max_turns": 5, "layers": {"dirs": str(dirs)}, **settings})
    out = []
    for row in pq.read_table(tmp_path / "data/train.parquet").to_pylist():
        prompt = row.pop("prompt")
        assert row.pop("env_class") == "swebox"
        out.append((prompt, {**row, "max_turns": 1}))  # skyrl 0.3 overwrites it with generator.max_turns
    return out


def test_register_is_idempotent_and_checks_settings():
    assert register_skyrl() is False
    assert skyrl_gym.registry["swebox"].entry_point is SWESkyRLEnv
    with pytest.raises(ValueError, match="unknown keys"):
        register_skyrl("swebox-typo", max_turn=3)


def test_gold_patch_scores_one_and_empty_submission_zero(tmp_path, calc_layer):
    ((prompt, extras),) = rows_for(tmp_path, calc_layer)
    env = skyrl_gym.make("swebox", env_config={}, extras=dict(extras))
    chat, info = env.init(prompt)
    assert chat == prompt and info == {"task_id": "calc-add", "error": ""} and env.max_turns == 5
    out = env.step(apply_patch(GOLD))
    assert out["done"] is False and out["reward"] == 0.0 and out["observations"][0]["role"] == "user"
    out = env.step(SUBMIT)
    assert out["done"] is True and out["reward"] == 1.0 and isinstance(out["reward"], float)
    assert out["observations"] == [] and env._episode is None  # sandbox closed at the end
    assert out["metadata"]["audit"]["flagged"] is False and out["metadata"]["provenance"]["task"]["id"] == "calc-add"
    metrics = env.get_metrics()
    assert set(metrics) == set(METRIC_NAMES) | set(audit_metric_names())  # the audit is on ("report") by default
    assert metrics["env/resolved"] == 1.0 and metrics["env/turns"] == 2.0 and metrics["audit/flagged"] == 0.0
    empty = skyrl_gym.make("swebox", env_config={}, extras=dict(extras))
    empty.init(prompt)
    out = empty.step(SUBMIT)
    assert (out["done"], out["reward"]) == (True, 0.0) and empty.get_metrics()["env/errors"] == 0.0
    agg = SWESkyRLEnv.aggregate_metrics([env.get_metrics(), empty.get_metrics()])
    assert agg["env/resolved"] == 0.5 and agg["env/turns"] == 1.5
    from skyrl_gym.metrics import aggregate_for_environment

    assert aggregate_for_environment("swebox", [metrics])["env/resolved"] == 1.0


def test_own_turn_limit_ends_the_episode_with_a_float_reward(tmp_path, calc_layer):
    ((prompt, extras),) = rows_for(tmp_path, calc_layer, max_turns=2)
    env = skyrl_gym.make("swebox", env_config={}, extras=extras)
    env.init(prompt)
    assert env.step(bash("true"))["done"] is False
    out = env.step(bash("true"))
    assert out["done"] is True and out["reward"] == 0.0 and out["metadata"]["reason"] == "max_turns"


def test_task_fields_as_columns_and_settings_as_kwargs(tmp_path, calc_layer):
    dirs = layer_dirs(tmp_path, calc_layer)
    row = {k: v for k, v in calc_task().to_dict().items()}
    env = SWESkyRLEnv(env_config=None, extras={**row, "max_turns": 1}, max_turns=3, layers={"dirs": str(dirs)})
    chat, _ = env.init([])
    assert [m["role"] for m in chat] == ["system", "user"] and env.max_turns == 3
    env.step(apply_patch(GOLD))
    assert env.step(SUBMIT)["reward"] == 1.0


@pytest.mark.parametrize(
    "extras, expected",
    [
        ({"instance": "{not json"}, "bad env settings or task row"),
        ({"reward_spec": {}}, "expected the task in extras"),
        ({"instance": calc_task().to_json(), "extra_info": {"swebox": json.dumps({"max_turns": -1})}}, "max_turns"),
        (
            {"instance": calc_task().to_json(), "extra_info": {"swebox": json.dumps({"layers": {"store": "/nope"}})}},
            "expected a folder made by `swebox cache build`",
        ),
    ],
)
def test_bad_rows_and_missing_layers_end_with_reward_zero_and_an_error_metric(extras, expected):
    env = skyrl_gym.make("swebox", env_config={}, extras=extras)  # never raises into the trainer
    chat, info = env.init([{"role": "user", "content": "fix it"}])
    assert chat and expected in info["error"]
    out = env.step("anything")
    assert (out["done"], out["reward"]) == (True, 0.0) and env.get_metrics()["env/errors"] == 1.0
    env.close()
    env.close()


def test_missing_env_in_the_cache_names_the_build_command(tmp_path):
    from swebox.envs.cache import LayerStore

    store = LayerStore(tmp_path / "store")
    settings = {"layers": {"store": str(store.root), "tasks_file": "/data/tasks.jsonl"}}
    env = SWESkyRLEnv({}, {"instance": calc_task().to_json(), "extra_info": {"swebox": json.dumps(settings)}})
    _, info = env.init(None)
    assert CALC_ENV.key() in info["error"]
    assert f"swebox cache --store {store.root} build --tasks /data/tasks.jsonl" in info["error"]
    assert env.step("x")["reward"] == 0.0


def test_episodes_run_in_a_thread_pool_like_skyrl(tmp_path, calc_layer):
    ((prompt, extras),) = rows_for(tmp_path, calc_layer)

    def play(gold: bool) -> float:
        env = skyrl_gym.make("swebox", env_config={}, extras=dict(extras))
        env.init(prompt)
        if gold:
            env.step(apply_patch(GOLD))
        return env.step(SUBMIT)["reward"]

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(play, [True, False, True, False])) == [1.0, 0.0, 1.0, 0.0]
