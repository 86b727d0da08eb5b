"""Search at inference: pass@k's estimator by hand, the selection rules, and real searches over forked sandboxes
with scripted policies that solve the calc task on some branches only."""

from __future__ import annotations

import itertools
import os
from math import comb

import pytest
from swebox.envs.search import (
    SearchBudget,
    beam,
    mean_pass_at_k,
    parse_rule,
    pass_at_k,
    report_ks,
    sample,
)
from swebox.envs.search.nodes import path_turns
from swebox.envs.search.select import majority_scores, normal_diff, pick

from tests.calc import GOLD, SUBMIT, apply_patch, bash, calc_task
from tests.leak_checks import sandbox_folders

WRONG_MUL = bash("cd /testbed && sed -i '2s/a - b/a * b/' calc/ops.py")  # add(2, 3) == 6: still wrong
WRONG_NOOP = bash("cd /testbed && echo '# looked at it' >> calc/ops.py")


# -- the estimator ---------------------------------------------------------------------------------------
def test_pass_at_k_by_hand():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - comb(7, 5) / comb(10, 5))  # 1 - 21/252
    assert pass_at_k(10, 0, 10) == 0.0 and pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(5, 2, 4) == 1.0  # only 3 failures: every draw of 4 holds a success
    for n, c, k in itertools.product(range(1, 8), range(8), range(1, 8)):
        if c <= n and k <= n:
            assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))
    assert mean_pass_at_k([(4, 1), (4, 3)], 1) == pytest.approx((0.25 + 0.75) / 2)
    assert report_ks(7) == [1, 2, 5, 7] and report_ks(10) == [1, 2, 5, 10] and report_ks(1) == [1]
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(3, 1, 4)


# -- the rules --------------------------------------------------------------------------------------------
A = "diff --git a/x b/x\n-1\n+2\n"
B = "diff --git a/y b/y\n-3\n+4\n"


def test_majority_votes_on_normalised_diffs_and_never_for_nothing():
    assert normal_diff(A + B) == normal_diff(B + A)
    assert majority_scores([A + B, B + A, A, "", ""]) == [2.0, 2.0, 1.0, 0.0, 0.0]
    assert pick([1.0, 3.0, 3.0]) == 1  # the earliest of the best


def length_scorer(task, candidate) -> float:
    """A user scorer for the tests (``tests.envs.test_search:length_scorer``): prefers short diffs."""
    return -len(candidate.diff)


def test_rules_by_name():
    assert parse_rule("oracle").oracle and not parse_rule("majority").oracle
    assert parse_rule("tests.envs.test_search:length_scorer").scorer is length_scorer
    with pytest.raises(ValueError, match="expected one of visible_tests, majority, oracle or MODULE:FUNCTION"):
        parse_rule("best")
    with pytest.raises(ValueError, match="could not load it"):
        parse_rule("tests.envs.test_search:no_such_scorer")


# -- real searches ---------------------------------------------------------------------------------------
class Cycling:
    """A scripted policy: each new attempt (a conversation with no reply yet) tries the next fix of a cycle,
    then submits. Only the gold fix resolves the calc task."""

    def __init__(self, fixes: list[str]) -> None:
        self.fixes = itertools.cycle(fixes)

    def __call__(self, messages: list[dict[str, str]]) -> str:
        return next(self.fixes) if len(messages) == 2 else SUBMIT


@pytest.mark.e2e
def test_best_of_n_with_an_agent_visible_rule_beats_one_sample_and_the_oracle_bounds_it(calc_layer):
    config = {"max_turns": 3}
    fixes = [WRONG_MUL, apply_patch(GOLD), WRONG_MUL, WRONG_NOOP]  # 1 of 4 attempts resolves
    results = {
        rule: sample(calc_task(), 4, Cycling(fixes), layers=[calc_layer], config=config, rule=rule)
        for rule in ("visible_tests", "majority", "oracle")
    }
    for result in results.values():
        assert [a.resolved for a in result.attempts] == [False, True, False, False]
        assert result.pass_at(1) == pytest.approx(0.25) and result.pass_at(4) == 1.0
        assert result.sandboxes == 4 and result.forks == 0
    # the project's own tests, run in each attempt's sandbox, find the one that works
    visible = results["visible_tests"]
    assert visible.picked == 1 and visible.picked_resolved
    # 7 visible tests: div stays buggy in every attempt; the wrong fixes also fail test_add
    assert [a.score for a in visible.attempts] == pytest.approx([5 / 7, 6 / 7, 5 / 7, 5 / 7])
    # a vote picks the wrong fix two attempts agree on: agent-visible rules can fail
    assert results["majority"].picked == 0 and not results["majority"].picked_resolved
    assert results["oracle"].picked_resolved and results["oracle"].oracle


