"""SWEHarnessGymEnv: the RL agent as the model behind a harness, in real sandboxes with the tiny agent program
(tests/envs/gateway/tiny_agent.py) on the calc task: check_env, gold 1.0 and nothing or a wrong fix 0.0, tool-call
actions, limits, and close mid-episode leaving nothing behind."""

from __future__ import annotations

import json
import threading

import gymnasium
import pytest
import swebox.envs  # noqa: F401  (registers swebox/SWE-Harness-v0)
from gymnasium.utils.env_checker import check_env
from swebox.envs.frameworks.harness_gym_env import NO_CALL, SWEHarnessGymEnv
from swebox.envs.gateway.handoff import completion_of
from swebox.envs.gateway.harness import MINI_SUBMIT
from swebox.envs.gateway.scripted import giveup_replies, gold_replies, mini_action

from tests.calc import GOLD, calc_task
from tests.envs.gateway.tool_script import apply
from tests.leak_checks import sandbox_folders, settled

WRONG = GOLD.replace("+    return a + b", "+    return a * b")


@pytest.fixture
def make_env(calc_layer, tiny_agent_install):
    made = []

    def make(program="", tools=False, via_gym=False, limits=None, **kwargs):
        agent = program or ("TINY_AGENT_TOOLS=1 " if tools else "") + f"python3 {tiny_agent_install}/tiny_agent.py"
        harness = {"harness": f"command:{agent}", "install": tiny_agent_install, "limits": limits or {}}
        common = {"harness": harness, "layers": lambda task: [calc_layer], "time_limit_s": 300, **kwargs}
        env = (
            gymnasium.make("swebox/SWE-Harness-v0", tasks=[calc_task()], **common)
            if via_gym
            else SWEHarnessGymEnv([calc_task()], **common)
        )
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def _harness_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("swebox-harness-", "swebox-gateway-"))]


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_check_env_passes_directly_and_through_gymnasium_make(make_env):
    check_env(make_env())
    env = make_env(via_gym=True, render_mode="ansi")
    assert env.spec.id == "swebox/SWE-Harness-v0" and env.spec.nondeterministic
    check_env(env.unwrapped)


def test_the_gold_fix_played_through_the_harness_resolves(make_env):
    env = make_env(render_mode="ansi")
    obs, info = env.reset(seed=0)
    request = json.loads(obs)
    assert obs in env.observation_space and env.render() == obs and info["pending"] and info["turn"] == 0
    assert request["tools"] == [] and "add(2, 3) returns -1" in request["messages"][1]["content"]
    assert info["request"]["messages"] == request["messages"] and info["reset_s"] > 0
    obs, reward, terminated, truncated, info = env.step(gold_replies(GOLD)[0])
    messages = json.loads(obs)["messages"]
    assert (reward, terminated, truncated) == (0.0, False, False) and info["turn"] == 1
    assert messages[2] == {"role": "assistant", "content": gold_replies(GOLD)[0]}  # the harness's own record
    assert messages[3]["content"].startswith("<returncode>0</returncode>")  # it ran git apply in the sandbox
    obs, reward, terminated, truncated, info = env.step(gold_replies(GOLD)[1])
    assert (reward, terminated, truncated) == (1.0, True, False) and obs == NO_CALL and not info["pending"]
    assert info["reason"] == "submitted" and info["grade"]["resolved"] and "+    return a + b" in info["diff"]
    assert info["harness"]["exit_code"] == 0 and info["metrics"]["gateway/calls"] == 2.0
    assert [r["completion"]["text"] for r in info["gateway"]] == gold_replies(GOLD)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("anything")


def test_submitting_at_once_or_a_wrong_fix_is_not_paid(make_env):
    env = make_env()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(giveup_replies()[0])
    assert (reward, terminated, truncated) == (0.0, True, False) and info["diff"] == ""
    assert info["metrics"]["env/resolved"] == 0.0
    env.reset(seed=1)  # the same sandbox, reset: the wrong fix alone is graded
    env.step(gold_replies(WRONG)[0])
    obs, reward, terminated, truncated, info = env.step(mini_action(MINI_SUBMIT))
    assert reward == 0.0 and terminated and "return a * b" in info["diff"] and not info["grade"]["resolved"]


def test_tool_call_actions_are_answered_as_openai_tool_calls(make_env):
    env = make_env(tools=True)
    obs, info = env.reset(seed=0)
    assert json.loads(obs)["tools"][0]["function"]["name"] == "bash"
    action = json.dumps(
        {"content": None, "tool_calls": [{"function": {"name": "bash", "arguments": {"command": apply(GOLD)}}}]}
    )
    obs, reward, terminated, truncated, info = env.step(action)
    assistant, result = json.loads(obs)["messages"][2:4]
    assert assistant["tool_calls"][0]["id"] == "call_0_0" and assistant["tool_calls"][0]["type"] == "function"
    assert result == {"role": "tool", "tool_call_id": "call_0_0", "content": "<returncode>0</returncode>\n"}
    obs, reward, terminated, truncated, info = env.step("Done.")  # no tool call: the tiny agent stops
    assert (reward, terminated) == (1.0, True) and info["grade"]["resolved"]
    assert info["gateway"][0]["completion"]["finish_reason"] == "tool_calls"

    # a tool call without a name is answered as text (the harness sees no call and stops): not a crash
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step('{"tool_calls": [{"arguments": {"command": "true"}}]}')
    assert "tool call 0: expected" in info["parse_error"] and (reward, terminated) == (0.0, True)
    assert info["gateway"][0]["completion"]["parse_error"] == info["parse_error"]
    assert info["harness"]["exit_code"] == 0


