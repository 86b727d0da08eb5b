"""The trainer facing broken tasks: a preflight that stops before step 1 naming what is missing and the command
that builds it (which really parses), each task's first environment error logged with its id, and a step whose
error share passes rollout.max_error_frac stopping the run with a clear message."""

from __future__ import annotations

import shlex

import pytest
from swebox.envs.cache import LayerStore
from swebox.trainers.rl.trainer import Trainer, TrainingError
from swebox.trainers.run.config import load_config
from swebox.trainers.run.tracking import read_metrics

from tests.calc import CALC_ENV, calc_task
from tests.trainers.rl.test_rollout import stub_task
from tests.trainers.rl.test_trainer import SMALL, OneTurn, make_trainer


def test_a_task_whose_env_layer_is_missing_stops_the_run_before_step_1(tmp_path, calc_layer):
    from swebox.scripts.cli import build_parser

    store = LayerStore(tmp_path / "store", fmt="tar.gz")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer, kind="env")
    other = calc_task(instance_id="other-1", env={**CALC_ENV.to_dict(), "commit": "fedcba9876543210"})
    tasks = [calc_task(), other]
    cfg = load_config(
        None,
        [
            *SMALL,
            f"logging.run_dir={tmp_path / 'run'}",
            f"env.layer_store={store.root}",
            "env.tasks=/data/tasks.jsonl",
            f"env.cache_dir={tmp_path / 'node'}",
        ],
    )
    with pytest.raises(TrainingError) as err:
        Trainer(cfg, tasks=tasks, echo=lambda *_: None)  # was: 3 steps, exit 0, env/errors 0.25, no task named
    message = str(err.value)
    assert "found 1 problem(s)" in message and "task other-1: its environment" in message
    assert "calc-add" not in message  # the task whose layer is there is fine
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # stopped before step 1
    command = message.split("build it with:\n")[1].split("\n")[0].strip()
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.cache_command, args.store, args.tasks) == ("build", str(store.root), "/data/tasks.jsonl")


class Broken:
    """An episode whose environment fails at reset (as when its sandbox cannot start)."""

    def submit_reply(self) -> None:  # no action style: an episode that fills the context ends unsubmitted
        return None

    def close(self) -> None:
        pass

    def reset(self):
        raise OSError("no sandbox for you")


def half_broken(task, n):
    return [Broken() if task.instance_id == "t1" else OneTurn(task.instance_id) for _ in range(n)]


def test_each_tasks_first_error_is_logged_once_with_its_id(tmp_path):
    lines: list[str] = []
    cfg = load_config(
        None,
        [
            *SMALL,
            f"logging.run_dir={tmp_path / 'run'}",
            "rollout.tasks_per_step=3",
            "rollout.shuffle=false",
            "total_steps=2",
        ],
    )
    trainer = Trainer(cfg, tasks=[stub_task(f"t{i}") for i in range(3)], episode_factory=half_broken, echo=lines.append)
    trainer.train()
    errors = [line for line in lines if line.startswith("episode error")]
    assert errors == ["episode error in task t1 (step 1, first for this task): OSError: no sandbox for you"]
    assert [r["env/errors"] for r in read_metrics(tmp_path / "run")] == pytest.approx([1 / 3, 1 / 3])


def test_an_error_share_past_the_threshold_stops_the_run_with_the_tasks(tmp_path):
    trainer = make_trainer(
        tmp_path, "rollout.tasks_per_step=3", "rollout.shuffle=false", "total_steps=3", "rollout.max_error_frac=0.25"
    )
    trainer.pool.worker.episode_factory = half_broken
    with pytest.raises(
        TrainingError,
        match=r"step 1: expected at most rollout.max_error_frac=0.25 of the episodes "
        r"to fail.*found 4/12 from tasks \['t1'\].*no sandbox for you",
    ):
        trainer.train()
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [1]  # the failing step's metrics are kept