@pytest.mark.e2e
def test_a_fork_mid_episode_sees_the_parents_files_and_not_its_siblings(calc_layer):
    from swebox.envs.episodes.groups import group

    with group(calc_task(), 1, layers=[calc_layer], config={"max_turns": 6}) as g:
        parent = g[0]
        parent.reset()
        parent.step(bash("echo parent > /testbed/AT_TURN_1"))
        children = parent.fork(2)
        try:
            assert [c.turns for c in children] == [1, 1]
            children[0].step(bash("echo mine > /testbed/CHILD_0"))
            seen = children[1].step(bash("cat /testbed/AT_TURN_1; ls /testbed")).observation
            assert "parent" in seen and "CHILD_0" not in seen
            parent.step(bash("echo later > /testbed/PARENT_LATER"))
            assert "PARENT_LATER" not in children[0].step(bash("ls /testbed")).observation
            children[0].step(apply_patch(GOLD))
            assert children[0].step(SUBMIT).reward == 1.0  # graded against the task's start state
            assert children[1].step(SUBMIT).reward == 0.0
        finally:
            for child in children:
                child.close()


@pytest.mark.e2e
def test_beam_search_finds_the_branch_that_solves_it(calc_layer):
    # depth 1, width 3: the first turn is forked into 3 lines; each tries the next fix in the cycle
    before = sandbox_folders()
    result = beam(
        calc_task(),
        Cycling([WRONG_NOOP, apply_patch(GOLD), WRONG_MUL]),
        width=3,
        depth=1,
        layers=[calc_layer],
        config={"max_turns": 4},
        rule="visible_tests",
    )
    assert result.forks == 1 and len(result.attempts) == 3 and result.resolved_count == 1
    assert result.picked_resolved and result.attempts[result.picked].forked_at == 0
    assert sandbox_folders() <= before  # every sandbox closed


class FixLookSubmit:
    """A scripted policy for trees: turn 1 tries the next fix of a cycle, turn 2 looks at the code, turn 3
    submits; a function of the conversation, so forked lines play it on independently."""

    def __init__(self, fixes: list[str]) -> None:
        self.fixes = itertools.cycle(fixes)

    def __call__(self, messages: list[dict[str, str]]) -> str:
        played = sum(m["role"] == "assistant" for m in messages)
        return next(self.fixes) if played == 0 else LOOK if played == 1 else SUBMIT


LOOK = bash("cd /testbed && grep -n 'return a' calc/ops.py")


