"""`swebox bench grade-cache` and `swebox bench cost` run the trainer's rollout path with the scripted gold policy:
both run end to end on a real task (calc) in real sandboxes and print their tables (grade-cache once broke when
trajectories stopped being dicts, and nothing ran it)."""

from __future__ import annotations

import pytest
from swebox.envs.cache import LayerStore
from swebox.scripts.cli import build_parser

from tests.calc import CALC_ENV, calc_task

pytestmark = pytest.mark.e2e


@pytest.fixture
def bench_args(calc_layer, tmp_path, monkeypatch):
    store = LayerStore(tmp_path / "layers")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(calc_task().to_json() + "\n")
    monkeypatch.setenv("SWEBOX_LAYER_CACHE", str(tmp_path / "node"))
    return ["--tasks", str(tasks), "--store", str(store.root), "--limit", "1", "--group-size", "2", "--reps", "1"]


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


def test_grade_cache_bench_grades_once_per_group_then_serves_the_second_step(bench_args, capsys):
    assert _run(["bench", "grade-cache", *bench_args]) == 0
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in capsys.readouterr().out.splitlines()}
    # | step | cache | rollout p50 | graded (tests run) | served from cache | reward/mean | env/grade_s |
    cells = {key: [c.strip() for c in line.split("|")[4:7]] for key, line in rows.items() if len(key) == 2}
    assert cells[("1", "off")] == ["2", "0", "1.00"], cells
    assert cells[("1", "on")] == ["1", "1", "1.00"], cells
    assert cells[("2", "on")] == ["0", "2", "1.00"], cells


def test_cost_bench_reads_every_gold_rollouts_cost(bench_args, capsys):
    # the bench itself fails unless every rollout resolves and, with env.cost on, carries its CPU seconds
    assert _run(["bench", "cost", *bench_args]) == 0
    out = capsys.readouterr().out
    assert "| off |" in out and "| on |" in out and "reading the cost, timed in place" in out, out
