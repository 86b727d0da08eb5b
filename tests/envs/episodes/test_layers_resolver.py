"""acquire_layers: plain layer folders, a real LayerStore through the node cache, and what is missing."""

from __future__ import annotations

import shlex

import pytest
from swebox.envs.cache import LayerStore
from swebox.envs.episodes.episode import SWEEpisode
from swebox.envs.episodes.episode_state import StartState
from swebox.envs.episodes.layers_resolver import (
    LayersMissing,
    LayerSource,
    acquire_layers,
    build_command,
    missing_layers,
)

from tests.calc import CALC_ENV, GOLD, SUBMIT, apply_patch, calc_task


def test_missing_env_names_the_key_and_the_build_command(tmp_path):
    store = LayerStore(tmp_path / "store")
    source = LayerSource(store=str(store.root), tasks_file="/data/tasks.jsonl")
    with pytest.raises(LayersMissing) as err:
        acquire_layers(calc_task(), source)
    message = str(err.value)
    assert CALC_ENV.key() in message and "calc-add" in message
    assert f"swebox cache --store {store.root} build --tasks /data/tasks.jsonl" in message
    assert build_command(source) in message
    assert str(missing_layers(calc_task(), source)) == message  # the same check, without raising


def test_the_build_command_parses_as_swebox_cache_build(tmp_path):
    from swebox.scripts.cli import build_parser

    command = build_command(LayerSource(store=str(tmp_path / "store"), tasks_file="/data/tasks.jsonl"))
    args = build_parser().parse_args(shlex.split(command)[1:])  # was: "unrecognized arguments: --store"
    assert (args.cache_command, args.store, args.tasks) == ("build", str(tmp_path / "store"), "/data/tasks.jsonl")


def test_missing_layers_is_none_when_the_store_has_them(tmp_path, calc_layer):
    store = LayerStore(tmp_path / "store", fmt="tar.gz")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer, kind="env")
    assert missing_layers(calc_task(), LayerSource(store=str(store.root))) is None
    assert "its task layer task-9" in str(
        missing_layers(calc_task(task_layer_key="task-9"), LayerSource(store=str(store.root)))
    )


def test_missing_task_layer_and_missing_env_spec_and_missing_store(tmp_path, calc_layer):
    root = tmp_path / "dirs"
    root.mkdir()
    (root / CALC_ENV.key()).symlink_to(calc_layer)
    with pytest.raises(LayersMissing, match="its task layer task-0000 is missing.*swebox tasks synth"):
        acquire_layers(calc_task(task_layer_key="task-0000"), LayerSource(dirs=str(root)))
    with pytest.raises(LayersMissing, match="expected an 'env' spec"):
        acquire_layers(calc_task(env=None), LayerSource(dirs=str(root)))
    with pytest.raises(LayersMissing, match="expected a folder made by `swebox cache build`"):
        acquire_layers(calc_task(), LayerSource(store=str(tmp_path / "nothing")))
    with pytest.raises(ValueError, match="unknown keys"):
        LayerSource.from_dict({"stor": "x"})


def test_store_layers_through_the_node_cache_run_an_episode(tmp_path, calc_layer, monkeypatch):
    monkeypatch.setenv("SWEBOX_LAYER_CACHE", str(tmp_path / "node"))
    store = LayerStore(tmp_path / "store", fmt="tar.gz")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer, kind="env")
    source = LayerSource.from_dict({"store": str(store.root)})
    with acquire_layers(calc_task(), source) as layers:
        assert len(layers.paths) == 1 and (layers.paths[0] / "testbed/calc/ops.py").is_file()
        ep = SWEEpisode(calc_task(), StartState(layers.paths, layers.paths))
        try:
            ep.reset()
            ep.step(apply_patch(GOLD))
            assert ep.step(SUBMIT).reward == 1.0
        finally:
            ep.close()
    assert layers.handles == []
