"""Harness episodes on the calc fixture task, in real sandboxes: an agent program plays, its calls go through the
gateway, and the sandbox's changes are graded exactly as a text-loop episode's are (gold 1.0, nothing or a wrong
fix 0.0). The tiny agent of tiny_agent.py speaks mini-swe-agent's text protocol in the standard library only;
test_mini_swe_agent.py runs the real mini-swe-agent."""

from __future__ import annotations

import pytest
from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.episode_state import StartState
from swebox.envs.gateway import GatewayLimits
from swebox.envs.gateway.calls import Completion
from swebox.envs.gateway.harness import HarnessConfig, command_line, episode_config, play_harness
from swebox.envs.gateway.scripted import ScriptedModel, giveup_replies, gold_replies, mini_action

from tests.calc import GOLD, calc_task
from tests.envs.gateway.tool_script import ToolScript, apply

WRONG = GOLD.replace("+    return a + b", "+    return a * b")


@pytest.fixture
def play(calc_layer, tiny_agent_install):
    episodes = []

    def run(replies, audit="report", tools=False, **limits):
        agent = ("TINY_AGENT_TOOLS=1 " if tools else "") + f"python3 {tiny_agent_install}/tiny_agent.py"
        harness = HarnessConfig(harness=f"command:{agent}", install=tiny_agent_install, limits=GatewayLimits(**limits))
        episode = SWEEpisode(
            calc_task(),
            StartState([calc_layer], [calc_layer]),
            episode_config(EpisodeConfig(time_limit_s=300, audit=audit), harness),
        )
        episodes.append(episode)
        model = ToolScript(replies) if tools else ScriptedModel(replies)
        return play_harness(episode, model, harness, seed=3)

    yield run
    for episode in episodes:
        episode.close()


def test_gold_through_a_harness_resolves_and_nothing_or_a_wrong_fix_does_not(play):
    reward, info = play(gold_replies(GOLD))
    assert reward == 1.0 and info["grade"]["resolved"] and "+    return a + b" in info["diff"]
    assert info["harness"]["exit_code"] == 0 and info["reason"] == "submitted"
    assert [r["completion"]["text"] for r in info["gateway"]] == gold_replies(GOLD)
    assert info["metrics"]["gateway/calls"] == 2.0 and info["metrics"]["env/resolved"] == 1.0
    # the second call carries the harness's own record of the first: the reply, then the command's result
    assert info["gateway"][1]["messages"][2] == {"role": "assistant", "content": gold_replies(GOLD)[0]}
    assert info["gateway"][1]["messages"][3]["content"].startswith("<returncode>0</returncode>")

    reward, info = play(giveup_replies())
    assert reward == 0.0 and info["diff"] == "" and info["metrics"]["env/resolved"] == 0.0

    reward, info = play(gold_replies(WRONG))
    assert reward == 0.0 and "return a * b" in info["diff"] and not info["grade"]["resolved"]


def test_a_harness_past_its_call_limit_gets_403_and_is_graded_as_it_stands(play):
    look = mini_action("cat /testbed/calc/ops.py")
    reward, info = play([gold_replies(GOLD)[0], look, look, look], max_calls=2)
    assert info["harness"]["exit_code"] == 3 and "gateway refused: 403" in info["harness"]["output"]
    assert [bool(r["error"]) for r in info["gateway"]] == [False, False, True]
    assert info["gateway"][2]["limit"] == "max_calls" and info["reason"] == "max_turns"  # as a text episode's
    assert reward == 1.0  # the fix was made before the limit: the tree is what is paid


def test_the_harness_starts_in_the_repository_with_the_gateway_and_task_in_its_environment(play):
    probe = mini_action(
        'pwd > /tmp/seen && echo "$OPENAI_BASE_URL" >> /tmp/seen && cat "$SWEBOX_TASK_FILE" >> '
        '/tmp/seen && cp /tmp/seen /testbed/SEEN'
    )
    reward, info = play([probe, giveup_replies()[0]])
    seen = info["diff"]
    assert reward == 0.0 and "+/testbed" in seen and "+http://127.0.0.1:" in seen and "add(2, 3) returns -1" in seen


def test_the_exploit_audit_reads_the_harness_s_commands(play):
    peek = mini_action("cd /testbed && git log --all --oneline")
    reward, info = play([gold_replies(GOLD)[0], peek, gold_replies(GOLD)[1]])  # report: flagged, still paid
    assert reward == 1.0 and info["audit"]["flagged"] and "git_history" in info["audit"]["rules"]
    assert info["metrics"]["audit/git_history"] == 1.0
    reward, info = play([gold_replies(GOLD)[0], peek, gold_replies(GOLD)[1]], audit="zero")
    assert reward == 0.0 and info["grade"]["resolved"]  # the fix was graded; the audit zeroed the reward
    reward, info = play(gold_replies(GOLD), audit="zero")  # an honest harness is not flagged
    assert reward == 1.0 and not info["audit"]["flagged"]