def test_a_bad_action_type_is_a_clear_error_and_the_call_stays_pending(make_env):
    env = make_env()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="expected the reply text"):
        env.step(42)
    obs, reward, terminated, truncated, info = env.step(giveup_replies()[0])  # the harness still waited
    assert terminated and info["turn"] == 1 and info["harness"]["exit_code"] == 0
    # a reset mid-episode stops the running harness and starts over in the same sandbox, reset
    env.reset(seed=0)
    env.step(gold_replies(GOLD)[0])
    obs, info = env.reset(seed=0)
    assert info["turn"] == 0 and len(json.loads(obs)["messages"]) == 2
    obs, reward, terminated, truncated, info = env.step(giveup_replies()[0])
    assert (reward, terminated) == (0.0, True) and info["diff"] == ""


def test_limits_truncate_and_the_episode_is_graded_as_it_stands(make_env):
    env = make_env(limits={"max_calls": 2})
    env.reset(seed=0)
    env.step(gold_replies(GOLD)[0])
    obs, reward, terminated, truncated, info = env.step(mini_action("cat /testbed/calc/ops.py"))
    assert (terminated, truncated, info["reason"]) == (False, True, "max_turns") and reward == 1.0
    assert info["gateway"][-1]["limit"] == "max_calls" and info["harness"]["exit_code"] == 3

    # gymnasium.make's TimeLimit: GradeOnTruncation stops the harness and grades, both ways
    env = make_env(via_gym=True, max_episode_steps=1)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(gold_replies(GOLD)[0])
    assert (reward, terminated, truncated, info["reason"]) == (1.0, False, True, "step_limit")
    assert info["harness"]["exit_code"] == 3 and "gateway refused: 403" in info["harness"]["output"]
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(mini_action("true"))
    assert (reward, truncated, info["reason"]) == (0.0, True, "step_limit") and not info["grade"]["resolved"]


def test_a_call_left_unanswered_past_wall_s_ends_the_episode_as_a_time_limit(make_env):
    env = make_env(limits={"wall_s": 1.0})
    env.reset(seed=0)
    assert not settled(lambda: env._thread.is_alive(), False)  # refused at wall_s: the harness exited
    obs, reward, terminated, truncated, info = env.step(gold_replies(GOLD)[0])  # too late: not used
    assert (reward, terminated, truncated, info["reason"]) == (0.0, False, True, "time_limit")
    assert info["gateway"][0]["limit"] == "wall_s" and info["diff"] == ""


def test_a_harness_that_never_calls_the_model_gets_one_step(make_env):
    env = make_env(program="echo no model here")
    obs, info = env.reset(seed=0)
    assert obs == NO_CALL and not info["pending"] and info["request"] is None
    obs, reward, terminated, truncated, info = env.step("ignored")
    assert (reward, terminated, info["reason"]) == (0.0, True, "submitted") and info["gateway"] == []
    assert "no model here" in info["harness"]["output"]


def test_close_mid_episode_leaves_no_sandbox_thread_or_process(make_env, tiny_agent_install):
    folders = sandbox_folders()
    env = make_env()
    env.reset(seed=0)
    env.step(gold_replies(GOLD)[0])
    nsinit = env._episode.sandbox.pid  # the sandbox's first process: every other one dies with it
    assert sandbox_folders() > folders and _harness_threads() and _alive(nsinit)
    env.close()
    env.close()  # twice is fine
    assert sandbox_folders() <= folders and settled(_harness_threads, []) == []
    assert settled(lambda: _alive(nsinit), False) is False
    with pytest.raises(RuntimeError, match="after close"):
        env.step("x")

    # a harness that goes on after its call was refused: close kills its sandbox's processes
    stubborn = make_env(program=f"python3 {tiny_agent_install}/tiny_agent.py; sleep 600", stop_timeout_s=1.0)
    stubborn.reset(seed=0)
    nsinit = stubborn._episode.sandbox.pid
    stubborn.close()
    assert sandbox_folders() <= folders and settled(_harness_threads, []) == []
    assert settled(lambda: _alive(nsinit), False) is False


@pytest.mark.parametrize(
    "action, expected",
    [
        ("plain text", ("plain text", [], "")),
        ('{"a": 1}', ('{"a": 1}', [], "")),  # JSON, but not a message: the reply as it stands
        ({"content": "hi"}, ("hi", [], "")),
        (
            {"tool_calls": [{"id": "x", "name": "bash", "arguments": '{"command": "ls"}'}]},
            ("", [{"id": "x", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}], ""),
        ),
        (
            '{"tool_calls": [{"function": {"name": "bash", "arguments": "{"}}]}',
            (None, [], "arguments text is not JSON"),
        ),
        ('{"tool_calls": "ls"}', (None, [], "expected a list")),
        ('{"content": "x", "tool_calls": [', (None, [], "not JSON")),
        ({"content": "x", "role": "assistant"}, (None, [], "expected the keys")),
    ],
)
def test_actions_become_completions(action, expected):
    text, calls, error = expected
    completion = completion_of(action, 0)
    assert (
        completion.tool_calls == calls
        and error in completion.parse_error
        and bool(error) == bool(completion.parse_error)
    )
    if error:  # answered as text, whole
        assert completion.text == (action if isinstance(action, str) else json.dumps(action))
    else:
        assert completion.text == text
    with pytest.raises(TypeError, match="expected the reply text"):
        completion_of(None, 0)