@pytest.mark.e2e
def test_beam_records_its_tree_and_the_chosen_path(calc_layer):
    from swebox.trainers.evaluation.eval_search import record

    # width 2, depth 2: line 0 forks line 1 at turn 0; they try the wrong and the gold fix; the visible tests
    # rank line 1 first, so at level 2 it forks line 2 at turn 1, then line 0 forks line 3; all four look, and
    # the two gold lines (1, 2) are kept
    result = beam(
        calc_task(),
        FixLookSubmit([WRONG_MUL, apply_patch(GOLD)]),
        width=2,
        depth=2,
        layers=[calc_layer],
        config={"max_turns": 5},
        rule="visible_tests",
    )
    tree = {n.index: n for n in result.tree}
    assert [(n.parent, n.forked_at) for n in result.tree] == [(None, 0), (0, 0), (1, 1), (0, 1)]
    assert [n.status for n in result.tree] == ["pruned", "ended", "ended", "pruned"]
    assert [t["turn"] for t in tree[0].turns] == [1, 2] and [t["turn"] for t in tree[3].turns] == [2]
    assert [t["turn"] for t in tree[1].turns] == [1, 2, 3] and [t["turn"] for t in tree[2].turns] == [2, 3]
    assert "a * b" in tree[0].turns[0]["action"]["arguments"]["command"]
    assert "2:    return a + b" in tree[2].turns[0]["observation"] and tree[2].turns[0]["exit_code"] == 0
    assert "2:    return a * b" in tree[3].turns[0]["observation"]
    # the rule's values: 7 visible tests, div buggy everywhere, the wrong fix fails test_add too
    assert [(v["level"], v["value"], v["kept"]) for v in tree[0].values] == [
        (1, pytest.approx(5 / 7), True),
        (2, pytest.approx(5 / 7), False),
    ]
    assert [(v["level"], v["kept"]) for v in tree[1].values] == [(1, True), (2, True)]
    assert [(v["value"], v["kept"]) for v in tree[2].values] == [(pytest.approx(6 / 7), True)]
    assert [(v["value"], v["kept"]) for v in tree[3].values] == [(pytest.approx(5 / 7), False)]
    assert [a.index for a in result.attempts] == [1, 2] and result.resolved_count == 2 and result.pruned == 2
    assert result.attempts[result.picked].index == 1 and result.chosen == [0, 1]
    assert result.attempts[0].grade["resolved"] and tree[1].attempt == 0
    # the --out record: the picked attempt's whole conversation through the tree, and the tree itself
    out = record(result)
    assert out["resolved"] and out["reward"] == 1.0 and out["num_turns"] == 3 and out["reason"] == "submitted"
    assert [t["turn"] for t in out["turns"]] == [1, 2, 3] and "+    return a + b" in out["diff"]
    assert out["prompt"][0]["role"] == "system" and out["grade"]["resolved"]
    assert out["audit"] == result.attempts[result.picked].audit and not out["audit"]["flagged"]  # audit "report"
    roles = [m["role"] for m in out["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert out["messages"][-1]["content"] == SUBMIT and "2:    return a + b" in out["messages"][-2]["content"]
    assert out["search"]["chosen"] == [0, 1] and len(out["search"]["tree"]) == 4 and not out["search"]["oracle"]
    # line 2's path: line 1's first turn (before the fork), then its own
    assert [t["turn"] for t in path_turns(result.tree, [0, 1, 2])] == [1, 2, 3]
    assert path_turns(result.tree, [0, 1, 2])[0] is tree[1].turns[0]


@pytest.mark.e2e
def test_budgets_stop_the_search_and_leave_nothing_behind(calc_layer):
    before = sandbox_folders()

    def stalling(messages):  # never submits: only budgets end its lines
        return bash("true")

    result = sample(
        calc_task(),
        5,
        stalling,
        layers=[calc_layer],
        config={"max_turns": 50},
        rule="majority",
        budget=SearchBudget(max_turns=7),
    )
    assert result.turns == 7 and result.budgets_hit == ["max_turns"]
    assert [a.reason for a in result.attempts] == ["budget"]  # one line took every turn; no second started
    result = beam(
        calc_task(),
        stalling,
        width=4,
        depth=2,
        layers=[calc_layer],
        config={"max_turns": 50},
        rule="majority",
        budget=SearchBudget(max_sandboxes=3, max_turns=12),
    )
    assert result.budgets_hit == ["max_sandboxes", "max_turns"] and result.turns == 12
    assert result.sandboxes <= 3 and all(a.reason == "budget" for a in result.attempts)
    with pytest.raises(ValueError, match="max_sandboxes: expected 0 or >= 2"):
        SearchBudget(max_sandboxes=1)
    assert sandbox_folders() <= before


@pytest.mark.e2e
def test_one_hundred_searches_leak_nothing(calc_layer):
    before, fds = sandbox_folders(), len(os.listdir("/proc/self/fd"))
    config = {"max_turns": 1, "grade_on_truncation": False}  # sandboxes and forks, not grading, are tested
    for i in range(100):
        if i % 2:
            sample(calc_task(), 1, lambda m: bash("true"), layers=[calc_layer], config=config, rule="majority")
        else:
            beam(
                calc_task(),
                lambda m: bash("true"),
                width=2,
                depth=1,
                layers=[calc_layer],
                config={**config, "max_turns": 2},
                rule="majority",
            )
    assert sandbox_folders() <= before
    assert len(os.listdir("/proc/self/fd")) <= fds + 2


@pytest.mark.e2e
def test_swebox_eval_reports_pass_at_k_best_of_n_and_beam(calc_layer, tmp_path, capsys):
    import json

    from swebox.envs.tasks import save_jsonl
    from swebox.scripts.cli import main

    from tests.calc import layer_dirs

    tasks = tmp_path / "tasks.jsonl"
    save_jsonl([calc_task(), calc_task(instance_id="calc-add-2")], tasks)
    common = ["eval", "--tasks", str(tasks), "--layers", str(layer_dirs(tmp_path, calc_layer)), "env.max_turns=3"]
    assert main([*common, "--policy", "gold", "--samples", "2", "--out", str(tmp_path / "s.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "pass@k over 2 tasks: pass@1 1.000, pass@2 1.000" in out
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [r["search"]["resolved_count"] for r in rows] == [2, 2] and rows[0]["search"]["sandboxes"] == 2
    assert [r["resolved"] for r in rows] == [True, True] and rows[0]["num_turns"] == 2  # the picked attempts
    assert [(n["parent"], n["status"]) for n in rows[0]["search"]["tree"]] == [(None, "ended"), (None, "ended")]
    assert main([*common, "--policy", "empty", "--best-of", "2", "--select", "oracle"]) == 0
    out = capsys.readouterr().out
    assert "best-of-2, selected by the ORACLE (hidden tests; research only): resolved 0/2 (0.0%)" in out
    assert (
        main([*common, "--policy", "gold", "--search", "beam", "--width", "2", "--depth", "1", "--select", "majority"])
        == 0
    )
    out = capsys.readouterr().out
    assert "beam width 2 depth 1, selected by majority: resolved 2/2 (100.0%)" in out and "forks 2" in out