@pytest.mark.parametrize(
    "bad, why",
    [
        ({"harness": "claude"}, "expected 'mini-swe-agent' or 'command:"),
        ({"harness": "command:  "}, "command:"),
        ({"install": "relative/dir"}, "absolute path"),
        ({"install": "/no/such/folder"}, "absolute path"),
    ],
)
def test_harness_config_says_what_it_expected(bad, why):
    with pytest.raises(ValueError, match=why):
        HarnessConfig(**bad)


def test_mini_swe_agent_needs_its_mini_command(tmp_path):
    with pytest.raises(ValueError, match="expected mini-swe-agent.s .mini."):
        HarnessConfig(harness="mini-swe-agent", install=str(tmp_path))


def test_the_install_is_bound_read_only_and_the_command_line_sets_the_gateway(tmp_path):
    harness = HarnessConfig(harness="command:my-agent --go", install=str(tmp_path))
    config = episode_config(EpisodeConfig(sandbox={"memory_mb": 2048}), harness)
    assert config.sandbox == {"memory_mb": 2048, "ro_binds": (str(tmp_path),)}
    assert episode_config(config, harness).sandbox["ro_binds"] == (str(tmp_path),)
    line = command_line(harness, "http://127.0.0.1:5/v1")
    assert line.startswith("cd /testbed && export ") and "OPENAI_BASE_URL=http://127.0.0.1:5/v1" in line
    assert line.endswith("&& my-agent --go")


def test_tool_call_commands_are_audited_and_shown_with_their_results(play):
    peek = "cd /testbed && git log --all --oneline"
    reward, info = play([apply(GOLD), peek], tools=True)
    assert reward == 1.0 and info["grade"]["resolved"] and info["reason"] == "submitted"
    first, second, last = info["gateway"]
    assert first["request"]["tools"][0]["function"]["name"] == "bash"  # the harness's request, recorded
    assert first["completion"]["tool_calls"][0]["function"]["name"] == "bash"
    # the next call carries the harness's own record: the tool call, then the sandbox's result under its id
    assert second["messages"][2]["tool_calls"] == first["completion"]["tool_calls"]
    assert second["messages"][3]["role"] == "tool" and second["messages"][3]["tool_call_id"] == "call_0"
    assert last["completion"]["tool_calls"] == []  # "Done.": the agent stopped
    # the audit read the tool call's command: flagged, with the command as evidence
    assert info["audit"]["flagged"] and info["audit"]["rules"] == ["git_history"]
    (finding,) = info["audit"]["findings"]
    assert finding["turn"] == 2 and "git log --all" in finding["evidence"]
    reward, info = play([apply(GOLD), peek], audit="zero", tools=True)
    assert reward == 0.0 and info["grade"]["resolved"]  # graded, then zeroed by the audit

    reward, info = play([apply(GOLD), "cd /testbed && grep -n 'return a' calc/ops.py"], audit="zero", tools=True)
    assert reward == 1.0 and not info["audit"]["flagged"]  # an honest tool-calling harness is not flagged
    reward, info = play([], tools=True)  # no tool call at all: nothing changed
    assert reward == 0.0 and info["diff"] == "" and not info["audit"]["flagged"]
    reward, info = play([apply(WRONG)], tools=True)
    assert reward == 0.0 and not info["grade"]["resolved"]


def test_tool_call_turns_hold_each_call_s_command_and_result(play):
    from swebox.envs.gateway.calls import CallRecord
    from swebox.envs.gateway.harness import turn_records

    look, peek = "cd /testbed && grep -n 'return a' calc/ops.py", "cd /testbed && git log --all --oneline"
    reward, info = play([apply(GOLD), look, peek], tools=True)
    records = [
        CallRecord(**{**r, "completion": r["completion"] and Completion(**r["completion"])}) for r in info["gateway"]
    ]
    turns = turn_records(records, info["audit"]["findings"])
    assert [t["audit"] for t in turns] == [[], [], ["git_history"], []]  # a finding shows on its own turn
    assert [t["action"]["tool"] for t in turns[:3]] == ["bash"] * 3 and turns[3]["action"] is None
    assert turns[0]["tool_calls"][0]["arguments"]["command"] == apply(GOLD)
    assert turns[0]["observation"].startswith("<returncode>0</returncode>")  # git apply's result
    assert "2:    return a + b" in turns[1]["tool_calls"][0]["observation"]  # the sandbox held the fix
