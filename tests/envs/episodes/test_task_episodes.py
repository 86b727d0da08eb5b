"""open_task: a task's layers held through the node cache for its episodes, and let go of on every path."""

from __future__ import annotations

import pytest
from swebox.envs.cache import LayerStore
from swebox.envs.episodes import task_episodes
from swebox.envs.episodes.episode_state import EpisodeError
from swebox.envs.episodes.layers_resolver import LayerSource, acquire_layers
from swebox.envs.episodes.task_episodes import open_task

from tests.calc import CALC_ENV, GOLD, SUBMIT, apply_patch, calc_task


@pytest.fixture
def store_source(tmp_path, calc_layer, monkeypatch):
    """A real LayerStore holding the calc env layer, read through a node cache of this test's own."""
    monkeypatch.setenv("SWEBOX_LAYER_CACHE", str(tmp_path / "node"))
    store = LayerStore(tmp_path / "store", fmt="tar.gz")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer, kind="env")
    return LayerSource(store=str(store.root))


@pytest.fixture
def acquired(monkeypatch):
    """Every cache handle open_task acquires (the real acquire_layers, watched)."""
    handles = []

    def watched(task, source=None):
        held = acquire_layers(task, source)
        handles.extend(held.handles)
        return held

    monkeypatch.setattr(task_episodes, "acquire_layers", watched)
    return handles


def _held(handles) -> list[bool]:
    return [h._lock_file is not None for h in handles]  # a handle's shared lock is what pins the layer


def test_closing_releases_the_layers_after_the_episode(store_source, acquired):
    with open_task(calc_task(), store_source, {"max_turns": 3}) as opened:
        assert _held(acquired) == [True]
        episode = opened.episode()
        episode.reset()
        episode.step(apply_patch(GOLD))
        assert episode.step(SUBMIT).reward == 1.0
        assert _held(acquired) == [True]  # graded over the held layers; still held until the task closes
    assert _held(acquired) == [False] and episode.sandbox is None
    opened.close()  # twice is fine


def test_a_prepared_start_holds_its_snapshot_until_close(store_source, acquired):
    opened = open_task(calc_task(setup_commands=["echo once > /testbed/SETUP"]), store_source, prepare=True)
    try:
        snapshot = opened.start.layers[-1].path
        first = opened.episode(started=True)
        first.close()  # no sandbox on the snapshot now: it stays for the next episode
        assert snapshot.is_dir()
        second = opened.episode(started=True)
        second.reset()
        assert "once" in second.step("```bash\ncat /testbed/SETUP\n```").observation
    finally:
        opened.close()
    assert not snapshot.exists() and _held(acquired) == [False]


def test_opening_that_fails_half_way_releases_the_layers(store_source, acquired):
    with pytest.raises(EpisodeError, match="setup command 'exit 3' failed"):
        open_task(calc_task(setup_commands=["exit 3"]), store_source, prepare=True)
    assert _held(acquired) == [False]


def test_layer_folders_and_resolvers_hold_nothing(calc_layer):
    for layers in ([calc_layer], lambda task: [calc_layer]):
        with open_task(calc_task(), layers) as opened:
            assert opened.start.layers == [calc_layer] and opened.start.grade_layers == [calc_layer]
            assert not opened.start.prepared
