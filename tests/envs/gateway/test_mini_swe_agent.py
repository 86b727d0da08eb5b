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


def test_mini_swe_agent_replays_exactly_in_a_beam(calc_layer):
    """mini-swe-agent's prompts are its templates and its commands' outputs: a child forked by replay sends the
    parent's prompts again (no divergence), and the replayed fix is in its sandbox."""
    from swebox.envs.search import HarnessPolicy, beam_harness

    harness = HarnessConfig(harness="mini-swe-agent", install=str(mini_swe_agent_venv()))
    policy = HarnessPolicy(harness, lambda line: ScriptedModel(gold_replies(GOLD)))
    config = episode_config(EpisodeConfig(time_limit_s=600), harness)
    result = beam_harness(calc_task(), policy, width=2, depth=1, layers=[calc_layer], config=config, rule="majority")
    assert [a.reason for a in result.attempts] == ["submitted", "submitted"], [a.error for a in result.attempts]
    assert result.resolved_count == 2 and result.picked_resolved and result.replayed == 2
    assert [(n.parent, n.forked_at, len(n.turns)) for n in result.tree] == [(None, 0, 2), (0, 0, 2)]
