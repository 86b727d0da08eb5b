"""Search over harness episodes on the calc task, in real sandboxes: the tiny agent (tests/envs/gateway/tiny_agent.py)
plays every line, its calls answered through the gateway by scripted models. Sampling grades and selects harness
attempts as text attempts; beam forks by replay, whose replayed prefix is the parent's calls, and a prompt that
leaves the parent's (a command whose output is random) is detected and ends the line as a failed attempt."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.episode_state import StartState
from swebox.envs.gateway import GatewayLimits
from swebox.envs.gateway.calls import Completion
from swebox.envs.gateway.harness import HarnessConfig, episode_config, run_harness
from swebox.envs.gateway.replay import ReplayModel
from swebox.envs.gateway.scripted import ScriptedModel, giveup_replies, gold_replies, mini_action
from swebox.envs.search import HarnessPolicy, SearchBudget, beam_harness, sample_harness

from tests.calc import GOLD, calc_task
from tests.envs.gateway.tool_script import ToolScript, apply

WRONG = GOLD.replace("+    return a + b", "+    return a * b")
LOOK = mini_action("cd /testbed && grep -n 'return a' calc/ops.py")
SUBMIT = giveup_replies()[0]


@pytest.fixture
def harness(tiny_agent_install) -> HarnessConfig:
    return HarnessConfig(
        harness=f"command:python3 {tiny_agent_install}/tiny_agent.py",
        install=tiny_agent_install,
        limits=GatewayLimits(max_calls=6),
    )


def options(calc_layer, harness: HarnessConfig, rule: str) -> dict[str, Any]:
    return {"layers": [calc_layer], "config": episode_config(EpisodeConfig(time_limit_s=300), harness), "rule": rule}


class FixLookSubmit:
    """A gateway model that is a function of the conversation (as a policy is): with no reply yet it applies
    the next patch of a cycle, then it looks at the code, then submits."""

    def __init__(self, first: list[str]) -> None:
        self.first = itertools.cycle(first)

    def complete(
        self, messages: list[dict[str, Any]], max_tokens: int | None, seed: int | None, request: dict[str, Any]
    ) -> Completion:
        played = sum(m["role"] == "assistant" for m in messages)
        return Completion(text=next(self.first) if played == 0 else LOOK if played == 1 else SUBMIT)


@pytest.mark.e2e
def test_harness_samples_are_graded_and_selected_as_text_attempts(calc_layer, harness):
    scripts = [giveup_replies(), gold_replies(GOLD), gold_replies(WRONG)]  # only line 1 resolves
    policy = HarnessPolicy(harness, lambda line: ScriptedModel(scripts[line % 3]), seed=5)
    result = sample_harness(calc_task(), 3, policy, **options(calc_layer, harness, "visible_tests"))
    assert [a.resolved for a in result.attempts] == [False, True, False]
    assert [a.reward for a in result.attempts] == [0.0, 1.0, 0.0] and [a.reason for a in result.attempts] == [
        "submitted"
    ] * 3
    assert result.pass_at(1) == pytest.approx(1 / 3) and result.pass_at(3) == 1.0
    # the project's visible tests in each attempt's sandbox: div stays buggy; the wrong fix fails test_add too
    assert [a.score for a in result.attempts] == pytest.approx([5 / 7, 6 / 7, 5 / 7])
    assert result.picked == 1 and result.picked_resolved and result.sandboxes == 3 and result.forks == 0
    assert [(n.parent, n.status, len(n.turns)) for n in result.tree] == [(None, "ended", 1), (None, "ended", 2)] + [
        (None, "ended", 2)
    ]
    assert "+    return a + b" in result.attempts[1].diff and result.replayed == 0 and result.turns == 5
    assert result.prompt[1]["content"] == calc_task().problem_statement  # the harness's own first messages


@pytest.mark.e2e
def test_a_replayed_prefix_is_the_parents_calls_and_a_diverging_prompt_is_detected(calc_layer, harness):
    roll = mini_action("od -An -N8 -tx8 /dev/urandom")  # the next prompt holds its output: never the same twice
    config = episode_config(EpisodeConfig(time_limit_s=300), harness)
    episodes = []

    def run(model):
        episode = SWEEpisode(calc_task(), StartState([calc_layer], [calc_layer]), config)
        episodes.append(episode)
        return run_harness(episode, model, harness, seed=1)

    try:
        parent = run(ScriptedModel([gold_replies(GOLD)[0], LOOK, SUBMIT]))
        assert [r.completion is not None for r in parent.records] == [True, True, True]
        replay = ReplayModel(parent.records[:2], ScriptedModel([SUBMIT]))
        child = run(replay)
        assert replay.replayed == 2 and replay.finished_replay() and not replay.diverged
        assert [r.messages for r in child.records] == [r.messages for r in parent.records]  # same prompts, all 3
        assert [r.completion for r in child.records[:2]] == [r.completion for r in parent.records[:2]]
        assert "2:    return a + b" in child.records[2].messages[-1]["content"]  # the replayed fix was applied

        parent = run(ScriptedModel([roll, SUBMIT]))
        replay = ReplayModel(parent.records[:2], ScriptedModel([SUBMIT]))
        child = run(replay)
        assert not replay.finished_replay() and replay.replayed == 1
        assert replay.diverged.startswith("call 1: message 3 differs") and "randomness" in replay.diverged
        assert child.records[1].error.startswith("limit_exceeded: replay diverged")  # refused: 403
        assert child.result.exit_code == 3  # the tiny agent stops on a refused call
    finally:
        for episode in episodes:
            episode.close()


@pytest.mark.e2e
def test_beam_forks_harness_lines_by_replay_and_finds_the_fix(calc_layer, harness):
    # width 2, depth 2 as the text beam's tree test: lines 0 and 1 try the wrong and the gold fix (call 1), the
    # visible tests rank line 1 first; at level 2 line 1 forks line 2 at call 1 and line 0 forks line 3; all look;
    # the two gold lines are kept and replayed to their submission
    model = FixLookSubmit([gold_replies(WRONG)[0], gold_replies(GOLD)[0]])  # one policy for every line
    policy = HarnessPolicy(harness, lambda line: model)
    result = beam_harness(calc_task(), policy, width=2, depth=2, **options(calc_layer, harness, "visible_tests"))
    tree = {n.index: n for n in result.tree}
    assert [(n.parent, n.forked_at) for n in result.tree] == [(None, 0), (0, 0), (1, 1), (0, 1)]
    assert [n.status for n in result.tree] == ["pruned", "ended", "ended", "pruned"]
    assert [t["turn"] for t in tree[1].turns] == [1, 2, 3] and [t["turn"] for t in tree[2].turns] == [2, 3]
    assert "2:    return a + b" in tree[2].turns[0]["observation"]  # line 2's replayed fix was in its sandbox
    assert [(v["value"], v["kept"]) for v in tree[3].values] == [(pytest.approx(5 / 7), False)]
    assert [a.index for a in result.attempts] == [1, 2] and result.resolved_count == 2 and result.picked_resolved
    assert result.chosen == [0, 1] and result.forks == 3
    # runs: level 1: 2, level 2: 4 (each replays 1 call), the end: 2 (each replays 2 calls)
    assert result.sandboxes == 8 + 6 and result.replayed == 4 * 1 + 2 * 2  # and 6 scoring forks at the levels


@pytest.mark.e2e
def test_beam_lines_whose_prompts_diverge_end_as_failed_attempts(calc_layer, harness):
    roll = mini_action("od -An -N8 -tx8 /dev/urandom")
    policy = HarnessPolicy(harness, lambda line: ScriptedModel([roll, gold_replies(GOLD)[0], SUBMIT]))
    result = beam_harness(calc_task(), policy, width=2, depth=2, **options(calc_layer, harness, "majority"))
    # every line replays its first two calls at the end; the second prompt holds the roll's output: diverged
    assert result.attempts and all(a.reason == "diverged" for a in result.attempts)
    assert all(a.reward == 0.0 and not a.resolved and a.grade is None for a in result.attempts)
    assert all(a.error.startswith("replay diverged: call 1: message 3 differs") for a in result.attempts)
    assert not result.picked_resolved


@pytest.mark.e2e
def test_swebox_eval_searches_harness_episodes(calc_layer, tiny_agent_install, tmp_path, capsys):
    import json

    from swebox.envs.tasks import save_jsonl
    from swebox.scripts.cli import main

    from tests.calc import layer_dirs

    tasks = tmp_path / "tasks.jsonl"
    save_jsonl([calc_task()], tasks)
    common = [
        "eval",
        "--tasks",
        str(tasks),
        "--layers",
        str(layer_dirs(tmp_path, calc_layer)),
        "--harness",
        f"command:python3 {tiny_agent_install}/tiny_agent.py",
        f"env.harness_install={tiny_agent_install}",
    ]
    assert main([*common, "--policy", "gold", "--samples", "2", "--out", str(tmp_path / "s.jsonl")]) == 0
    assert "pass@k over 1 tasks: pass@1 1.000, pass@2 1.000" in capsys.readouterr().out
    (row,) = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert row["resolved"] and row["search"]["resolved_count"] == 2 and row["num_turns"] == 2
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert main([*common, "--policy", "giveup", "--best-of", "2", "--select", "oracle"]) == 0
    assert "best-of-2, selected by the ORACLE (hidden tests; research only): resolved 0/1" in capsys.readouterr().out
    assert main([*common, "--policy", "gold", "--search", "beam", "--width", "2", "--depth", "1"]) == 0
    out = capsys.readouterr().out
    assert "beam width 2 depth 1, selected by visible_tests: resolved 1/1 (100.0%)" in out
    assert "2 model calls replayed (their commands ran again)" in out


@pytest.mark.e2e
def test_a_replay_compares_the_request_s_fields_and_names_the_one_that_differs(calc_layer, tiny_agent_install):
    episodes = []

    def run(agent_env: str, model):
        harness = HarnessConfig(
            harness=f"command:{agent_env} python3 {tiny_agent_install}/tiny_agent.py", install=tiny_agent_install
        )
        config = episode_config(EpisodeConfig(time_limit_s=300), harness)
        episode = SWEEpisode(calc_task(), StartState([calc_layer], [calc_layer]), config)
        episodes.append(episode)
        return run_harness(episode, model, harness, seed=1)

    tools = "TINY_AGENT_TOOLS=1 TINY_AGENT_MAX_TOKENS=100"
    look = "cd /testbed && grep -n 'return a' calc/ops.py"
    try:
        parent = run(tools, ToolScript([apply(GOLD), look]))
        assert parent.records[0].request["max_tokens"] == 100 and "tools" in parent.records[0].request
        # the same harness, the same request: the tool-call replies replay and the child goes on after them
        replay = ReplayModel(parent.records[:2], ToolScript([apply(GOLD), look]))
        child = run(tools, replay)
        assert replay.finished_replay() and replay.replayed == 2 and len(child.records) == 3
        assert "2:    return a + b" in child.records[2].messages[-1]["content"]  # the replayed fix ran
        # the same messages, another max_tokens: a recorded reply may have been cut where this one would not
        replay = ReplayModel(parent.records[:2], ToolScript([apply(GOLD), look]))
        child = run("TINY_AGENT_TOOLS=1 TINY_AGENT_MAX_TOKENS=200", replay)
        assert not replay.finished_replay() and replay.replayed == 0 and child.result.exit_code == 3
        assert replay.diverged.startswith("call 0: request field 'max_tokens' differs: expected 100, found 200")
        assert child.records[0].limit == "model" and child.records[0].error.startswith("limit_exceeded: replay")
        # no tools offered (the text harness): the model would not have answered with a tool call
        replay = ReplayModel(parent.records[:1], ToolScript([apply(GOLD), look]))
        run("TINY_AGENT_MAX_TOKENS=100", replay)
        assert replay.diverged.startswith("call 0: request field 'tools' differs: expected [{") and "found absent" in (
            replay.diverged
        )
    finally:
        for episode in episodes:
            episode.close()


@pytest.mark.e2e
def test_a_line_cut_by_the_search_s_max_turns_ends_as_budget(calc_layer, harness):
    # fix, look, submit: the search's 2 turns refuse the line's third call; it is graded as it stands (fixed)
    policy = HarnessPolicy(harness, lambda line: FixLookSubmit([gold_replies(GOLD)[0]]))
    found = sample_harness(
        calc_task(), 2, policy, budget=SearchBudget(max_turns=2), **options(calc_layer, harness, "majority")
    )
    assert found.budgets_hit == ["max_turns"] and found.turns == 2 and len(found.attempts) == 1
    assert [(a.reason, a.resolved, a.reward) for a in found.attempts] == [("budget", True, 1.0)]
    # look first: cut after one turn, nothing fixed, 0
    policy = HarnessPolicy(harness, lambda line: FixLookSubmit([LOOK]))
    found = sample_harness(
        calc_task(), 1, policy, budget=SearchBudget(max_turns=1), **options(calc_layer, harness, "majority")
    )
    assert found.budgets_hit == ["max_turns"] and [(a.reason, a.reward) for a in found.attempts] == [("budget", 0.0)]
    # the harness's own call limit, no search budget: the turn limit, as a text episode's (not the search's)
    own = dataclasses.replace(harness, limits=GatewayLimits(max_calls=2))
    policy = HarnessPolicy(own, lambda line: FixLookSubmit([gold_replies(GOLD)[0]]))
    found = sample_harness(calc_task(), 1, policy, **options(calc_layer, own, "majority"))
    assert found.budgets_hit == [] and [(a.reason, a.reward) for a in found.attempts] == [("max_turns", 1.0)]


PEEK = "cd /testbed && git log --all --oneline"  # the audit's git_history rule fires on it
LOOK_CMD = "cd /testbed && grep -n 'return a' calc/ops.py"


def tool_harness(harness: HarnessConfig) -> HarnessConfig:
    """The tiny agent in its tool mode: every reply is an OpenAI tool call the audit reads as a command."""
    return dataclasses.replace(harness, harness=harness.harness.replace("command:", "command:TINY_AGENT_TOOLS=1 "))


@pytest.mark.e2e
def test_sampled_harness_lines_carry_the_audit_s_rules_per_turn_and_per_attempt(calc_layer, harness):
    tools = tool_harness(harness)
    scripts = [[apply(GOLD), PEEK], [apply(GOLD), LOOK_CMD]]  # both fix; line 0 peeks at the history
    policy = HarnessPolicy(tools, lambda line: ToolScript(scripts[line % 2]), seed=5)
    config = episode_config(EpisodeConfig(time_limit_s=300, audit="zero"), tools)
    result = sample_harness(calc_task(), 2, policy, layers=[calc_layer], config=config, rule="majority")
    peeked, honest = result.tree
    assert [t["audit"] for t in peeked.turns] == [[], ["git_history"], []]  # the finding on its own turn
    assert [t["audit"] for t in honest.turns] == [[], [], []]
    assert "git log --all" in peeked.turns[1]["tool_calls"][0]["arguments"]["command"]
    first, second = result.attempts
    assert first.audit is not None and first.audit["flagged"] and first.audit["rules"] == ["git_history"]
    assert second.audit is not None and not second.audit["flagged"]
    # both resolved; the flagged line is zeroed by env.audit=zero, the honest one keeps its reward
    assert first.resolved and second.resolved and [first.reward, second.reward] == [0.0, 1.0]


@pytest.mark.e2e
def test_beam_harness_lines_carry_the_audit_s_rules_on_paused_and_replayed_turns(calc_layer, harness):
    tools = tool_harness(harness)
    # line 0 peeks on its first call (sampled in a run paused after it), then fixes; line 1 fixes at once
    scripts = [[PEEK, apply(GOLD)], [apply(GOLD)]]
    policy = HarnessPolicy(tools, lambda line: ToolScript(scripts[line % 2]))
    config = episode_config(EpisodeConfig(time_limit_s=300), tools)
    result = beam_harness(calc_task(), policy, width=2, depth=1, layers=[calc_layer], config=config, rule="majority")
    tree = {n.index: n for n in result.tree}
    assert [(n.parent, n.forked_at) for n in result.tree] == [(None, 0), (0, 0)]
    # turn 1 of line 0 came from its paused run, turns 2 and 3 from its replay to the end
    assert [(t["turn"], t["audit"]) for t in tree[0].turns] == [(1, ["git_history"]), (2, []), (3, [])]
    assert [(t["turn"], t["audit"]) for t in tree[1].turns] == [(1, []), (2, [])]
    by_line = {a.index: a for a in result.attempts}
    assert by_line[0].audit is not None and by_line[0].audit["rules"] == ["git_history"]
    assert by_line[1].audit is not None and not by_line[1].audit["flagged"]
    assert by_line[0].resolved and by_line[0].reward == 1.0  # env.audit=report: flagged, not zeroed


@pytest.mark.e2e
def test_paused_harness_lines_ended_by_a_budget_are_audited_before_they_are_graded(calc_layer, harness):
    tools = tool_harness(harness)
    scripts = [[PEEK, apply(GOLD)], [apply(GOLD)]]
    policy = HarnessPolicy(tools, lambda line: ToolScript(scripts[line % 2]))
    config = episode_config(EpisodeConfig(time_limit_s=300, audit="zero"), tools)
    # the level's two calls spend the search's 2 turns: both lines stay paused and end in finish(), as they stand
    result = beam_harness(
        calc_task(), policy, width=2, depth=1, budget=SearchBudget(max_turns=2), layers=[calc_layer], config=config
    )
    by_line = {a.index: a for a in result.attempts}
    assert "max_turns" in result.budgets_hit and [by_line[i].reason for i in (0, 1)] == ["budget", "budget"]
    assert by_line[0].audit is not None and by_line[0].audit["rules"] == ["git_history"]
    assert by_line[0].audit["action"] == "zeroed" and by_line[0].reward == 0.0
    assert by_line[1].audit is not None and not by_line[1].audit["flagged"]
    assert by_line[1].resolved and by_line[1].reward == 1.0  # the honest fix, cut by the budget, keeps its reward
