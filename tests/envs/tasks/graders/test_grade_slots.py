"""Node-wide grading slots: flock'ed files shared by every process on the node; the wait is measured."""

from __future__ import annotations

import subprocess
import sys

import pytest
from swebox.envs.tasks.graders.grade_slots import default_slots, grade_slot

HOLD = """
import sys, time
from swebox.envs.tasks.graders.grade_slots import grade_slot
with grade_slot(int(sys.argv[1])):
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture
def slots(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEBOX_GRADE_SLOTS_DIR", str(tmp_path / "slots"))
    return tmp_path / "slots"


def hold_elsewhere(count: int, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(count), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "holding\n"
    return proc


def test_a_full_node_makes_the_next_grading_wait_for_another_process(slots):
    other = hold_elsewhere(1, 1.5)
    try:
        with grade_slot(1) as waited:
            assert waited > 0  # the other process held the only slot
        with grade_slot(1) as waited:
            assert waited == 0.0  # free at the first look
    finally:
        other.wait()


def test_a_free_slot_is_taken_at_once_and_a_killed_holder_frees_its_slot(slots):
    other = hold_elsewhere(2, 60)
    try:
        with grade_slot(2) as waited:
            assert waited == 0.0  # the second of two slots, free at the first look
        other.kill()
        other.wait()
        with grade_slot(1) as waited:
            assert waited == 0.0  # the dead holder's lock went with it
    finally:
        other.kill()
        other.wait()


def test_slot_count_defaults_to_the_cpus():
    assert default_slots() >= 1
    with pytest.raises(ValueError, match="expected at least 1"), grade_slot(-1):
        pass
