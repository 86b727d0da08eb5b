"""Shared by the episode tests (test_swe_env*, test_gym_env*, test_skyrl_env*, test_group*): the calc fixture
project of tests/envs/tasks/conftest.py as an env layer, built once per test process, and scripted replies.

Not a conftest (the tests of other folders do not need it): test modules import ``calc_layer`` and the
helpers. The layer is built the way the cache builder builds real ones, inside a sandbox.
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path

import pytest
from swebox.envs.cache import EnvSpec
from swebox.envs.tasks import Task

from tests.envs.tasks.conftest import CALC_FILES, GOLD_ADD
from tests.fixture_env import build_env_layer, discard_env_layer

_lock = threading.Lock()
_built: dict[str, Path] = {}


def _build() -> Path:
    layer = build_env_layer(CALC_FILES, "calc")
    atexit.register(discard_env_layer, layer)
    return layer.path


@pytest.fixture(scope="session")
def calc_layer() -> Path:
    """An env layer folder: /testbed = the calc project in git (add and div are buggy), /venv with pytest."""
    with _lock:
        if "calc" not in _built:
            _built["calc"] = _build()
        return _built["calc"]


CALC_ENV = EnvSpec(source="/fixture/calc", commit="0123456789abcdef")
"""A stand-in env spec: its key names the calc layer's folder in a layer-dirs folder."""


def calc_task(**fields) -> Task:
    """The calc task: add is the bug (F2P test_add); the other tests must keep passing."""
    base = dict(
        instance_id="calc-add",
        repo="local/calc",
        patch=GOLD_ADD,
        problem_statement="add(2, 3) returns -1 instead of 5.",
        FAIL_TO_PASS=["tests/test_ops.py::test_add"],
        PASS_TO_PASS=[
            "tests/test_ops.py::test_sub",
            "tests/test_ops.py::test_mul",
            "tests/test_ops.py::test_mul_commutes[1-2]",
            "tests/test_ops.py::test_mul_commutes[0-0]",
            "tests/test_ops.py::TestMore::test_sub_negative",
        ],
        env=CALC_ENV,
    )
    base.update(fields)
    return Task(**base)


def layer_dirs(tmp_path: Path, calc: Path) -> Path:
    """A LayerSource.dirs folder holding the calc layer under its env key (a symlink)."""
    root = tmp_path / "layer-dirs"
    root.mkdir()
    (root / CALC_ENV.key()).symlink_to(calc)
    return root


def bash(command: str) -> str:
    """A bash_block reply running ``command``."""
    return f"I will run a command.\n```bash\n{command}\n```"


def apply_patch(diff: str) -> str:
    """A bash_block reply that applies ``diff`` with git apply from a here-document."""
    return bash(f"cd /testbed && git apply <<'SWEBOX_EOF'\n{diff}SWEBOX_EOF")


SUBMIT = bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
GOLD = GOLD_ADD
