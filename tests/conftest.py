"""Fixtures of the whole suite: the env layers of the calc project (tests/calc.py) and of the shapes project
(tests/trainers/shapes.py), each built once per test process, and the tiny agent program of the harness tests.

A suite started in the background by a shell without job control (``make test &`` in a script, ``nohup``)
inherits SIGINT ignored, as POSIX has it, and so would every program a test starts: the Ctrl-C tests (eval,
train, predictions) would then send a signal nobody hears. Each test process takes the default an interactive
``make test`` has.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.calc import CALC_FILES
from tests.fixture_env import build_env_layer, discard_env_layer

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def calc_layer() -> Iterator[Path]:
    """An env layer folder: /testbed = the calc project in git (add and div are buggy), /venv with pytest."""
    layer = build_env_layer(CALC_FILES, "calc")
    yield layer.path
    discard_env_layer(layer)


@pytest.fixture
def tiny_agent_install() -> Iterator[str]:
    """A host folder (outside /tmp: each sandbox has its own) with tiny_agent.py, readable by the sandbox."""
    folder = tempfile.mkdtemp(prefix="swebox-tiny-agent-", dir="/var/tmp")
    shutil.copy(Path(__file__).parent / "envs" / "gateway" / "tiny_agent.py", folder)
    os.chmod(folder, 0o755)
    os.chmod(Path(folder) / "tiny_agent.py", 0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def shapes_env(tmp_path_factory):
    """(env layer, tasks, candidates) of tests/trainers/shapes.py: the env layer is built in a real sandbox, like the
    cache builder does. Once per test process (it was once per module: six modules built the same layer); no test
    changes it (sandboxes see layers read-only) or the tasks and candidates (tests copy with dataclasses.replace)."""
    from swebox.envs.tasks import Task

    from tests.trainers.shapes import BUGGY, ORDER, TESTS, _ops, candidate_diffs

    tmp = tmp_path_factory.mktemp("shapes")
    candidates = candidate_diffs(tmp)
    files = {
        "shapes/__init__.py": "",
        "shapes/ops.py": _ops({name: b for name, (b, _) in BUGGY.items()}),
        "tests/test_ops.py": TESTS,
    }
    layer = build_env_layer(files, "shapes")
    tasks = [
        Task(
            instance_id=f"shapes-{name}",
            repo="local/shapes",
            patch=candidates[name][ORDER[i][0]],
            problem_statement=f"{name} returns the wrong value.",
            FAIL_TO_PASS=[f"tests/test_ops.py::test_{name}"],
            PASS_TO_PASS=["tests/test_ops.py::test_double"],
        )
        for i, name in enumerate(BUGGY)
    ]
    yield layer, tasks, candidates
    discard_env_layer(layer)
