"""``env.calibration``: the trainer trains only on the tasks a calibration file keeps, says what it left out,
and refuses an unusable file before anything is written. (The calibration itself is graded for real in
tests/envs/tasks/test_calibrate.py; here the file is written from known counts: this tests the wiring.)"""

from __future__ import annotations

import pytest
from swebox.envs.tasks.calibrate import TaskCalibration, write_calibration
from swebox.envs.tasks.graders.provenance import task_digest
from swebox.trainers.run.config import ConfigError

from tests.trainers.tiny_run import calc_tasks, make_trainer


def test_the_trainer_keeps_the_usable_tasks_and_refuses_a_bad_file(tmp_path, calc_layer):
    add, div = calc_tasks()
    cal = tmp_path / "cal.json"
    write_calibration(
        cal,
        [
            TaskCalibration(add.instance_id, task_digest(add), 2, 2, 0, 2, 0),
            TaskCalibration(div.instance_id, task_digest(div), 2, 0, 0, 0, 0),
        ],
    )
    trainer = make_trainer(tmp_path / "run", calc_layer, f"env.calibration={cal}")
    try:
        assert [t.instance_id for t in trainer.tasks] == ["calc-add"]
    finally:
        trainer.close()
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(ConfigError, match=r"^env.calibration .*bad.json: expected a swebox calibration file"):
        make_trainer(tmp_path / "run2", calc_layer, f"env.calibration={tmp_path / 'bad.json'}")
    assert not (tmp_path / "run2").exists()


def curriculum_trainer(tmp_path, layer, tasks, *overrides: str, echo=None):
    """A trainer over ``tasks`` (nothing played: the curriculum is the task list and the sampler's order)."""
    from swebox.trainers.policy.models import build_model, build_tokenizer
    from swebox.trainers.rl.rollout import LocalWorkerPool
    from swebox.trainers.rl.trainer import Trainer
    from swebox.trainers.run.config import load_config

    from tests.trainers.tiny_run import SMALL, swe_episode_factory

    cfg = load_config(None, [*SMALL, f"logging.run_dir={tmp_path / 'run'}", *overrides])
    tokenizer = build_tokenizer(cfg.model)
    pool = LocalWorkerPool(
        cfg, swe_episode_factory(cfg, layers=[layer]), model=build_model(cfg.model, tokenizer), tokenizer=tokenizer
    )
    return Trainer(cfg, pool, tasks=tasks, echo=echo or (lambda *_: None))


def test_the_curriculum_orders_tasks_by_the_policys_solve_rate(tmp_path, calc_layer):
    from tests.calc import calc_task

    add, div = calc_tasks()
    b, c, d = (calc_task(instance_id=f"calc-{x}") for x in "bcd")
    played = {"calc-add": 1, "calc-div": 2, "calc-b": 1}  # of 2 runs: div 1.0, add and b 0.5 (a tie: by id)
    cal = tmp_path / "cal.json"
    write_calibration(
        cal,
        [
            TaskCalibration(
                t.instance_id,
                task_digest(t),
                2,
                2,
                0,
                2,
                0,
                policy=(
                    {"name": "gold", "resolved": played[t.instance_id], "runs": 2} if t.instance_id in played else None
                ),
            )
            for t in (add, div, b, c)
        ],
    )  # c: no policy entry; d: not in the file
    given = [d, c, b, div, add]
    expected = {
        "none": ["calc-d", "calc-c", "calc-b", "calc-div", "calc-add"],
        "easy_first": ["calc-div", "calc-add", "calc-b", "calc-d", "calc-c"],
        "hard_first": ["calc-add", "calc-b", "calc-div", "calc-d", "calc-c"],
    }
    for order, ids in expected.items():
        said: list[str] = []
        trainer = curriculum_trainer(
            tmp_path / order,
            calc_layer,
            given,
            f"env.calibration={cal}",
            f"env.calibration_order={order}",
            echo=said.append,
        )
        try:
            assert [t.instance_id for t in trainer.tasks] == ids
            visits = [trainer.tasks[i].instance_id for i in trainer.sampler.take(10)]
            if order == "none":  # the seeded shuffle as before
                assert trainer.sampler.shuffle
            else:  # the order replaces the shuffle: every epoch the same curriculum
                assert visits == ids + ids
                assert said[-1] == (
                    f"calibration order: {order} by the policy's solve rate over 3 tasks ("
                    + ", ".join(f"{i} {played[i] / 2:.2f}" for i in ids[:3])
                    + "); 2 without a policy entry last"
                )
        finally:
            trainer.close()


def test_a_bad_calibration_order_is_one_line(tmp_path):
    from swebox.trainers.run.config import load_config

    with pytest.raises(ConfigError) as bad:
        load_config(None, ["env.calibration=cal.json", "env.calibration_order=random"])
    assert str(bad.value) == (
        "env.calibration_order: expected one of none, easy_first, hard_first; found 'random'; pick one of them"
    )
    with pytest.raises(ConfigError, match=r"^env.calibration_order: expected 'none' without env.calibration") as bad:
        load_config(None, ["env.calibration_order=easy_first"])
    assert "\n" not in str(bad.value)
