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
    write_calibration(cal, [TaskCalibration(add.instance_id, task_digest(add), 2, 2, 0, 2, 0),
                            TaskCalibration(div.instance_id, task_digest(div), 2, 0, 0, 0, 0)])
    trainer = make_trainer(tmp_path / "run", calc_layer, f"env.calibration={cal}")
    try:
        assert [t.instance_id for t in trainer.tasks] == ["calc-add"]
    finally:
        trainer.close()
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(ConfigError, match=r"^env.calibration .*bad.json: expected a swebox calibration file"):
        make_trainer(tmp_path / "run2", calc_layer, f"env.calibration={tmp_path / 'bad.json'}")
    assert not (tmp_path / "run2").exists()
