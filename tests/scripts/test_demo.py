"""swebox demo: the pure parts (time summary, report, project choice, config) and a shortened demo (e2e: synthesises
real tasks from PyPI, starts Ray, warm-starts with SFT, trains GRPO until the reward rises, evaluates, plots)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import yaml
from swebox.envs.cache import EnvSpec
from swebox.envs.tasks import Task
from swebox.scripts import demo, demo_summary

ROOT = Path(__file__).resolve().parents[2]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser.add_subparsers(dest="command"))
    return parser.parse_args(["demo", *argv])


def test_time_summary_means_and_shares():
    records = [
        {
            "step": 1,
            "timing/step_s": 10.0,
            "timing/rollout_s": 8.0,
            "timing/generate_s": 2.0,
            "timing/env_s": 1.0,
            "timing/grade_s": 3.0,
            "timing/update_s": 1.5,
            "timing/sync_s": 0.5,
            "env/reset_s": 0.01,
        },
        {
            "step": 2,
            "timing/step_s": 6.0,
            "timing/rollout_s": 4.0,
            "timing/generate_s": 2.0,
            "timing/env_s": 0.0,
            "timing/grade_s": 1.0,
            "timing/update_s": 1.5,
            "timing/sync_s": 0.5,
            "env/reset_s": 0.03,
        },
        {"step": 3, "reward/mean": 1.0},  # a record without timing does not count
    ]
    out = demo_summary.time_summary(records)
    assert out["timing/step_s"] == 8.0 and out["timing/rollout_s"] == 6.0
    assert out["env/reset_s"] == pytest.approx(0.02)
    # means: generate 2, env 0.5, grade 2 -> rollout other 6 - 4.5 = 1.5
    assert out["timing/rollout_other_s"] == pytest.approx(1.5)
    assert out["share/env"] == pytest.approx((0.5 + 2.0) / 8.0)
    assert out["share/generate"] == pytest.approx(2.0 / 8.0)
    assert out["share/update"] == pytest.approx(2.0 / 8.0)
    assert demo_summary.time_summary([{"step": 1}]) == {}


def summary_of(first: float, last: float) -> dict:
    return {
        "projects": [
            {"label": "toolz-1.2.0", "tasks": 6, "error": ""},
            {"label": "voluptuous-0.16.0", "tasks": 0, "error": "SandboxError: reset: umount ..."},
        ],
        "tasks": 6,
        "train_tasks": 3,
        "held_out_tasks": 3,
        "steps": 8,
        "nodes": 1,
        "sft": {"steps": 90, "kept": 3, "data": "3 kept", "sequence_prob": 0.21},
        "learning": {"first": first, "last": last, "steps": 8.0, "window": 2.0},
        "stages": {"corpus": 50.0, "train": 25.0},
        "step": {
            "timing/step_s": 8.0,
            "timing/grade_s": 2.0,
            "share/env": 0.3125,
            "share/generate": 0.25,
            "share/update": 0.25,
            "env/reset_s": 0.02,
            "env/exec_s": 0.1,
            "env/grade_s": 1.5,
        },
        "eval": {
            "train": {"reward/resolved_rate": 1.0, "episodes": 3.0},
            "held_out": {"reward/resolved_rate": 0.0, "episodes": 3.0},
        },
    }


def test_summary_markdown_shows_what_it_learnt_stages_step_and_eval():
    text = demo_summary.summary_markdown(summary_of(0.25, 0.8))
    # the project that gave nothing is named with why (it used to read "6 from toolz-1.2.0, voluptuous-0.16.0")
    assert "Tasks: 6 from toolz-1.2.0 (6) (3 for training, 3 held out); a warm start of 90 SFT steps" in text
    assert "then 8 GRPO steps on 1 Ray node(s)" in text
    assert "**voluptuous-0.16.0: 0 tasks** (SandboxError: reset: umount ...)." in text
    assert "`reward/mean` rises, 0.25 over the first 2 steps -> 0.80 over the last 2" in text
    assert "mean probability of 0.21" in text
    assert "resolved 100% of the training tasks and 0% of the held-out tasks" in text
    assert "does not generalise" in text
    assert "| corpus | 50.0 |" in text and "| **total** | **75.0** |" in text
    assert "| `timing/grade_s` | 2.00 | 25% |" in text
    assert "Environment share of a step (resets + commands + grading): **31%**" in text
    assert "### held-out tasks (never trained on)" in text and "- `reward/resolved_rate`: 0.000" in text
    # a flat curve is said to be flat, never "rises"
    flat = demo_summary.summary_markdown(summary_of(0.3, 0.4))
    assert "does NOT rise clearly in this run, 0.30 over the first 2 steps -> 0.40" in flat and " rises," not in flat
    assert "This run does not show learning by GRPO" in flat and "the loop learns" not in flat
    assert "The demo shows that the loop learns" in text


def test_split_tasks_holds_out_the_last_task_of_each_repository():
    from swebox.envs.tasks import Task

    tasks = [
        Task(instance_id=i, repo=r, FAIL_TO_PASS=("t.py::t",))
        for i, r in (("a1", "a"), ("b1", "b"), ("a2", "a"), ("c1", "c"), ("b2", "b"), ("a3", "a"))
    ]
    train, held = demo.split_tasks(tasks)
    assert [t.instance_id for t in train] == ["a1", "b1", "a2", "c1"]  # c has one task: it trains
    assert [t.instance_id for t in held] == ["b2", "a3"]


def test_learning_windows_of_the_reward_curve():
    records = [{"reward/mean": r} for r in (0.1, 0.3, 0.5, 0.6, 0.9, 0.7)] + [{"step": 7}]
    assert demo_summary.learning(records) == {"first": 0.2, "last": 0.8, "steps": 6.0, "window": 2.0}
    assert demo_summary.learning([{"reward/mean": 0.5}]) == {"first": 0.5, "last": 0.5, "steps": 1.0, "window": 1.0}
    assert demo_summary.learning([]) == {}


def test_project_counts_by_task_id():
    tasks = [Task(instance_id=i, FAIL_TO_PASS=("t::a",)) for i in ("toolz-1.2.0.op_swap.1", "toolz-1.2.0.invert_if.2")]
    assert demo.project_counts(["toolz-1.2.0", "voluptuous-0.16.0"], tasks, {"voluptuous-0.16.0": "boom"}) == [
        {"label": "toolz-1.2.0", "tasks": 2, "error": ""},
        {"label": "voluptuous-0.16.0", "tasks": 0, "error": "boom"},
    ]


def test_select_projects_keeps_recipes_and_order():
    recipes = demo.select_projects(demo.DEFAULT_RECIPE, ["voluptuous", "toolz"])
    assert [r.name for r in recipes] == ["voluptuous", "toolz"]
    assert recipes[1].tests == ("toolz",)  # the corpus recipe's test settings come along
    with pytest.raises(demo.DemoError, match=r"unknown \['nope'\]; pick from \[.*'toolz'"):
        demo.select_projects(demo.DEFAULT_RECIPE, ["toolz", "nope"])


def test_demo_config_sets_run_dir_and_tasks_then_overrides(tmp_path):
    cfg = demo.demo_config(demo.DEFAULT_CONFIG, tmp_path, tmp_path / "corpus" / "tasks.jsonl", ["total_steps=7"])
    assert cfg.logging.run_dir == str(tmp_path)
    assert cfg.env.tasks == str(tmp_path / "corpus" / "tasks.jsonl")
    assert cfg.total_steps == 7
    assert cfg.logging.wandb == "offline" and cfg.ray.address == ""
    # the demo's runs share one wandb group; a rerun is another group; the user's own group wins
    assert re.fullmatch(rf"demo-{re.escape(tmp_path.name)}-[0-9a-f]{{6}}", cfg.logging.group), cfg.logging.group
    again = demo.demo_config(demo.DEFAULT_CONFIG, tmp_path, tmp_path / "corpus" / "tasks.jsonl", [])
    assert again.logging.group != cfg.logging.group
    mine = demo.demo_config(demo.DEFAULT_CONFIG, tmp_path, tmp_path / "t.jsonl", ["logging.group=mine"])
    assert mine.logging.group == "mine"


def test_the_demos_evaluation_is_logged_in_its_group(tmp_path):
    from swebox.trainers.run.tracking import read_metrics

    cfg = demo.demo_config(demo.DEFAULT_CONFIG, tmp_path, tmp_path / "t.jsonl", ["logging.wandb=disabled"])
    demo.log_evaluation(
        cfg,
        tmp_path / "eval",
        {
            "train": {"reward/resolved_rate": 0.5, "episodes": 4.0},
            "held_out": {"reward/resolved_rate": 0.0, "episodes": 2.0},
        },
    )
    [record] = read_metrics(tmp_path / "eval")
    assert record["step"] == cfg.total_steps and record["eval/train/reward_resolved_rate"] == 0.5
    assert record["eval/held_out/episodes"] == 2.0


def test_layer_keys_env_layers_first_each_once():
    spec = EnvSpec(source="pypi:toolz==1.2.0", python="3.11", test_deps=("pytest",))
    base = {
        "repo": "toolz",
        "patch": "",
        "problem_statement": "p",
        "FAIL_TO_PASS": ["t::a"],
        "PASS_TO_PASS": ["t::b"],
        "env": spec.to_dict(),
    }
    tasks = [
        Task.from_dict({**base, "instance_id": "a", "task_layer_key": "task-1"}),
        Task.from_dict({**base, "instance_id": "b", "task_layer_key": "task-2"}),
        Task.from_dict({**base, "instance_id": "c", "task_layer_key": "task-1"}),
    ]
    assert demo.layer_keys(tasks) == [spec.key(), "task-1", "task-2"]


def test_arguments_and_bad_budget(capsys):
    args = parse("--out", "x", "--max-tasks", "2", "total_steps=1", "rollout.group_size=2")
    assert args.projects == list(demo.DEFAULT_PROJECTS)
    assert args.overrides == ["total_steps=1", "rollout.group_size=2"]
    assert demo.run(parse("--max-tasks", "0")) == 1
    assert "swebox demo: --max-tasks: expected >= 1; found 0" in capsys.readouterr().err


@pytest.mark.e2e
@pytest.mark.timeout(1200)
def test_demo_warm_start_then_grpo(tmp_path, capsys, monkeypatch):
    """The demo's own path, shortened to one project: real tasks from PyPI, Ray, the SFT warm start on the
    expert episode of the training task (played and graded in a sandbox), GRPO with every reward from real
    grading, eval on the training and the held-out task, plots. (That GRPO's reward rises is NOT asserted: with
    the settings tried so far it stays flat; see docs/training.md.)"""
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setenv("SWEBOX_LAYER_CACHE", str(tmp_path / "node-cache"))
    out = tmp_path / "demo"
    args = parse(
        "--out",
        str(out),
        "--projects",
        "toolz",
        "--max-tasks",
        "2",
        "total_steps=3",
        "rollout.tasks_per_step=1",
        "rollout.group_size=4",
        f"env.cache_dir={tmp_path / 'node-cache'}",
        "logging.progress=false",
    )
    try:
        assert demo.run(args) == 0
    finally:  # the node cache keeps layers mounted for later runs; this test's cache must go with tmp_path
        from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore

        LayerCache(LayerStore(out / "corpus" / "layers"), LayerCacheConfig(root=str(tmp_path / "node-cache"))).close()
        assert str(tmp_path) not in Path("/proc/mounts").read_text()
    printed = capsys.readouterr().out
    for name in ("metrics.jsonl", "summary.md", "reward.png", "timing.png", "wandb", "sft"):
        assert name in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"] == 2 and summary["nodes"] == 1
    assert summary["train_tasks"] == 1 and summary["held_out_tasks"] == 1
    assert set(summary["stages"]) == {"corpus", "ray", "cache", "sft", "train", "eval", "plots"}
    # the warm start: one expert episode kept (resolved by the grader), stopped while only partly right
    sft = [json.loads(line) for line in (out / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert summary["sft"]["kept"] == 1 and summary["sft"]["steps"] == len(sft) < 200
    stop = yaml.safe_load(demo.DEFAULT_CONFIG.read_text())["sft"]["stop_at_sequence_prob"]
    assert sft[-1]["sft/sequence_prob"] >= stop > max(r["sft/sequence_prob"] for r in sft[:-1])
    assert (out / "sft" / "policy" / "config.json").exists()
    # GRPO from its weights and its optimizer moments (the last SFT checkpoint)
    grpo_cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert grpo_cfg["model"]["path"] == str(out / "sft" / "policy")
    assert grpo_cfg["optim"]["moments_from"] == str(out / "sft" / "checkpoints" / f"step_{len(sft):08d}")
    # GRPO from it: every step graded for real (grading time, the grade cache counted)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward/mean"] for r in records]
    assert len(rewards) == 3 and records[0]["timing/grade_s"] > 0 and "env/grade_cache_hits" in records[0]
    assert rewards[0] < 0.9, f"the warm start left nothing to learn: {rewards}"
    assert summary["learning"] == {"first": rewards[0], "last": rewards[-1], "steps": 3.0, "window": 1.0}
    assert summary["eval"]["train"]["episodes"] == 1.0 and summary["eval"]["held_out"]["episodes"] == 1.0
    assert "does not generalise" in (out / "summary.md").read_text()
    assert 0 < summary["step"]["share/env"] <= 1.5
    assert all(Path(p).stat().st_size > 1000 for p in summary["files"]["plots"])
    assert list((out / "wandb").glob("offline-run-*")), "expected the offline wandb run"
    assert (out / "policy" / "config.json").exists()
    import ray

    assert not ray.is_initialized()
