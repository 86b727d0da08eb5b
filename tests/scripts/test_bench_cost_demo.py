"""`swebox bench cost-demo`: its arguments and inputs fail with one line, and its in-place timer times the real
calls and puts them back. (The bench itself runs the demo's GRPO steps, minutes; docs/benchmarks.md has a run.)"""

from __future__ import annotations

import pytest
from swebox.scripts.bench_cost_demo import InPlace, demo_inputs, timed_places
from swebox.scripts.cli import build_parser


def run(*argv: str) -> int:
    args = build_parser().parse_args(["bench", "cost-demo", *argv])
    return args.func(args)


def test_bad_arguments_and_a_missing_demo_are_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"^--steps: expected >= 1; found 0; use 3$"):
        run("--steps", "0")
    with pytest.raises(SystemExit, match=r"^--warmup: expected >= 0; found -1; use 1$"):
        run("--warmup", "-1")
    (tmp_path / "demo" / "corpus").mkdir(parents=True)
    (tmp_path / "demo" / "corpus" / "tasks.jsonl").write_text("")
    with pytest.raises(SystemExit) as missing:
        run("--run", str(tmp_path / "demo"))
    said = str(missing.value)
    assert "\n" not in said and "corpus/layers" in said and "sft/policy" in said and "tasks.jsonl" not in said
    assert said.endswith(f"run `swebox demo --out {tmp_path / 'demo'} total_steps=1` first")


def test_in_place_timing_wraps_the_real_calls_and_restores_them():
    from swebox.envs.audit import EpisodeAudit
    from swebox.envs.episodes import episode
    from swebox.envs.sandbox import Sandbox
    from swebox.envs.tasks.graders import grading

    from tests.calc import calc_task

    before = (EpisodeAudit.turn, EpisodeAudit.__init__, Sandbox.usage, grading.provenance, episode.provenance)
    with InPlace(timed_places()) as clock:
        audit = EpisodeAudit(calc_task(), "report")
        found = audit.turn(1, {"tool": "bash", "arguments": {"command": "git log --all"}}, "")
        seconds, calls = clock.take()
        assert calls == {"audit": 2, "provenance": 0, "cost": 0} and set(seconds) == set(calls)
        assert [f["rule"] for f in found] == ["git_history"]  # the real rule ran
        assert clock.take()[1]["audit"] == 0
    assert (EpisodeAudit.turn, EpisodeAudit.__init__, Sandbox.usage, grading.provenance, episode.provenance) == before
    with pytest.raises(SystemExit, match="expected a `swebox demo"):
        demo_inputs("/nonexistent-demo")
