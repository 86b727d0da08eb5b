"""The real mini-swe-agent (PyPI) inside a sandbox on the calc task: its model calls answered through the
gateway by a scripted model that applies the gold patch (reward 1.0) and by one that gives up (0.0)."""

from __future__ import annotations

import pytest
from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.episode_state import StartState
from swebox.envs.gateway.harness import HarnessConfig, episode_config, play_harness
from swebox.envs.gateway.scripted import ScriptedModel, giveup_replies, gold_replies

from tests.calc import GOLD, calc_task
from tests.harness_venv import mini_swe_agent_venv

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "replies, reward", [(gold_replies(GOLD), 1.0), (giveup_replies(), 0.0)], ids=["gold", "giveup"]
)
def test_mini_swe_agent_in_the_sandbox_is_paid_for_what_it_leaves(calc_layer, replies, reward):
    harness = HarnessConfig(harness="mini-swe-agent", install=str(mini_swe_agent_venv()))
    episode = SWEEpisode(
        calc_task(), StartState([calc_layer], [calc_layer]), episode_config(EpisodeConfig(time_limit_s=600), harness)
    )
    try:
        got, info = play_harness(episode, ScriptedModel(replies), harness, seed=0)
        assert info["harness"]["exit_code"] == 0, info["harness"]["output"][-3000:]
        assert got == reward and info["metrics"]["env/resolved"] == reward
        assert [r["completion"]["text"] for r in info["gateway"]] == replies
        # mini-swe-agent's own system prompt and the task went through the gateway
        first = info["gateway"][0]["messages"]
        assert first[0]["role"] == "system" and "mswea_bash_command" in first[0]["content"]
        assert "add(2, 3) returns -1" in first[1]["content"]
        saved = episode.sandbox.read_file("/tmp/swebox-harness/trajectory.json").decode()
        assert "Submitted" in saved  # its trajectory file: it ended by submitting, not by an error
    finally:
        episode.close()
